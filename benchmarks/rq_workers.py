"""`proxbox up`'s two RQ workers: started as two `netbox rqworker` processes (the baseline)
and forked from one NetBox process (`proxbox_devstack.rq_workers`, what `up` runs).
Prints figures, asserts nothing.

For each way, in alternating rounds on a scratch copy of the migrated NetBox template:
the CPU-s the processes used until both workers listen on their queues, the wall-clock
seconds to that point, and their memory then (PSS: pages shared between processes counted
once, split among them), with the forked way's ratio to the baseline of the same run.

    uv run python benchmarks/rq_workers.py [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from proxbox_devstack.components import NETBOX_QUEUES, SYNC_QUEUE
from proxbox_devstack.rq_workers import Worker, worker_arguments
from proxbox_devstack.testdb import netbox_scratch_database

WORKERS = (("rqworker", NETBOX_QUEUES), ("rqworker-sync", (SYNC_QUEUE,)))


def start_separate(folder: Path) -> list[subprocess.Popen]:
    processes = []
    for name, queues in WORKERS:
        with (folder / f"{name}.log").open("wb") as log:
            processes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "netbox", "rqworker", *queues],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
    return processes


def start_forked(folder: Path) -> list[subprocess.Popen]:
    workers = [Worker(name, folder / f"{name}.log", queues) for name, queues in WORKERS]
    with (folder / "rqworkers.log").open("wb") as log:
        return [
            subprocess.Popen(
                [sys.executable, "-m", "proxbox_devstack.rq_workers", *worker_arguments(workers)],
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
    logs = [folder / f"{name}.log" for name, _ in WORKERS]
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
        for process in processes:
            os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            process.wait(60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    options = parser.parse_args()
    ways = {"separate": start_separate, "forked": start_forked}
    figures: dict[str, list[dict[str, float]]] = {way: [] for way in ways}
    with netbox_scratch_database("zz_rq_workers_bench_", log=lambda _line: None):
        for _ in range(options.rounds):
            for way, start in ways.items():
                with tempfile.TemporaryDirectory(prefix=f"rq-{way}-") as folder:
                    figures[way].append(measure(start, Path(folder)))
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
