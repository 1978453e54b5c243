"""Load against real processes: prints figures and consistency checks, asserts nothing.

Scenarios (`--only` picks some; all by default):

- claims: 32 clients claiming the native clusters of 8 endpoints (4 per endpoint) for
  60 s through NetBox's REST API (`POST …/sync-cluster/`); afterwards each endpoint owns
  exactly one cluster, tracking record and sync state;
- syncs: 4 concurrent syncs of distinct endpoints through the sync backend's HTTP API
  (`proxbox-sync serve`), each against its own simulator (`serve --tls`); afterwards each
  cluster holds exactly its simulator's inventory, without duplicates;
- same-endpoint: two concurrent syncs of one endpoint, both through the backend's API
  and as two "Sync now" Jobs run by two RQ workers; the second must be refused (409 /
  an errored Job), never run beside the first;
- uploads: 50 concurrent uploads (distinct archives) across 5 script projects;
  afterwards each project has one revision per upload, no duplicates, no 5xx;
- queues: while one endpoint's "Sync now" runs long (every Proxmox request of its
  simulator delayed), NetBox's own Job (a data source sync) and a second endpoint's Sync
  now are queued; printed: how long each waited to start, under one worker serving every
  queue and under the deployed layout (NetBox's queues + 2 sync workers). Consistent
  when, in the deployed layout, neither waited behind the long sync.

Every request's status is counted; p50/p95 are of wall-clock latency per request.
NetBox is gunicorn (2 workers × 2 threads) on a database cloned from the migrated
template (`--db-prefix`, default `pbload_`), dropped afterwards; the simulators and
the backend run as subprocesses.

    PROXBOX_DATABASE_URL=... PROXBOX_REDIS_URL=redis://host:port \\
        uv run python benchmarks/load.py [--only claims,uploads] [--claim-seconds 60]

PROXBOX_REDIS_URL should name no database: the run leases a pair of its own, as
`proxbox up` does, so its RQ queues meet no other NetBox's.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
import zipfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "e2e"))

SCENARIOS = ("claims", "syncs", "same-endpoint", "uploads", "queues")
NETBOX_QUEUES = ("high", "default", "low")
SYNC_QUEUE = "netbox_proxbox.sync"
# The worker layouts `queues` compares: every queue served by the same worker (before
# syncs had a queue of their own), and `proxbox up`'s / production compose's layout.
WORKER_LAYOUTS = (
    ("one worker for every queue", ((*NETBOX_QUEUES, SYNC_QUEUE),)),
    ("NetBox's queues + 2 sync workers", (NETBOX_QUEUES, (SYNC_QUEUE,), (SYNC_QUEUE,))),
)
# Every Proxmox request of the slow endpoint waits this long: its sync outlasts the rest.
SLOW_PROXMOX_MS = 2500
JOB_DONE = ("completed", "errored", "failed")


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


class Tally:
    """Latency and status of every request of a scenario (thread-safe)."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self.statuses: Counter = Counter()
        self.lock = threading.Lock()

    def timed(self, send) -> httpx.Response:
        started = time.perf_counter()
        try:
            response = send()
        except httpx.HTTPError as exc:
            with self.lock:
                self.statuses[type(exc).__name__] += 1
            raise
        with self.lock:
            self.samples.append(time.perf_counter() - started)
            self.statuses[response.status_code] += 1
        return response

    def print(self, label: str, seconds: float) -> None:
        ms = [s * 1000 for s in self.samples] or [0.0]
        fivexx = sum(
            n for code, n in self.statuses.items() if isinstance(code, int) and code >= 500
        )
        statuses = ", ".join(f"{code}×{n}" for code, n in sorted(self.statuses.items(), key=str))
        print(
            f"{label}: {len(self.samples)} requests in {seconds:.1f} s "
            f"({len(self.samples) / seconds:.1f}/s), p50 {percentile(ms, 0.5):.0f} ms, "
            f"p95 {percentile(ms, 0.95):.0f} ms, mean {statistics.fmean(ms):.0f} ms; "
            f"statuses {statuses}; 5xx: {fivexx}"
        )


