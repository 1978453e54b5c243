"""CPU per kind of process while a command runs, for finding which server a test's time
goes to (NetBox's gunicorn, its RQ workers, PostgreSQL, the simulator, the backend).

Every process on the machine is read from /proc four times a second; a process's CPU is
what it used while the command ran (processes started meanwhile count from zero). A
process that ends between two readings loses at most a quarter second. Run it on an
otherwise idle machine: other work's processes count too.

    uv run python benchmarks/cpu_by_command.py -- pytest e2e/test_sync_watch.py -n 0

prints the command's exit code, wall-clock seconds, and CPU-s per kind, largest first.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import threading
import time

import proc_stat

# The first of these found in a process's command line names its kind.
KINDS = (
    "gunicorn",
    "rqworker",
    "warm_netbox",
    "createsuperuser",
    "proxmox_simulator",
    "proxbox_backend",
    "proxbox_devstack",
    "pytest",
    "postgres",
    "chromium",
    "ansible",
    "redis",
)


def kind_of(command: str) -> str:
    return next((kind for kind in KINDS if kind in command), command[:40] or "(unnamed)")


def sample(stop: threading.Event, interval: float) -> dict[str, float]:
    """CPU-s per kind of process from now until `stop` is set (this script's own aside)."""
    baseline = {(p.pid, p.started): p.own for p in proc_stat.read_all().values()}
    last: dict[tuple[int, int], tuple[str, float]] = {}
    while True:
        for process in proc_stat.read_all().values():
            key = (process.pid, process.started)
            command = last[key][0] if key in last else proc_stat.command_line(process.pid)
            last[key] = (command, process.own)
        if stop.wait(interval):
            break
    per_kind: dict[str, float] = collections.Counter()
    for (pid, started), (command, cpu) in last.items():
        if pid != os.getpid():
            per_kind[kind_of(command)] += cpu - baseline.get((pid, started), 0.0)
    return per_kind


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=0.25)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to measure after --")
    stop, result = threading.Event(), {}
    sampler = threading.Thread(target=lambda: result.update(sample(stop, args.interval)))
    sampler.start()
    began = time.monotonic()
    try:
        code = subprocess.call(command)
    finally:
        stop.set()
        sampler.join()
    print(f"exit code {code}, {time.monotonic() - began:.1f} s wall")
    for kind, cpu in sorted(result.items(), key=lambda item: -item[1])[: args.top]:
        if cpu >= 0.05:
            print(f"{cpu:9.2f} CPU-s  {kind}")
    return code


if __name__ == "__main__":
    sys.exit(main())
