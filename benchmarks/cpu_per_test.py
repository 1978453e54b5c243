"""CPU per test, for finding where a test run's time goes: a pytest plugin and a report.

As a plugin it records, for every test, the CPU its own process used (`getrusage`
RUSAGE_SELF), that of the children it reaped meanwhile (RUSAGE_CHILDREN: a server a
fixture stops at a module's or the session's end counts in the test that ends it) and
that of its live descendants (from /proc: the servers a fixture runs, NetBox's gunicorn
workers included, while the test uses them; what they reaped counts too). Detached
processes and PostgreSQL count nowhere. Each test process writes one tab-separated file
(self, children, descendants, wall-clock seconds, test id) into PROXBOX_CPU_PER_TEST_DIR:

    PROXBOX_CPU_PER_TEST_DIR=/tmp/cpu PYTHONPATH=benchmarks \\
        PYTEST_ADDOPTS="-p cpu_per_test" bash .ci/run

Run as a script it prints each process's totals, then the costliest modules and tests of
all of them:

    uv run python benchmarks/cpu_per_test.py /tmp/cpu [--top 40]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

import proc_stat
import pytest

DIR_ENV = "PROXBOX_CPU_PER_TEST_DIR"
_rows: list[tuple[float, float, float, float, str]] = []


def _descendants_cpu(root: int) -> float:
    """CPU-s of `root`'s live descendants, each with what it reaped."""
    processes = proc_stat.read_all()
    total = 0.0
    for process in processes.values():
        ancestor = process.parent
        while ancestor and ancestor != root:
            ancestor = processes[ancestor].parent if ancestor in processes else 0
        if ancestor == root:
            total += process.own + process.reaped
    return total


def _cpu() -> tuple[float, float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (
        own.ru_utime + own.ru_stime,
        children.ru_utime + children.ru_stime,
        _descendants_cpu(os.getpid()),
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    started, before = time.monotonic(), _cpu()
    yield
    after = _cpu()
    own, children, descendants = (a - b for a, b in zip(after, before, strict=True))
    _rows.append((own, children, descendants, time.monotonic() - started, item.nodeid))


def pytest_sessionfinish(session):
    folder = os.environ.get(DIR_ENV)
    if not folder or not _rows:
        return
    lines = (
        f"{own:.2f}\t{children:.2f}\t{descendants:.2f}\t{wall:.2f}\t{nodeid}\n"
        for own, children, descendants, wall, nodeid in _rows
    )
    (Path(folder) / f"cpu_{os.getpid()}.tsv").write_text("".join(lines), "utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("folder", type=Path, help=f"what {DIR_ENV} named")
    parser.add_argument(
        "--top", type=int, default=40, help="modules and tests to list (default 40)"
    )
    args = parser.parse_args(argv)
    files = sorted(args.folder.glob("cpu_*.tsv"))
    if not files:
        print(f"cpu_per_test: no cpu_*.tsv in {args.folder}", file=sys.stderr)
        return 1
    every = []
    print("process totals (CPU-s: own + reaped children + live descendants; wall-clock s;")
    print("tests; first test):")
    modules: dict[str, list[float]] = {}
    for path in files:
        rows = []
        for line in path.read_text("utf-8").splitlines():
            own, children, descendants, wall, nodeid = line.split("\t", 4)
            row = (float(own), float(children), float(descendants), float(wall), nodeid)
            rows.append(row)
            module = modules.setdefault(nodeid.split("::", 1)[0], [0.0, 0.0])
            module[0] += sum(row[:3])
            module[1] += row[3]
        every += rows
        own, children, descendants, wall = (sum(row[i] for row in rows) for i in range(4))
        print(
            f"  {own:8.1f} + {children:8.1f} + {descendants:8.1f}  {wall:8.1f}  {len(rows):5d}"
            f"  {rows[0][4]}"
        )
    print(f"costliest {args.top} modules (CPU-s, wall-clock s):")
    for name, (cpu, wall) in sorted(modules.items(), key=lambda m: -m[1][0])[: args.top]:
        print(f"  {cpu:7.1f}  {wall:7.1f}  {name}")
    print(f"costliest {args.top} tests (CPU-s: total = own + reaped children + descendants; wall):")
    costliest = sorted(every, key=lambda row: -sum(row[:3]))[: args.top]
    for own, children, descendants, wall, nodeid in costliest:
        total = own + children + descendants
        print(
            f"  {total:7.1f} = {own:6.1f} + {children:6.1f} + {descendants:6.1f}  {wall:7.1f}"
            f"  {nodeid}"
        )
    return 0


if __name__ == "__main__":
    from proxbox_redaction import run_console  # a closed pipe (`| head`) ends it quietly

    sys.exit(run_console("cpu_per_test", main))