def check(label: str, ok: bool, detail: str = "") -> bool:
    print(f"  check {'OK  ' if ok else 'FAIL'} {label}" + (f" ({detail})" if detail else ""))
    return ok


# -- scenarios ------------------------------------------------------------------------------


def claims(netbox, seconds: float) -> bool:
    from sync_fixtures import create_endpoint_record, list_all

    with netbox.api() as api:
        cluster_type = api.post(
            "/virtualization/cluster-types/", json={"name": "Load", "slug": "load"}
        ).json()["id"]
    endpoints = [
        create_endpoint_record(netbox, f"load-claim-{i}", "pve.example", 8006, site=None)
        for i in range(8)
    ]
    tally = Tally()
    deadline = time.monotonic() + seconds

    def client(n: int) -> None:
        endpoint = endpoints[n % len(endpoints)]
        body = {"name": f"load-{endpoint['id']}", "mode": "cluster", "cluster_type": cluster_type}
        path = f"/plugins/proxbox/endpoints/proxmox/{endpoint['id']}/sync-cluster/"
        with netbox.api() as api:
            while time.monotonic() < deadline:
                tally.timed(lambda: api.post(path, json=body))

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=32) as pool:
        list(pool.map(client, range(32)))
    tally.print("claims: 32 clients × 8 endpoints", time.monotonic() - started)
    ok = check(
        "one 201 per endpoint", tally.statuses[201] == len(endpoints), f"{tally.statuses[201]}"
    )
    for endpoint in endpoints:
        clusters = list_all(netbox, "/virtualization/clusters/", name=f"load-{endpoint['id']}")
        tracking = list_all(netbox, "/plugins/proxbox/clusters/", endpoint_id=endpoint["id"])
        states = list_all(
            netbox,
            "/plugins/proxbox/cluster-sync-states/",
            cluster_id=[c["id"] for c in clusters] or [0],
        )
        ok &= len(clusters) == len(tracking) == len(states) == 1
    return check("each endpoint: 1 cluster, 1 tracking record, 1 sync state", ok) and ok


def _simulators(
    workdir: Path,
    prefix: str,
    count: int,
    *,
    label: str = "load",
    first_network: int = 120,
    one_ca: bool = False,
):
    """`one_ca`: every simulator serves the first one's certificate, so one backend (one
    CA bundle) verifies them all."""
    import shutil

    from sync_fixtures import Simulator

    simulators = []
    for i in range(count):
        simulator = Simulator(f"{label}{i}", "small", 40 + i, workdir)
        simulator.database = f"{prefix}sim_{i}_{os.getpid()}"
        if one_ca and simulators:
            shutil.copytree(simulators[0].data_dir / "tls", simulator.data_dir / "tls")
        simulators.append(simulator)
        simulator.start().renumber(f"10.{first_network + i}.0")
        # Every profile calls its cluster `pvesim`; NetBox wants distinct cluster names.
        simulator.rename(f"pvesim-{label}{i}")
    return simulators


def _endpoints(netbox, simulators, label: str) -> list[dict]:
    from sync_fixtures import create_endpoint, create_site

    # A site per endpoint: every simulator names its nodes pve1…, and NetBox wants device
    # names unique per site (one shared site let only one cluster's nodes in).
    return [
        create_endpoint(
            netbox,
            f"load-{label}-{i}",
            simulator,
            site=create_site(netbox, f"load-{label}-{i}"),
        )
        for i, simulator in enumerate(simulators)
    ]


def _backend_post(backend, path: str, tally: Tally) -> httpx.Response:
    headers = {"Authorization": f"Bearer {backend.api_token}"}
    return tally.timed(lambda: httpx.post(f"{backend.url}{path}", headers=headers, timeout=60))


