"""The operator Web UI at ``/ui/``: server-rendered pages, no scripts, no build.

Shows the selected contract, the clock, fault scenarios (enable, disable, one
rule at a time), the inventory and the tasks with their logs.  Forms post to
``/ui/actions/*`` and come back to the page (303).  A laboratory surface:
mounted only with ``PROXMOX_SIMULATOR_LAB`` set.
"""

from __future__ import annotations

from html import escape
from urllib.parse import quote

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse

from proxmox_simulator.api import simulation_lab
from proxmox_simulator.domain import fault_service, inventory_service
from proxmox_simulator.domain.errors import PveError
from proxmox_simulator.repositories import guests as guest_repo
from proxmox_simulator.repositories import inventory
from proxmox_simulator.repositories import tasks as task_repo
from proxmox_simulator.runtime import Runtime
from proxmox_simulator.simulation.clock import ManualClock

_STYLE = """
body{font:14px system-ui,sans-serif;margin:1.5rem;color:#222}
h1{font-size:1.4rem}h2{font-size:1.1rem;margin-top:1.8rem;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:.4rem 0}td,th{border:1px solid #ddd;padding:.2rem .5rem;
text-align:left}th{background:#f4f4f4}form{display:inline}.off{color:#a00}.on{color:#070}
.note{color:#666}pre{background:#f7f7f7;padding:.6rem;overflow:auto}
"""
_TASK_LIMIT = 50


def _page(title: str, body: str, status: int = 200) -> HTMLResponse:
    html = (
        f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body>{body}</body></html>"
    )
    return HTMLResponse(html, status_code=status)


def _table(headers: list[str], rows: list[list[str]], table_id: str) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table id={table_id}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _button(action: str, label: str, fields: dict | None = None, test_id: str = "") -> str:
    hidden = "".join(
        f"<input type=hidden name={escape(k)} value='{escape(str(v))}'>"
        for k, v in (fields or {}).items()
    )
    tid = f" data-testid='{escape(test_id)}'" if test_id else ""
    return (
        f"<form method=post action='{escape(action)}'>{hidden}"
        f"<button type=submit{tid}>{escape(label)}</button></form>"
    )


def _contract_section(rt: Runtime) -> str:
    contract = rt.contract
    profile = getattr(rt.settings, "profile", None)
    profile_text = f", profile <b>{escape(str(profile))}</b>" if profile else ""
    return (
        "<h2>Contract</h2>"
        f"<p id=contract>PVE major <b>{contract.major}</b> (snapshot {escape(contract.version)})"
        f"{profile_text} — <a href='/ui/contract'>switch major / profile, compatibility</a></p>"
    )


def _clock_section(rt: Runtime) -> str:
    out = (
        f"<h2>Clock</h2><p id=clock>mode <b>{escape(rt.settings.clock)}</b>, "
        f"simulated time {rt.clock.now():.1f}</p>"
    )
    if isinstance(rt.clock, ManualClock):
        out += (
            "<form method=post action='/ui/actions/clock/advance'>"
            "<input name=seconds value=10 size=6> s "
            "<button type=submit data-testid=advance>advance</button></form>"
        )
    return out


