"""Live-sync benchmark: prints figures, asserts nothing.

N guests (default 1,000) of the in-process fake Proxmox of benchmarks/sync.py (3 nodes,
the same guests), synced into a real NetBox (gunicorn, both plugins, a `pbsync_`
database cloned from the migrated template, dropped afterwards) by the backend's watch
supervisor running in this process with a `--poll` second interval (default 5). The
fake also answers `/cluster/tasks` (what the benchmark finished last, PVE's shape).

Printed, after the watch's catch-up run has synced every guest:

* the time from a Proxmox change to NetBox showing it, p50 and p95 over `--samples`
  changes one after another (default 20; each a guest's memory raised and a finished
  `qmconfig` task, made at a random moment of the poll cycle; measured by polling the
  VM over NetBox's REST API every 0.1 s);
* the idle watcher's cost over `--idle` seconds (default 60): Proxmox requests per
  minute, and NetBox writes (change-log entries, expected 0);
* a burst of `--burst` changes at once (default 100, at most N): the time until NetBox
  shows the last of them, and how many runs the watcher started for it.

    PROXBOX_DATABASE_URL=... uv run python benchmarks/watch.py [--guests 1000] [--poll 5]
        [--samples 20] [--idle 60] [--burst 100]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from sync import NODES, ROOT, fake_proxmox, guest_specs

NETWORK = "172.30.0.0/16"
CLUSTER = "bench-watch"


class TasksProxmox:
    """sync.py's fake Proxmox, plus `/cluster/tasks`: the finished tasks the benchmark
    records, newest first (one node's worth is enough: the watcher reads UPIDs)."""

    def __init__(self, guests: int):
        self.specs = guest_specs(guests, NETWORK)
        self.inner = fake_proxmox(CLUSTER, self.specs, NETWORK)
        self.tasks: list[dict] = []
        self.requests = 0
        self.lock = threading.Lock()
        self.transport = httpx.MockTransport(self.answer)

    async def answer(self, request: httpx.Request) -> httpx.Response:
        with self.lock:
            self.requests += 1
        if request.url.path.endswith("/cluster/tasks"):
            with self.lock:
                return httpx.Response(200, json={"data": list(self.tasks[:25])})
        return await self.inner.handle_async_request(request)

    def change(self, vmid: int) -> None:
        """A guest's memory raised by `qm set --memory` (asynchronously: a `qmconfig`
        task), as PVE shows it: the config changes, then the task is listed finished."""
        guest = self.specs[vmid]
        guest["memory_mb"] += 256
        now = int(time.time())
        with self.lock:
            self.tasks.insert(
                0,
                {
                    "upid": f"UPID:{guest['node']}:{len(self.tasks):08X}:0:{now:08X}:qmconfig:"
                    f"{vmid}:root@pam:",
                    "node": guest["node"],
                    "type": "qmconfig",
                    "id": str(vmid),
                    "user": "root@pam",
                    "starttime": now,
                    "endtime": now,
                    "status": "OK",
                },
            )


def run_watch(settings, transport, stop: threading.Event, runs: list) -> None:
    """The backend's watch supervisor in a thread of its own (its own event loop)."""
    from proxbox_backend.baselines import MemoryBaselines
    from proxbox_backend.clients.proxmox import ProxmoxClient
    from proxbox_backend.runs import MemoryRunStore
    from proxbox_backend.service import SyncService
    from proxbox_backend.watch import WatchSupervisor

    def factory(endpoint, credentials):
        return ProxmoxClient("https://pve.invalid:8006", credentials, transport=transport)

    async def main():
        service = SyncService(settings, proxmox_factory=factory, baselines=MemoryBaselines())
        supervisor = WatchSupervisor(settings, service, MemoryRunStore())
        launcher = supervisor._launcher

        def counting(endpoint_id):  # each run the watcher starts, with when it started
            launch = launcher(endpoint_id)

            async def counted(changes, found_at):
                task = await launch(changes, found_at)
                if task is not None:
                    entry = [time.monotonic(), changes, None]  # started, what, ended
                    runs.append(entry)
                    task.add_done_callback(lambda _task: entry.__setitem__(2, time.monotonic()))
                return task

            return counted

        supervisor._launcher = counting
        watching = asyncio.create_task(supervisor.run())
        while not stop.is_set():
            await asyncio.sleep(0.2)
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)

    asyncio.run(main())


def vm_memory(api: httpx.Client, cluster_id: int) -> dict[str, int]:
    memory, offset = {}, 0
    while True:
        page = api.get(
            "/virtualization/virtual-machines/",
            params={"cluster_id": cluster_id, "fields": "name,memory", "limit": 1000,
                    "offset": offset},
        ).json()  # fmt: skip
        memory.update({vm["name"]: vm["memory"] for vm in page["results"]})
        if not page["next"]:
            return memory
        offset += 1000


def newest_change(api: httpx.Client) -> int:
    found = api.get("/core/object-changes/", params={"limit": 1, "ordering": "-id"}).json()
    return found["results"][0]["id"] if found["results"] else 0


def wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.1)
    raise SystemExit(f"timed out after {timeout:g} s waiting for {what}")


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def parse_arguments():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--guests", type=int, default=1000)
    parser.add_argument("--poll", type=int, default=5, help="the endpoint's watch interval (s)")
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--idle", type=float, default=60.0)
    parser.add_argument("--burst", type=int, default=100)
    args = parser.parse_args()
    args.burst = min(args.burst, args.guests)
    return args