def syncs(netbox, simulators) -> bool:
    """One `proxbox-sync run --json` process per endpoint, all at once: each verifies its
    own simulator's certificate (they share a subject name, so one CA bundle cannot)."""
    import json
    import subprocess

    from chaos_support import assert_consistent, endpoint_cluster
    from sync_fixtures import expected_inventory

    endpoints = _endpoints(netbox, simulators, "sync")
    started = time.monotonic()

    def sync(pair) -> tuple[dict, float]:
        endpoint, simulator = pair
        env = dict(
            os.environ,
            PROXBOX_NETBOX_URL=netbox.url,
            PROXBOX_NETBOX_TOKEN=netbox.admin_token,
            PROXBOX_PROXMOX_CA_BUNDLE=simulator.ca_bundle,
        )
        argv = [sys.executable, "-m", "proxbox_backend.cli", "run", "--endpoint"]
        done = subprocess.run(
            [*argv, str(endpoint["id"]), "--json"], env=env, capture_output=True, timeout=1800
        )
        if not done.stdout:
            print(f"  {endpoint['name']}: exit {done.returncode}: {done.stderr.decode()[-600:]}")
        return json.loads(done.stdout or b"{}"), time.monotonic() - started

    with ThreadPoolExecutor(max_workers=len(endpoints)) as pool:
        runs = list(pool.map(sync, zip(endpoints, simulators, strict=True)))
    total = time.monotonic() - started
    ok = True
    for (report, seconds), endpoint, simulator in zip(runs, endpoints, simulators, strict=True):
        writes = sum(sum(c.values()) for c in (report.get("counters") or {}).values())
        print(
            f"  {endpoint['name']}: {seconds:.1f} s, ok={report.get('ok')}, {writes} objects "
            f"counted, NetBox requests {report.get('netbox_requests')}, "
            f"error {report.get('error')}"
        )
        for failure in (report.get("failures") or [])[:5]:
            print(f"    failed: {failure}")
        expected = expected_inventory(simulator.inventory())
        try:
            got = assert_consistent(netbox, endpoint_cluster(netbox, endpoint["id"]))
            same = all(got[part] == expected[part] for part in expected)
        except (AssertionError, KeyError, TypeError) as exc:
            same = False
            print(f"    {exc!r}")
        ok &= check(f"{endpoint['name']}: no duplicates, inventory as Proxmox", same)
    print(f"syncs: 4 concurrent, distinct endpoints: {total:.1f} s wall")
    return ok