def _faults_section(rt: Runtime) -> str:
    snap = rt.faults.snapshot()
    active = snap["active"]
    out = ["<h2>Faults</h2>"]
    if active is None:
        out.append("<p id=fault-status>no scenario enabled</p>")
    else:
        out.append(
            f"<p id=fault-status>scenario <b>{escape(active['name'])}</b> seed {active['seed']} "
            f"(generation {active['generation']}) "
            + _button("/ui/actions/faults/disable", "disable scenario", test_id="disable")
            + "</p>"
        )
        rows = []
        for index, rule in enumerate(active["rules"]):
            state = "<span class=on>on</span>" if rule["enabled"] else "<span class=off>off</span>"
            toggle = _button(
                f"/ui/actions/faults/rules/{index}",
                "disable" if rule["enabled"] else "enable",
                {"enabled": 0 if rule["enabled"] else 1},
                test_id=f"rule-{index}",
            )
            rows.append(
                [
                    escape(rule["name"]),
                    escape(rule["kind"]),
                    f"{rule['probability']:g}",
                    escape(_rule_scope(rule)),
                    state,
                    toggle,
                ]
            )
        out.append(
            _table(["rule", "kind", "probability", "applies to", "state", ""], rows, "rules")
        )
        counts = ", ".join(f"{escape(k)}: {v}" for k, v in sorted(snap["injections"].items()))
        out.append(f"<p id=injections>injected: {counts or 'nothing yet'}</p>")
    rows = []
    for scenario in fault_service.scenario_list():
        name = scenario["name"]
        form = (
            "<form method=post action='/ui/actions/faults/enable'>"
            f"<input type=hidden name=name value='{escape(name)}'>"
            f"seed <input name=seed value=1 size=5 aria-label='seed for {escape(name)}'> "
            f"<button type=submit data-testid='enable-{escape(name)}'>enable</button></form>"
        )
        rows.append([escape(name), escape(scenario["description"]), form])
    out.append(_table(["scenario", "what it does", ""], rows, "scenarios"))
    return "".join(out)


def _rule_scope(rule: dict) -> str:
    parts = []
    if rule["methods"]:
        parts.append("/".join(rule["methods"]))
    for key in ("path", "node", "storage"):
        if rule[key]:
            parts.append(f"{key} {rule[key]}")
    if rule["task_types"]:
        parts.append("tasks " + ",".join(rule["task_types"]))
    return " ".join(parts) or "everything it can"


async def _inventory_section(rt: Runtime) -> str:
    async with rt.pool.acquire() as conn:
        nodes = await inventory.nodes(conn)
        guests = await guest_repo.resource_rows(conn)
        storages = await inventory.storages(conn)
    offline = rt.faults.offline_nodes()
    pveversion = inventory_service.node_release(rt.contract.version, rt.adapter)["pveversion"]
    node_rows = [
        [
            escape(n["node"]),
            "online" if n["online"] and n["node"] not in offline else "offline",
            str(n["cpus"]),
            f"{n['maxmem'] / 2**30:.0f} GiB",
            escape(pveversion),
        ]
        for n in nodes
    ]
    guest_rows = [
        [
            str(g["vmid"]),
            escape(g["name"]),
            escape(g["type"]),
            escape(g["node"]),
            escape(g["status"]) + (" (template)" if g["template"] else ""),
        ]
        for g in guests
    ]
    storage_rows = [
        [
            escape(s["storage"]),
            escape(s["type"]),
            escape(s["content"]),
            "shared" if s["shared"] else "local",
            "" if s["enabled"] else "disabled",
        ]
        for s in storages
    ]
    return (
        "<h2>Inventory</h2><h3>Nodes</h3>"
        + _table(["node", "status", "cpus", "memory", "version"], node_rows, "nodes")
        + f"<h3>Guests ({len(guests)})</h3>"
        + _table(["vmid", "name", "type", "node", "status"], guest_rows, "guests")
        + "<h3>Storage</h3>"
        + _table(["storage", "type", "content", "", ""], storage_rows, "storage")
    )


async def _tasks_section(rt: Runtime) -> str:
    async with rt.pool.acquire() as conn:
        rows = await task_repo.list_tasks(
            conn,
            node=None,
            typefilter=None,
            userfilter=None,
            vmid=None,
            source="all",
            errors=False,
            start=0,
            limit=_TASK_LIMIT,
        )
    table_rows = [
        [
            f"<a href='/ui/tasks/{quote(r['upid'], safe='')}'>{escape(r['upid'])}</a>",
            escape(r["type"]),
            escape(r["id"]),
            escape(r["userid"]),
            escape(r["exitstatus"] if r["state"] == "stopped" else r["state"]),
        ]
        for r in rows
    ]
    return f"<h2>Tasks</h2><p class=note>the newest {_TASK_LIMIT}</p>" + _table(
        ["UPID", "type", "id", "user", "status"], table_rows, "tasks"
    )


