"""Operator surfaces outside ``/api2``: OpenAPI, metrics, and the contract laboratory.

``/openapi.json`` and ``/metrics`` describe the process and are always served.
The laboratory (``/ui/contract``, ``/ui/api/contract*``, ``/admin/compatibility*``)
has no admin credential of its own: it exists only with ``PROXMOX_SIMULATOR_LAB=1``,
and whoever can reach the port can use it.
"""

from __future__ import annotations

import asyncio
import functools
import html

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from proxmox_simulator.api import render
from proxmox_simulator.api.compatibility import compatibility_report, report_for
from proxmox_simulator.contracts.observations import ObservationError
from proxmox_simulator.contracts.selection import PROFILES, SWAPPABLE_MAJORS, ContractUnavailable
from proxmox_simulator.domain.errors import ParameterError, PveError
from proxmox_simulator.observability import metrics
from proxmox_simulator.repositories import tasks as task_repo

OPENAPI_URL = "/openapi.json"


def add_observability_routes(app: FastAPI) -> None:
    @app.get(OPENAPI_URL, include_in_schema=False)
    async def openapi(request: Request):
        selection = request.app.state.contracts.current
        body = await asyncio.to_thread(lambda: selection.openapi)
        return Response(body, media_type="application/json")

    @app.get("/metrics", include_in_schema=False)
    async def prometheus(request: Request):
        rt = request.app.state.rt
        async with rt.pool.acquire() as conn:
            metrics.set_task_gauges(*await task_repo.queue_depth(conn))
        body, content_type = metrics.exposition()
        return Response(body, media_type=content_type)


def _major(value) -> int | None:
    if value in (None, ""):
        return None
    try:
        major = int(value)
    except (TypeError, ValueError):
        raise ParameterError({"major": "type check ('integer') failed"}) from None
    if major not in SWAPPABLE_MAJORS:
        raise ParameterError(
            {"major": f"value must be one of {', '.join(map(str, SWAPPABLE_MAJORS))}"}
        )
    return major


def _profile(value) -> str | None:
    if value in (None, ""):
        return None
    if value not in PROFILES:
        raise ParameterError(
            {
                "profile": f"value '{value}' does not have a value in the enumeration '{', '.join(PROFILES)}'"
            }
        )
    return value


async def apply_contract(app: FastAPI, major: int | None, profile: str | None) -> dict:
    """Swap the process's contract; the new table is built off the event loop."""
    state = app.state.contracts
    try:
        selection = await asyncio.to_thread(state.apply, major, profile)
    except ContractUnavailable as exc:
        raise ParameterError({"major": str(exc)}) from None
    except ObservationError as exc:
        raise PveError(str(exc), status=500) from None
    metrics.record_contract(
        selection.contract.version, selection.contract.major, selection.profile, swapped=True
    )
    await asyncio.to_thread(lambda: selection.openapi)
    return selection.describe()


async def _form(request: Request) -> dict:
    from proxmox_simulator.api.app import _read_params

    return await _read_params(request)


def add_contract_lab_routes(app: FastAPI) -> None:
    @app.get("/ui/api/contract", include_in_schema=False)
    async def contract_state(request: Request):
        return render.success(request.app.state.contracts.current.describe(), "json")

    @app.post("/ui/api/contract/apply", include_in_schema=False)
    async def contract_apply(request: Request):
        try:
            params = await _form(request)
            major, profile = _major(params.get("major")), _profile(params.get("profile"))
            if major is None and profile is None:
                raise ParameterError({"major": "property is missing and it is not optional"})
            described = await apply_contract(request.app, major, profile)
        except PveError as exc:
            return render.error(exc, "json")
        if "text/html" in request.headers.get("accept", "") and params.get("redirect"):
            return RedirectResponse("/ui/contract", status_code=303)
        return render.success(described, "json")

    @app.get("/ui/contract", include_in_schema=False)
    async def contract_page(request: Request):
        return HTMLResponse(_contract_page(request.app.state.contracts.current.describe()))

    @app.get("/admin/compatibility.json", include_in_schema=False)
    async def compatibility_json(request: Request):
        try:
            report = await _report(request)
        except PveError as exc:
            return render.error(exc, "json")
        return JSONResponse(report)

    @app.get("/admin/compatibility", include_in_schema=False)
    async def compatibility_page(request: Request):
        try:
            report = await _report(request)
        except PveError as exc:
            return HTMLResponse(f"<p>{html.escape(exc.message)}</p>", status_code=exc.status)
        return HTMLResponse(_report_page(report))