def same_endpoint(netbox, backend, simulator) -> bool:
    [endpoint] = _endpoints(netbox, [simulator], "same")
    tally = Tally()
    barrier = threading.Barrier(2)

    def start() -> httpx.Response:
        barrier.wait()
        return _backend_post(backend, f"/sync/{endpoint['id']}", tally)

    ok = True
    rounds = 5
    for _ in range(rounds):
        with ThreadPoolExecutor(max_workers=2) as pool:
            responses = list(pool.map(lambda _: start(), range(2)))
        codes = sorted(r.status_code for r in responses)
        accepted = [r for r in responses if r.status_code == 202]
        refused = [r for r in responses if r.status_code == 409]
        ok &= (
            codes == [202, 409]
            and refused[0].json()["detail"]["run_id"] == (accepted[0].json()["run_id"])
        )
        backend.wait_run(accepted[0].json()["run_id"])
    check(f"backend API, {rounds} rounds: one 202, one 409 naming the running run", ok, str(codes))

    # Two "Sync now" Jobs at once, two RQ workers to run them side by side.
    jobs_ok = True
    with netbox.api() as api:
        for _ in range(rounds):
            barrier.reset()

            def sync_now(_):
                barrier.wait()
                return api.post(f"/plugins/proxbox/endpoints/proxmox/{endpoint['id']}/sync/")

            with ThreadPoolExecutor(max_workers=2) as pool:
                answers = list(pool.map(sync_now, range(2)))
            # The second request may be refused at once (409) instead of queuing a Job.
            refused_at_once = [a for a in answers if a.status_code == 409]
            jobs = [a.json() for a in answers if a.status_code in (200, 201, 202)]
            jobs_ok &= len(refused_at_once) + len(jobs) == 2
            done = []
            deadline = time.monotonic() + 600
            while len(done) < len(jobs) and time.monotonic() < deadline:
                done = [
                    job
                    for job in (api.get(f"/core/jobs/{j['id']}/").json() for j in jobs)
                    if job["status"]["value"] in ("completed", "errored", "failed")
                ]
                time.sleep(0.5)
            runs = [job for job in done if (job["data"] or {}).get("backend_run")]
            # Refused by the backend (an errored Job), or coalesced into the running Job.
            refused = refused_at_once + [
                job
                for job in done
                if "already running" in (job["error"] or "")
                or "coalesced_into" in (job["data"] or {})
            ]
            windows = sorted((job["started"], job["completed"]) for job in runs)
            apart = all(a[1] <= b[0] for a, b in zip(windows, windows[1:], strict=False))
            # Refused, or (when the first had finished before the second asked) one after the other.
            jobs_ok &= (len(runs) == 1 and len(refused) == 1) or (len(runs) == 2 and apart)
            print(
                "  Sync now pair: "
                + "; ".join(
                    [
                        f"HTTP {a.status_code} {a.json().get('detail', '')!s:.60}"
                        for a in refused_at_once
                    ]
                    + [
                        f"{j['status']['value']} {(j['error'] or '')[:60]}"
                        + (" (coalesced)" if "coalesced_into" in (j["data"] or {}) else "")
                        for j in done
                    ]
                )
            )
    check(
        f"two Sync now Jobs, {rounds} rounds: second refused or coalesced, never interleaved",
        jobs_ok,
    )
    return ok and jobs_ok


def _job_of(api, path: str, **params) -> dict:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        results = api.get("/core/jobs/", params={**params, "ordering": "-created"}).json()
        if results["results"]:
            return results["results"][0]
        time.sleep(0.2)
    raise RuntimeError(f"no Job for {path} {params}")


def _finished(api, job: dict, timeout: float = 900) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = api.get(f"/core/jobs/{job['id']}/").json()
        if job["status"]["value"] in JOB_DONE:
            return job
        time.sleep(0.3)
    raise RuntimeError(f"Job {job['id']} did not finish within {timeout:.0f} s")


def _waited(job: dict) -> float:
    from datetime import datetime

    return (
        datetime.fromisoformat(job["started"]) - datetime.fromisoformat(job["created"])
    ).total_seconds()


