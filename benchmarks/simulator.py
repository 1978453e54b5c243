"""Proxmox VE simulator benchmark: prints figures, asserts nothing.

What it measures, all over loopback with one uvicorn process per server and
the same server settings (httptools, uvloop, no TLS, no access log):

* ``GET /api2/json/nodes/{node}/qemu`` listing 1,000 guests, authenticated
  with a ticket cookie and with an API token (and once more with the
  rendered-list cache disabled, so PostgreSQL renders every response);
* a bare FastAPI endpoint returning the same JSON document with
  ``JSONResponse`` (the framework's floor for that payload);
* task latency with an instant clock: ``POST .../status/start`` until the
  task reports ``stopped``, observed by a client polling its status, and
  server-side from the task's ``created`` to ``finished`` events;
* the same token-authenticated listing with a fault scenario enabled
  (``flaky-api``: 5 % bursts of HTTP 500; ``slow-api``: +200 ms on half the
  requests; a rule that is evaluated on every request but never fires, for
  the engine's own cost), next to the run without faults (``--skip-faults``
  leaves it out);
* the seeded 10,000-guest profile (``xlarge``: 16 nodes): ``GET
  /cluster/resources`` (every guest, node and storage) and ``GET
  /nodes/{n}/qemu`` of one node, with an API token (``--skip-10k`` leaves it out);
* the time a runtime contract hot-swap (``POST /ui/api/contract/apply``, majors
  9 ↔ 8) takes while the guest list is under load, next to the same swap on an
  idle server, and the load's throughput with swaps next to without
  (``--skip-swap`` leaves it out, ``--only-swap`` runs only it; needs the 8.4.5
  viewer schema in ``PROXMOX_SIMULATOR_APIDOC_DIR`` or ``../shared/pve-apidoc``).

The load generator is this process (asyncio + httpx, N concurrent
connections, bounded by request count and time); each server is a separate
subprocess.  A throwaway ``pvesim_bench_<pid>`` database (prefix from
``PROXMOX_SIMULATOR_BENCH_DB_PREFIX``) is created and dropped.

    uv run python benchmarks/simulator.py [--requests 2000] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager

import asyncpg
import httpx
from proxbox_processes import free_port, stop_process, wait_for_http, wait_until

ROOT_PASSWORD = "bench-password"


def _admin_url() -> str:
    return os.environ.get("PROXBOX_DATABASE_URL") or "postgresql://postgres@127.0.0.1:5432/postgres"


async def _admin(sql: str) -> None:
    conn = await asyncpg.connect(_admin_url())
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@contextmanager
def bench_database():
    # A prefix of one's own keeps parallel runs on a shared server apart.
    prefix = os.environ.get("PROXMOX_SIMULATOR_BENCH_DB_PREFIX", "pvesim_bench")
    name = f"{prefix}_{os.getpid()}"
    asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    asyncio.run(_admin(f'CREATE DATABASE "{name}"'))
    url = _admin_url().rpartition("/")[0] + f"/{name}"
    try:
        yield url
    finally:
        asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def _cli(url: str, *args: str) -> str:
    env = {**os.environ, "PROXMOX_SIMULATOR_DATABASE_URL": url}
    done = subprocess.run(
        [sys.executable, "-m", "proxmox_simulator.cli", *args],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return done.stdout.strip()


@contextmanager
def background(cmd: list[str], env: dict, port: int):
    # Server output goes to a file, never to an unread pipe that could fill and block it.
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=log)
        try:
            try:
                wait_for_http(f"http://127.0.0.1:{port}/healthz", proc, timeout=30, interval=0.1)
            except RuntimeError as exc:
                log.seek(0)
                raise RuntimeError(f"{exc}: {log.read().decode(errors='replace')}") from None
            yield f"http://127.0.0.1:{port}"
        finally:
            stop_process(proc, timeout=15)


# -- the bare comparison server ---------------------------------------------------


def run_bare_server(port: int, payload_file: str) -> None:
    """FastAPI + JSONResponse serving a fixed document: the framework floor."""
    import uvicorn
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    with open(payload_file) as fh:
        document = json.load(fh)
    app = FastAPI()

    @app.get("/healthz")
    async def healthz():
        return JSONResponse({"status": "ok"})

    @app.get("/bare")
    async def bare():
        return JSONResponse(document)

    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        http="httptools",
        loop="uvloop",
        log_level="warning",
        access_log=False,
    )


# -- load loop ------------------------------------------------------------------------


async def load(url: str, headers: dict, total: int, concurrency: int, max_seconds: float) -> dict:
    latencies: list[float] = []
    failures = 0
    issued = 0
    deadline = time.monotonic() + max_seconds
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(headers=headers, limits=limits, timeout=30) as client:
        await client.get(url)  # warm-up: connection, caches, token verification

        async def worker():
            nonlocal issued, failures
            while issued < total and time.monotonic() < deadline:
                issued += 1
                started = time.perf_counter()
                response = await client.get(url)
                latencies.append(time.perf_counter() - started)
                if response.status_code != 200:
                    failures += 1

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "requests": len(latencies),
        "failures": failures,
        "rps": len(latencies) / elapsed,
        "p50_ms": latencies[len(latencies) // 2] * 1000,
        "p95_ms": latencies[int(len(latencies) * 0.95) - 1] * 1000,
    }


async def task_latency(base: str, headers: dict, node: str, vmids: list[int]) -> dict:
    """POST start → first status poll that says stopped; then stop it again."""
    observed = []
    async with httpx.AsyncClient(
        base_url=base + "/api2/json", headers=headers, timeout=30
    ) as client:

        async def run_task(path: str) -> tuple[str, float]:
            started = time.perf_counter()
            response = await client.post(path)
            upid = response.json()["data"]
            while True:
                status = (await client.get(f"/nodes/{node}/tasks/{upid}/status")).json()["data"]
                if status["status"] == "stopped":
                    return upid, time.perf_counter() - started

        upids = []
        for vmid in vmids:
            upid, seconds = await run_task(f"/nodes/{node}/qemu/{vmid}/status/start")
            observed.append(seconds)
            upids.append(upid)
            await run_task(f"/nodes/{node}/qemu/{vmid}/status/stop")
    observed.sort()
    return {
        "tasks": len(observed),
        "client_p50_ms": observed[len(observed) // 2] * 1000,
        "client_p95_ms": observed[int(len(observed) * 0.95) - 1] * 1000,
        "upids": upids,
    }


async def server_side_latency(db_url: str, upids: list[str]) -> dict:
    conn = await asyncpg.connect(db_url)
    try:
        rows = await conn.fetch(
            """
            SELECT upid,
                   extract(epoch FROM max(at) FILTER (WHERE kind = 'finished')
                                    - min(at) FILTER (WHERE kind = 'created')) AS seconds
            FROM task_events WHERE upid = ANY($1) GROUP BY upid
            """,
            upids,
        )
    finally:
        await conn.close()
    values = sorted(float(r["seconds"]) for r in rows)
    return {
        "server_p50_ms": values[len(values) // 2] * 1000,
        "server_p95_ms": values[int(len(values) * 0.95) - 1] * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=1500, help="requests per scenario")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=20.0, help="time bound per scenario")
    parser.add_argument("--tasks", type=int, default=30, help="start/stop task pairs")
    parser.add_argument(
        "--skip-10k", action="store_true", help="leave out the 10,000-guest profile"
    )
    parser.add_argument("--skip-swap", action="store_true", help="leave out the hot-swap run")
    parser.add_argument("--only-swap", action="store_true", help="run only the hot-swap figures")
    parser.add_argument(
        "--skip-faults", action="store_true", help="leave out the fault-scenario throughput"
    )
    parser.add_argument(
        "--bare-server", nargs=2, metavar=("PORT", "PAYLOAD"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.bare_server:
        run_bare_server(int(args.bare_server[0]), args.bare_server[1])
        return

    with bench_database() as db_url:
        _cli(db_url, "migrate")
        _cli(
            db_url, "seed", "--profile", "bench-1k", "--seed", "1", "--root-password", ROOT_PASSWORD
        )
        token = _cli(db_url, "token", "create", "root@pam!bench", "--privsep", "0")
        sim_port, bare_port = free_port(), free_port()
        env = {
            **os.environ,
            "PROXMOX_SIMULATOR_DATABASE_URL": db_url,
            "PROXMOX_SIMULATOR_CLOCK": "instant",
            # The lab API tells when a scenario the CLI enabled is live.
            "PROXMOX_SIMULATOR_LAB": "1",
        }
        if args.only_swap:
            hot_swap_under_load(db_url, env, token, args)
            return
        serve = [
            sys.executable,
            "-m",
            "proxmox_simulator.cli",
            "serve",
            "--port",
            str(sim_port),
            "--log-level",
            "warning",
        ]
        with background(serve, env, sim_port) as sim:
            api = sim + "/api2/json"
            login = httpx.post(
                api + "/access/ticket", data={"username": "root@pam", "password": ROOT_PASSWORD}
            )
            ticket = login.json()["data"]["ticket"]
            ticket_headers = {"Cookie": f"PVEAuthCookie={ticket}"}
            token_headers = {"Authorization": f"PVEAPIToken=root@pam!bench={token}"}
            listing = httpx.get(api + "/nodes/pve1/qemu", headers=ticket_headers)
            guests = listing.json()["data"]
            payload = os.path.join(
                os.environ.get("TMPDIR", "/tmp"), f"pvesim-bench-{os.getpid()}.json"
            )
            with open(payload, "w") as fh:
                json.dump(listing.json(), fh)
            print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start")
            print(f"guest list: {len(guests)} guests, {len(listing.content):,} bytes per response")
            print(
                f"load: {args.concurrency} connections, up to {args.requests} requests or {args.seconds:.0f} s per scenario\n"
            )

            results = {}
            url = api + "/nodes/pve1/qemu"
            results["simulator, ticket"] = asyncio.run(
                load(url, ticket_headers, args.requests, args.concurrency, args.seconds)
            )
            results["simulator, API token"] = asyncio.run(
                load(url, token_headers, args.requests, args.concurrency, args.seconds)
            )
            # The same requests with the rendered-list cache off: every request
            # has PostgreSQL build the 1,000-guest document.
            cold_port = free_port()
            cold_cmd = [
                sys.executable,
                "-m",
                "proxmox_simulator.cli",
                "serve",
                "--port",
                str(cold_port),
                "--log-level",
                "warning",
            ]
            with background(
                cold_cmd, {**env, "PROXMOX_SIMULATOR_LIST_CACHE": "0"}, cold_port
            ) as cold:
                cold_login = httpx.post(
                    cold + "/api2/json/access/ticket",
                    data={"username": "root@pam", "password": ROOT_PASSWORD},
                )
                cold_headers = {"Cookie": f"PVEAuthCookie={cold_login.json()['data']['ticket']}"}
                results["simulator, ticket, no cache"] = asyncio.run(
                    load(
                        cold + "/api2/json/nodes/pve1/qemu",
                        cold_headers,
                        args.requests,
                        args.concurrency,
                        args.seconds,
                    )
                )
            bare_cmd = [
                sys.executable,
                os.path.abspath(__file__),
                "--bare-server",
                str(bare_port),
                payload,
            ]
            with background(bare_cmd, os.environ.copy(), bare_port) as bare:
                results["bare FastAPI JSONResponse"] = asyncio.run(
                    load(bare + "/bare", {}, args.requests, args.concurrency, args.seconds)
                )
            os.unlink(payload)

            print(
                f"{'GET /nodes/pve1/qemu':<28} {'req/s':>8} {'p50 ms':>8} {'p95 ms':>8} {'n':>6} {'fail':>5}"
            )
            for name, r in results.items():
                print(
                    f"{name:<28} {r['rps']:>8.1f} {r['p50_ms']:>8.1f} {r['p95_ms']:>8.1f} {r['requests']:>6} {r['failures']:>5}"
                )

            if not args.skip_faults:
                fault_throughput(db_url, sim, url, token_headers, results, args)

            stopped = [g["vmid"] for g in guests if g["status"] == "stopped"][: args.tasks]
            tasks = asyncio.run(task_latency(sim, token_headers, "pve1", stopped))
            server = asyncio.run(server_side_latency(db_url, tasks["upids"]))
            print(f"\ntask start (instant clock), {tasks['tasks']} tasks:")
            print(
                f"  POST → status 'stopped' seen by client: p50 {tasks['client_p50_ms']:.1f} ms, p95 {tasks['client_p95_ms']:.1f} ms"
            )
            print(
                f"  created → finished events (server):     p50 {server['server_p50_ms']:.1f} ms, p95 {server['server_p95_ms']:.1f} ms"
            )
        if not args.skip_swap:
            hot_swap_under_load(db_url, env, token, args)
        if not args.skip_10k:
            profile_10k(db_url, env, args)
        print(
            f"\nload average {os.getloadavg()[0]:.2f} at the end (other work on the machine skews figures)"
        )


def _apidoc(version: str) -> str:
    folder = os.environ.get("PROXMOX_SIMULATOR_APIDOC_DIR") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "pve-apidoc"
    )
    return os.path.join(folder, f"pve-{version}-apidoc.js")


async def _swaps(sim: str, count: int, pause: float) -> list[float]:
    """Alternate majors 8 and 9 ``count`` times; seconds each apply took, client-side."""
    took = []
    async with httpx.AsyncClient(timeout=60) as client:
        for i in range(count):
            started = time.perf_counter()
            response = await client.post(
                sim + "/ui/api/contract/apply", data={"major": "8" if i % 2 == 0 else "9"}
            )
            took.append(time.perf_counter() - started)
            response.raise_for_status()
            await asyncio.sleep(pause)
    return took


def hot_swap_under_load(db_url: str, env: dict, token: str, args) -> None:
    schema = _apidoc("8.4.5")
    if not os.path.exists(schema):
        print(f"\nhot-swap: skipped, {schema} not found")
        return
    with tempfile.TemporaryDirectory() as data_dir:
        lab_env = {**env, "PROXMOX_SIMULATOR_DATA_DIR": data_dir, "PROXMOX_SIMULATOR_LAB": "1"}
        subprocess.run(
            [sys.executable, "-m", "proxmox_simulator.cli", "contract", "import", schema],
            env=lab_env,
            check=True,
            capture_output=True,
        )
        port = free_port()
        serve = [
            sys.executable,
            "-m",
            "proxmox_simulator.cli",
            "serve",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ]
        with background(serve, lab_env, port) as sim:
            headers = {"Authorization": f"PVEAPIToken=root@pam!bench={token}"}
            url = sim + "/api2/json/nodes/pve1/qemu"
            swaps = max(4, args.tasks // 3)
            idle = asyncio.run(_swaps(sim, swaps, 0.05))
            quiet = asyncio.run(load(url, headers, args.requests, args.concurrency, args.seconds))

            async def loaded():
                return await asyncio.gather(
                    load(url, headers, args.requests, args.concurrency, args.seconds),
                    _swaps(sim, swaps, 0.1),
                )

            busy, under_load = asyncio.run(loaded())

    def ms(values, q):
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1000

    print(f"\nhot-swap 9 <-> 8.4.5 ({swaps} swaps each; GET /nodes/pve1/qemu as the load):")
    # The first swap to a major parses its snapshot and builds its table; later swaps
    # reuse them, so it is reported on its own.
    print(f"  first swap (cold, idle): {idle[0] * 1000:.1f} ms")
    idle = idle[1:]
    print(f"  idle server:  p50 {ms(idle, 0.5):.1f} ms, max {max(idle) * 1000:.1f} ms")
    print(
        f"  under load:   p50 {ms(under_load, 0.5):.1f} ms, max {max(under_load) * 1000:.1f} ms"
        f" ({ms(under_load, 0.5) / ms(idle, 0.5):.2f}x idle)"
    )
    print(
        f"  load without swaps: {quiet['rps']:.1f} req/s, p95 {quiet['p95_ms']:.1f} ms, "
        f"{quiet['failures']} failures"
    )
    print(
        f"  load with swaps:    {busy['rps']:.1f} req/s, p95 {busy['p95_ms']:.1f} ms, "
        f"{busy['failures']} failures ({busy['rps'] / quiet['rps']:.2f}x)"
    )


FAULT_SCENARIOS = [
    ("flaky-api", []),
    ("slow-api", []),
    ("never fires", [{"kind": "http_error", "probability": 0.0}]),
]


def _scenario_live(sim: str, active: bool) -> None:
    wait_until(
        lambda: (httpx.get(sim + "/ui/api/faults").json()["data"]["active"] is not None) == active,
        10,
        "the simulator to pick up the fault scenario",
        interval=0.05,
    )


def fault_throughput(db_url: str, sim: str, url: str, headers: dict, results: dict, args) -> None:
    """The token listing again, each time with one scenario enabled through the CLI."""
    baseline = results["simulator, API token"]
    rows = {}
    for name, rules in FAULT_SCENARIOS:
        if rules:
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
                json.dump(rules, fh)
            _cli(db_url, "faults", "enable", "custom", "--rules", fh.name, "--seed", "1")
            os.unlink(fh.name)
        else:
            _cli(db_url, "faults", "enable", name, "--seed", "1")
        _scenario_live(sim, True)
        rows[name] = asyncio.run(load(url, headers, args.requests, args.concurrency, args.seconds))
        _cli(db_url, "faults", "disable")
        _scenario_live(sim, False)
    print(
        f"\nfault scenarios, GET /nodes/pve1/qemu with an API token "
        f"(baseline: no scenario, {baseline['rps']:.1f} req/s above):"
    )
    print(
        f"{'scenario':<28} {'req/s':>8} {'ratio':>6} {'p50 ms':>8} {'p95 ms':>8} {'n':>6} {'5xx':>5}"
    )
    for name, r in rows.items():
        print(
            f"{name:<28} {r['rps']:>8.1f} {r['rps'] / baseline['rps']:>6.2f} {r['p50_ms']:>8.1f} "
            f"{r['p95_ms']:>8.1f} {r['requests']:>6} {r['failures']:>5}"
        )


def profile_10k(db_url: str, env: dict, args) -> None:
    """Reseed with 10,000 guests on 16 nodes and measure the two inventory reads."""
    started = time.perf_counter()
    _cli(db_url, "seed", "--profile", "xlarge", "--seed", "1", "--root-password", ROOT_PASSWORD)
    seeded = time.perf_counter() - started
    token = _cli(db_url, "token", "create", "root@pam!bench10k", "--privsep", "0")
    headers = {"Authorization": f"PVEAPIToken=root@pam!bench10k={token}"}
    port = free_port()
    serve = [
        sys.executable,
        "-m",
        "proxmox_simulator.cli",
        "serve",
        "--port",
        str(port),
        "--log-level",
        "warning",
    ]
    with background(serve, env, port) as sim:
        api = sim + "/api2/json"
        resources = httpx.get(api + "/cluster/resources", headers=headers, timeout=60)
        entries = resources.json()["data"]
        guests = [e for e in entries if e["type"] in ("qemu", "lxc")]
        per_node: dict[str, int] = {}
        for guest in guests:
            if guest["type"] == "qemu":
                per_node[guest["node"]] = per_node.get(guest["node"], 0) + 1
        node = max(per_node, key=per_node.get)
        listing = httpx.get(api + f"/nodes/{node}/qemu", headers=headers, timeout=60)
        print(
            f"\n10,000-guest profile (xlarge, seeded in {seeded:.1f} s): "
            f"{len(guests)} guests on {len({e['node'] for e in guests})} nodes"
        )
        print(
            f"  /cluster/resources: {len(entries)} entries, {len(resources.content):,} bytes; "
            f"/nodes/{node}/qemu: {per_node[node]} guests, {len(listing.content):,} bytes"
        )
        results = {
            "GET /cluster/resources, 1 conn": asyncio.run(
                load(api + "/cluster/resources", headers, 20, 1, args.seconds)
            ),
            "GET /cluster/resources": asyncio.run(
                load(
                    api + "/cluster/resources",
                    headers,
                    args.requests // 5,
                    args.concurrency,
                    args.seconds,
                )
            ),
            f"GET /nodes/{node}/qemu": asyncio.run(
                load(
                    api + f"/nodes/{node}/qemu",
                    headers,
                    args.requests,
                    args.concurrency,
                    args.seconds,
                )
            ),
        }
        print(
            f"  {'API token, ' + str(args.concurrency) + ' connections':<30} {'req/s':>8} {'p50 ms':>8} {'p95 ms':>8} {'n':>6} {'fail':>5}"
        )
        for name, r in results.items():
            print(
                f"  {name:<30} {r['rps']:>8.1f} {r['p50_ms']:>8.1f} {r['p95_ms']:>8.1f} {r['requests']:>6} {r['failures']:>5}"
            )


if __name__ == "__main__":
    main()