def main() -> int:
    args = parse_arguments()
    os.environ.setdefault("NETBOX_CONFIGURATION", "proxbox_devstack.netbox_configuration")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "netbox.settings")
    import django

    django.setup()
    sys.path.insert(0, str(ROOT / "e2e"))
    from sync_fixtures import NetBoxServer, create_endpoint_record, create_site

    from proxbox_backend.clients.http import RetryPolicy
    from proxbox_backend.config import Settings
    from proxbox_backend.secrets import Secret

    proxmox = TasksProxmox(args.guests)
    with tempfile.TemporaryDirectory(prefix="pbsync-watch-bench-") as workdir:
        netbox = NetBoxServer(Path(workdir))
        stop, runs = threading.Event(), []
        watcher = None
        try:
            netbox.start()
            site = create_site(netbox, CLUSTER)
            endpoint = create_endpoint_record(netbox, CLUSTER, "127.0.0.1", 8006, site=site)
            with netbox.api() as api:
                answer = api.patch(
                    f"/plugins/proxbox/endpoints/proxmox/{endpoint['id']}/",
                    json={"watch_interval": args.poll},
                )
                answer.raise_for_status()
            settings = Settings(
                netbox_url=netbox.url,
                netbox_token=Secret(netbox.admin_token),
                proxmox_url="https://pve.invalid:8006",
                proxmox_token_id="root@pam!bench",
                proxmox_token=Secret("bench"),
                retry=RetryPolicy(attempts=3, backoff=0.5),
                watch_refresh=5.0,
            )
            watcher = threading.Thread(
                target=run_watch, args=(settings, proxmox.transport, stop, runs), daemon=True
            )
            started = time.monotonic()
            watcher.start()
            with netbox.api() as api:
                cluster = wait(
                    lambda: api.get(f"/plugins/proxbox/endpoints/proxmox/{endpoint['id']}/").json()[
                        "netbox_cluster"
                    ],
                    3600,
                    "the catch-up run to claim the cluster",
                )["id"]
                wait(
                    lambda: len(vm_memory(api, cluster)) == args.guests,
                    3600,
                    "the catch-up run to sync every guest",
                )
                wait(lambda: runs and len(runs) >= 1, 60, "the catch-up run")
                synced = time.monotonic() - started
                # Its VMs are in NetBox long before it ends (interfaces, addresses, disks
                # and records come after): changes made meanwhile wait for its end.
                wait(lambda: runs[0][2] is not None, 3600, "the catch-up run to end")
                print(
                    f"{args.guests} guests, {args.poll} s poll, {len(NODES)} nodes: catch-up run "
                    f"synced their VMs in {synced:.1f} s and ended after "
                    f"{runs[0][2] - runs[0][0]:.1f} s",
                    flush=True,
                )
                time.sleep(args.poll * 2)  # a quiet poll

                lags = []
                vmids = sorted(proxmox.specs)
                for sample in range(args.samples):
                    time.sleep(random.uniform(0, args.poll))
                    vmid = vmids[(sample * 7919) % len(vmids)]
                    changed_at = time.monotonic()
                    proxmox.change(vmid)
                    want = proxmox.specs[vmid]["memory_mb"]
                    name = proxmox.specs[vmid]["name"]
                    wait(
                        lambda: vm_memory(api, cluster).get(name) == want,  # noqa: B023
                        600,
                        f"{name}'s change in NetBox",
                    )
                    lags.append(time.monotonic() - changed_at)
                    if lags[-1] > 3 * args.poll:  # what the watcher did meanwhile
                        started = [
                            f"+{at - changed_at:.1f} s: {changes.as_dict()['reasons'][:3]}"
                            for at, changes, _ended in runs
                            if at >= changed_at - args.poll
                        ]
                        print(f"  slow change ({lags[-1]:.1f} s), runs: {started}", flush=True)
                print(
                    f"change → NetBox over {len(lags)} changes: p50 {percentile(lags, 0.5):.2f} s, "
                    f"p95 {percentile(lags, 0.95):.2f} s, max {max(lags):.2f} s "
                    f"(mean {statistics.mean(lags):.2f} s)",
                    flush=True,
                )
                print("  each, in order: " + ", ".join(f"{lag:.1f}" for lag in lags), flush=True)

                time.sleep(args.poll * 2)  # the last sample's run over
                runs_before, requests_before = len(runs), proxmox.requests
                change_before = newest_change(api)
                time.sleep(args.idle)
                per_minute = (proxmox.requests - requests_before) * 60 / args.idle
                writes = api.get(
                    "/core/object-changes/", params={"id__gt": change_before, "limit": 1}
                ).json()["count"]
                print(
                    f"idle {args.idle:g} s: {per_minute:.1f} Proxmox requests per minute, "
                    f"{writes} NetBox writes, {len(runs) - runs_before} runs",
                    flush=True,
                )

                runs_before = len(runs)
                burst = vmids[: args.burst]
                changed_at = time.monotonic()
                for vmid in burst:
                    proxmox.change(vmid)
                wanted = {proxmox.specs[v]["name"]: proxmox.specs[v]["memory_mb"] for v in burst}

                def burst_synced() -> bool:
                    memory = vm_memory(api, cluster)
                    return all(memory.get(name) == mb for name, mb in wanted.items())

                wait(burst_synced, 1800, "the burst in NetBox")
                print(
                    f"burst of {args.burst} changes: all in NetBox after "
                    f"{time.monotonic() - changed_at:.2f} s, {len(runs) - runs_before} run(s)",
                    flush=True,
                )
        finally:
            stop.set()
            if watcher is not None:
                watcher.join(30)
            netbox.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