def queues(netbox, workdir: Path, slow, quick) -> bool:
    """Does a long sync make NetBox's own Jobs, or another endpoint's sync, wait?"""
    import json

    from chaos_support import BackendServer, RQWorker

    from proxbox_devstack.paths import data_dir as default_data_dir
    from proxbox_devstack.secrets import load_or_create_secrets

    slow_endpoint, quick_endpoint = _endpoints(netbox, [slow, quick], "queues")
    rules = workdir / "slow-proxmox.json"
    rules.write_text(
        json.dumps([{"kind": "latency", "probability": 1, "delay_ms": SLOW_PROXMOX_MS}])
    )
    source = workdir / "data-source"
    source.mkdir(exist_ok=True)
    (source / "README.md").write_text("a local data source NetBox syncs as its own Job\n")
    token = load_or_create_secrets(default_data_dir())["backend_api_token"]
    backend = BackendServer(netbox, workdir, token, slow.ca_bundle).start()
    ok = True
    try:
        with netbox.api() as api:
            data_source = api.post(
                "/core/data-sources/",
                json={"name": "load-queues", "type": "local", "source_url": f"file://{source}"},
            ).json()
            # The first syncs (cluster claims, full writes) before anything is measured.
            for endpoint in (slow_endpoint, quick_endpoint):
                backend.wait_run(
                    _backend_post(backend, f"/sync/{endpoint['id']}", Tally()).json()["run_id"]
                )
            slow.cli("faults", "enable", "--rules", str(rules))
            for layout, worker_queues in WORKER_LAYOUTS:
                workers = [
                    RQWorker(netbox, workdir, queues, PROXBOX_BACKEND_URL=backend.url).start()
                    for queues in worker_queues
                ]
                try:
                    sync_now = "/plugins/proxbox/endpoints/proxmox/{}/sync/"
                    long = api.post(sync_now.format(slow_endpoint["id"])).json()
                    deadline = time.monotonic() + 120
                    while api.get(f"/core/jobs/{long['id']}/").json()["status"]["value"] != (
                        "running"
                    ):
                        if time.monotonic() > deadline:
                            raise RuntimeError("the long sync did not start within 120 s")
                        time.sleep(0.2)
                    time.sleep(2)  # well into its run
                    own_before = max(
                        [
                            j["id"]
                            for j in api.get("/core/jobs/", params={"limit": 1}).json()["results"]
                        ]
                        or [0]
                    )
                    api.post(f"/core/data-sources/{data_source['id']}/sync/")
                    own = _job_of(
                        api,
                        "data source",
                        object_type="core.datasource",
                        object_id=data_source["id"],
                        # The newest: each layout queues one.
                        id__gt=own_before,
                    )
                    other = api.post(sync_now.format(quick_endpoint["id"])).json()
                    long, own, other = (_finished(api, job) for job in (long, own, other))
                finally:
                    for worker in workers:
                        worker.stop()
                print(
                    f"  {layout}: long sync {long['status']['value']} in "
                    f"{_seconds(long):.1f} s; NetBox's own Job waited {_waited(own):.1f} s "
                    f"({own['status']['value']}); the other endpoint's Sync now waited "
                    f"{_waited(other):.1f} s ({other['status']['value']})"
                )
                if worker_queues is WORKER_LAYOUTS[-1][1]:
                    ok &= check(
                        f"{layout}: neither waited behind the {_seconds(long):.0f} s sync",
                        _waited(own) < _seconds(long) / 4 and _waited(other) < _seconds(long) / 4,
                        f"waits {_waited(own):.1f} s and {_waited(other):.1f} s",
                    )
    finally:
        backend.stop()
        slow.cli("faults", "disable")
    return ok


def _seconds(job: dict) -> float:
    from datetime import datetime

    return (
        datetime.fromisoformat(job["completed"]) - datetime.fromisoformat(job["started"])
    ).total_seconds()


def uploads(netbox) -> bool:
    from sync_fixtures import list_all

    projects = []
    with netbox.api() as api:
        for i in range(5):
            project = api.post(
                "/plugins/script-projects/projects/",
                json={"name": f"load-{i}", "key": f"load-{i}", "activation_policy": "manual"},
            ).json()
            projects.append(project)
    tally = Tally()
    barrier = threading.Barrier(50)

    def upload(n: int) -> dict | None:
        project = projects[n % 5]
        archive = io.BytesIO()
        with zipfile.ZipFile(archive, "w") as zf:
            zf.writestr("scripts/load.py", f"# upload {n} {uuid.uuid4()}\nX = {n}\n")
        with netbox.api() as api:
            barrier.wait()
            response = tally.timed(
                lambda: api.post(
                    f"/plugins/script-projects/projects/{project['id']}/upload/",
                    files={"file": (f"load-{n}.zip", archive.getvalue(), "application/zip")},
                )
            )
        return response.json() if response.status_code in (200, 201) else None

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=50) as pool:
        results = list(pool.map(upload, range(50)))
    tally.print("uploads: 50 concurrent, 5 projects", time.monotonic() - started)
    ok = check("every upload created its revision", all(r and r["outcome"] for r in results))
    for project in projects:
        revisions = list_all(
            netbox, "/plugins/script-projects/project-revisions/", project_id=project["id"]
        )
        digests = Counter(r["digest"] for r in revisions)
        ok &= len(revisions) == 10 and max(digests.values()) == 1
        ok &= all(r["file_count"] == 1 for r in revisions)
    return check("each project: 10 revisions, distinct digests, complete", ok) and ok