async def _report(request: Request) -> dict:
    params = request.query_params
    major, profile = _major(params.get("major")), _profile(params.get("profile"))
    current = request.app.state.contracts.current
    if major in (None, current.declared.major):
        return await asyncio.to_thread(
            compatibility_report, current.declared, profile or current.profile, current.observation
        )
    try:
        state = request.app.state.contracts
        return await asyncio.to_thread(
            functools.partial(report_for, apidoc_dir=state.apidoc_dir),
            major,
            profile or current.profile,
            state.data_dir,
        )
    except ContractUnavailable as exc:
        raise ParameterError({"major": str(exc)}) from None


_STYLE = (
    "body{font-family:sans-serif;margin:2em;max-width:60em}"
    "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left}"
)
_TRUST = (
    "<p><small>Laboratory surface: no credential protects it; network exposure is its "
    "trust boundary.</small></p>"
)


def _contract_page(state: dict) -> str:
    esc = html.escape
    majors = "".join(
        f'<option value="{m}"{" selected" if m == state["major"] else ""}>{m}</option>'
        for m in SWAPPABLE_MAJORS
    )
    profiles = "".join(
        f'<option value="{p}"{" selected" if p == state["profile"] else ""}>{p}</option>'
        for p in PROFILES
    )
    rows = "".join(
        f"<tr><th>{esc(k)}</th><td id='contract-{esc(k)}'>{esc(str(v))}</td></tr>"
        for k, v in state.items()
        if k != "counts"
    )
    counts = state["counts"]
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>Contract</title>
<style>{_STYLE}</style></head><body>
<p><a href="/ui/">Simulator</a> &rsaquo; Contract</p>
<h1>Selected contract: PVE {esc(state["version"])} ({esc(state["profile"])})</h1>
<table>{rows}<tr><th>paths / methods</th><td>{counts["paths"]} / {counts["methods"]}</td></tr></table>
<h2>Swap</h2>
<form method="post" action="/ui/api/contract/apply" id="swap">
<input type="hidden" name="redirect" value="1">
<label>Major <select name="major">{majors}</select></label>
<label>Profile <select name="profile">{profiles}</select></label>
<button type="submit">Apply</button>
</form>
<p>The swap replaces this process's route table only; a restart returns to the configured
snapshot. <a href="/admin/compatibility">Compatibility report</a> ·
<a href="/openapi.json">OpenAPI document</a> · <a href="/metrics">metrics</a></p>
{_TRUST}</body></html>"""


def _report_page(report: dict) -> str:
    esc = html.escape
    handled = report["handled"]
    lines = [
        f"<tr><th>declared</th><td>{report['declared']['methods']} methods, "
        f"{report['declared']['paths']} paths</td></tr>",
        f"<tr><th>handled</th><td>{handled['methods']} of {handled['of']}</td></tr>",
    ]
    observed, differing = report["observed"], report["differing"]
    if observed:
        lines.append(
            f"<tr><th>observed</th><td>{observed['methods']} methods recorded from PVE "
            f"{esc(observed['version'])} ({esc(observed['id'])}): {observed['present']} present, "
            f"{observed['absent']} absent, {observed['forbidden']} forbidden</td></tr>"
        )
        counts = differing["counts"]
        lines.append(
            f"<tr><th>differing</th><td>{counts['declared_but_absent']} declared but absent, "
            f"{counts['observed_not_declared']} observed but not declared, "
            f"{counts['returns']} return shapes</td></tr>"
        )
    else:
        lines.append("<tr><th>observed</th><td>no recorded observations</td></tr>")

    def listing(title, items):
        if not items:
            return ""
        entries = "".join(f"<li><code>{esc(i)}</code></li>" for i in items)
        return f"<h2>{esc(title)}</h2><ul>{entries}</ul>"

    details = listing("Unhandled (501)", handled["unhandled_501"])
    if differing:
        details += listing(
            "Declared but absent on the observed server", differing["declared_but_absent"]
        )
        details += listing("Observed but not declared", differing["observed_not_declared"])
        details += listing("Return shapes differing", list(differing["returns"]))
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>Compatibility</title>
<style>{_STYLE}</style></head><body>
<p><a href="/ui/">Simulator</a> &rsaquo; <a href="/ui/contract">Contract</a> &rsaquo; Compatibility</p>
<h1>PVE {esc(report["version"])} — profile {esc(report["profile"])}</h1>
<table id="summary">{"".join(lines)}</table>{details}{_TRUST}</body></html>"""