def _error_page(exc: PveError) -> HTMLResponse:
    details = "".join(
        f"<li><b>{escape(k)}</b>: {escape(v)}</li>" for k, v in (exc.errors or {}).items()
    )
    return _page(
        "refused",
        f"<h1>{escape(exc.message)}</h1><ul id=errors>{details}</ul><a href='/ui/'>back</a>",
        status=exc.status if 400 <= exc.status < 600 else 400,
    )


def _back() -> RedirectResponse:
    return RedirectResponse("/ui/", status_code=303)


def add_routes(app: FastAPI) -> None:
    @app.get("/ui", include_in_schema=False)
    async def ui_root():
        return _back()

    @app.get("/ui/", include_in_schema=False)
    async def overview(request: Request):
        rt: Runtime = request.app.state.rt
        body = (
            "<h1>Proxmox VE API simulator</h1>"
            "<p class=note>Laboratory surface without a login: whoever reaches this port "
            "controls the simulation.</p>"
            + _contract_section(rt)
            + _clock_section(rt)
            + _faults_section(rt)
            + await _inventory_section(rt)
            + await _tasks_section(rt)
        )
        return _page("Proxmox VE API simulator", body)

    @app.get("/ui/tasks/{upid:path}", include_in_schema=False)
    async def task_page(request: Request, upid: str):
        rt: Runtime = request.app.state.rt
        async with rt.pool.acquire() as conn:
            row = await task_repo.get(conn, upid)
            if row is None:
                return _error_page(PveError(f"no such task '{upid}'", status=404))
            lines, _total = await task_repo.log(conn, upid, 0, 10_000)
        status = row["exitstatus"] if row["state"] == "stopped" else row["state"]
        body = (
            f"<h1>Task {escape(row['type'])} {escape(row['id'])}</h1>"
            f"<p>UPID <code>{escape(upid)}</code>, node {escape(row['node'])}, "
            f"user {escape(row['userid'])}, status <b id=task-status>{escape(status)}</b></p>"
            f"<pre id=task-log>{escape(chr(10).join(line['t'] for line in lines))}</pre>"
            "<a href='/ui/'>back</a>"
        )
        return _page(f"task {upid}", body)

    async def act(request: Request, action) -> HTMLResponse | RedirectResponse:
        try:
            simulation_lab.same_origin(request)
            await action(request.app.state.rt, await simulation_lab.read_body(request))
        except PveError as exc:
            return _error_page(exc)
        return _back()

    @app.post("/ui/actions/faults/enable", include_in_schema=False)
    async def enable(request: Request):
        return await act(request, simulation_lab.enable_from_params)

    @app.post("/ui/actions/faults/disable", include_in_schema=False)
    async def disable(request: Request):
        async def run(rt, _params):
            await fault_service.disable(rt.pool, rt.faults)

        return await act(request, run)

    @app.post("/ui/actions/faults/rules/{index}", include_in_schema=False)
    async def toggle(request: Request, index: str):
        async def run(rt, params):
            enabled = simulation_lab.parse_bool(params.get("enabled", ""), "enabled")
            await fault_service.set_rule_enabled(rt.pool, rt.faults, index, enabled)

        return await act(request, run)

    @app.post("/ui/actions/clock/advance", include_in_schema=False)
    async def advance(request: Request):
        async def run(rt, params):
            seconds = simulation_lab.advance_seconds(params)
            if not isinstance(rt.clock, ManualClock):
                raise PveError("the clock is not in manual mode", status=400)
            rt.clock.advance(seconds)

        return await act(request, run)