# -- the processes ----------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(SCENARIOS), help="comma-separated scenarios")
    parser.add_argument("--claim-seconds", type=float, default=60)
    parser.add_argument("--db-prefix", default="pbload_", help="prefix of the databases made")
    args = parser.parse_args()
    chosen = [s.strip() for s in args.only.split(",") if s.strip()]
    if unknown := set(chosen) - set(SCENARIOS):
        parser.error(f"unknown scenario(s): {', '.join(sorted(unknown))}")

    os.environ.setdefault("NETBOX_CONFIGURATION", "proxbox_devstack.netbox_configuration")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "netbox.settings")
    import django

    django.setup()
    from chaos_support import BackendServer, RQWorker, grant_credentials
    from sync_fixtures import NetBoxServer

    from proxbox_devstack import redis_databases
    from proxbox_devstack.paths import data_dir as default_data_dir
    from proxbox_devstack.secrets import load_or_create_secrets

    load = os.getloadavg()
    print(
        f"{os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
        f"at start; scenarios: {', '.join(chosen)}"
    )
    results = {}
    with tempfile.TemporaryDirectory(prefix="pbload-") as tmp:
        workdir = Path(tmp)
        lease = redis_databases.acquire(os.environ["PROXBOX_REDIS_URL"], workdir)
        env = {}
        if lease is not None:
            lease.keep()
            env[redis_databases.DATABASES_ENV] = lease.databases.to_env()
        netbox = NetBoxServer(workdir, database=f"{args.db_prefix}netbox_{os.getpid()}", **env)
        simulators, processes = [], []
        try:
            netbox.start()
            if "claims" in chosen:
                results["claims"] = claims(netbox, args.claim_seconds)
            if "uploads" in chosen:
                results["uploads"] = uploads(netbox)
            if "queues" in chosen:
                # Networks of their own: NetBox keeps addresses unique across scenarios.
                pair = _simulators(
                    workdir, f"{args.db_prefix}q", 2, label="queues", first_network=130, one_ca=True
                )
                simulators.extend(pair)
                results["queues"] = queues(netbox, workdir, *pair)
            needs_sync = {"syncs", "same-endpoint"} & set(chosen)
            if needs_sync:
                # A simulator of its own for same-endpoint: a Proxmox cluster has one owner.
                count = 4 * ("syncs" in chosen) + ("same-endpoint" in chosen)
                simulators = _simulators(workdir, args.db_prefix, count)
                if "syncs" in chosen:
                    grant_credentials(netbox)
                    results["syncs"] = syncs(netbox, simulators[:4])
                if "same-endpoint" in chosen:
                    token = load_or_create_secrets(default_data_dir())["backend_api_token"]
                    backend = BackendServer(netbox, workdir, token, simulators[-1].ca_bundle)
                    processes.append(backend)
                    backend.start()
                    workers = [
                        RQWorker(netbox, workdir, PROXBOX_BACKEND_URL=backend.url).start()
                        for _ in range(2)
                    ]
                    processes.extend(workers)
                    results["same-endpoint"] = same_endpoint(netbox, backend, simulators[-1])
        finally:
            for process in processes:
                process.stop()
            for simulator in simulators:
                simulator.stop()
            netbox.stop()
            if lease is not None:
                lease.release()
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at the end")
    for name, ok in results.items():
        print(f"{name}: {'consistent' if ok else 'INCONSISTENT'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
