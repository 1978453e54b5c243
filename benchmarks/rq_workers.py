"""`proxbox up`'s two RQ workers: started as two `netbox rqworker` processes (the baseline)
and forked from one NetBox process (`proxbox_devstack.rq_workers`, what `up` runs).
Prints figures, asserts nothing.

For each way, in alternating rounds on a scratch copy of the migrated NetBox template and a
leased Redis database pair (PROXBOX_REDIS_URL, as `proxbox up` leases one):
the CPU-s the processes used until both workers listen on their queues, the wall-clock
seconds to that point, and their memory then (PSS: pages shared between processes counted
once, split among them), with the forked way's ratio to the baseline of the same run.

    uv run python benchmarks/rq_workers.py [--rounds 2]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from proxbox_devstack import redis_databases
from proxbox_devstack.components import stack_workers
from proxbox_devstack.rq_workers import worker_arguments
from proxbox_devstack.state import REDIS_URL_ENV
from proxbox_devstack.testdb import netbox_scratch_database


def workers(folder: Path):
    return stack_workers(lambda name: folder / f"{name}.log")


def start_separate(folder: Path) -> list[subprocess.Popen]:
    processes = []
    for worker in workers(folder):
        with worker.log_file.open("wb") as log:
            processes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "netbox", "rqworker", *worker.queues],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
    return processes


def start_forked(folder: Path) -> list[subprocess.Popen]:
    with (folder / "rqworkers.log").open("wb") as log:
        return [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "proxbox_devstack.rq_workers",
                    *worker_arguments(workers(folder)),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        ]


def tree(processes: list[subprocess.Popen]) -> list[psutil.Process]:
    found = []
    for process in processes:
        root = psutil.Process(process.pid)
        found += [root, *root.children(recursive=True)]
    return found


def measure(start, folder: Path) -> dict[str, float]:
    began = time.monotonic()
    processes = start(folder)
    logs = [worker.log_file for worker in workers(folder)]
    members: list[psutil.Process] = []
    try:
        while not all(
            log.exists() and "Listening on" in log.read_text(errors="replace") for log in logs
        ):
            if any(process.poll() is not None for process in processes):
                raise SystemExit(f"a worker exited; see {folder}")
            time.sleep(0.05)
        wall = time.monotonic() - began
        members = tree(processes)
        cpu = sum(sum(member.cpu_times()[:4]) for member in members)
        pss = sum(member.memory_full_info().pss for member in members)
        return {"cpu": cpu, "wall": wall, "pss_mib": pss / 2**20}
    finally:
        # Only the start is measured: no warm shutdown to wait out (a job NetBox scheduled at
        # the worker's start may be running).
        with contextlib.suppress(psutil.Error):
            members = members or tree(processes)
        for member in members:
            with contextlib.suppress(psutil.Error):
                member.kill()
        for process in processes:
            process.wait()


def run_rounds(rounds: int) -> dict[str, list[dict[str, float]]]:
    ways = {"separate": start_separate, "forked": start_forked}
    figures: dict[str, list[dict[str, float]]] = {way: [] for way in ways}
    with netbox_scratch_database("zz_rq_workers_bench_", log=lambda _line: None):
        for _ in range(rounds):
            for way, start in ways.items():
                with tempfile.TemporaryDirectory(prefix=f"rq-{way}-") as folder:
                    figures[way].append(measure(start, Path(folder)))
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    options = parser.parse_args()
    # Queues of their own, as `proxbox up` leases them: nothing else's jobs or workers.
    lease_home = Path(tempfile.mkdtemp(prefix="rq-workers-bench-"))
    lease = redis_databases.acquire(os.environ[REDIS_URL_ENV], lease_home)
    if lease is not None:
        os.environ[redis_databases.DATABASES_ENV] = lease.databases.to_env()
    try:
        figures = run_rounds(options.rounds)
    finally:
        if lease is not None:
            lease.release()
        shutil.rmtree(lease_home, ignore_errors=True)
    median = {
        way: {key: statistics.median(run[key] for run in runs) for key in runs[0]}
        for way, runs in figures.items()
    }
    print(f"two RQ workers until both listen, median of {options.rounds} rounds:")
    for way, values in median.items():
        print(
            f"  {way:9} {values['cpu']:6.2f} CPU-s  {values['wall']:5.1f} s  "
            f"{values['pss_mib']:6.0f} MiB PSS"
        )
    base, forked = median["separate"], median["forked"]
    print(
        f"  forked / separate: CPU {forked['cpu'] / base['cpu']:.2f}, "
        f"wall {forked['wall'] / base['wall']:.2f}, memory {forked['pss_mib'] / base['pss_mib']:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
