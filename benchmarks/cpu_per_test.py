"""CPU per test, for finding where a test run's time goes: a pytest plugin and a report.

As a plugin it records, for every test, the CPU its own process used (`getrusage`
RUSAGE_SELF) and that of the children it reaped meanwhile (RUSAGE_CHILDREN: a server a
fixture stops at a module's or the session's end counts in the test that ends it;
detached processes and PostgreSQL count nowhere). Each test process writes one
tab-separated file (self, children, test id) into PROXBOX_CPU_PER_TEST_DIR:

    PROXBOX_CPU_PER_TEST_DIR=/tmp/cpu PYTHONPATH=benchmarks \\
        PYTEST_ADDOPTS="-p cpu_per_test" bash .ci/run

Run as a script it prints each process's totals and the costliest tests of all of them:

    uv run python benchmarks/cpu_per_test.py /tmp/cpu [--top 40]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
from pathlib import Path

import pytest

DIR_ENV = "PROXBOX_CPU_PER_TEST_DIR"
_rows: list[tuple[float, float, str]] = []


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    before = _cpu()
    yield
    after = _cpu()
    _rows.append((after[0] - before[0], after[1] - before[1], item.nodeid))


def pytest_sessionfinish(session):
    folder = os.environ.get(DIR_ENV)
    if not folder or not _rows:
        return
    lines = (f"{own:.2f}\t{children:.2f}\t{nodeid}\n" for own, children, nodeid in _rows)
    (Path(folder) / f"cpu_{os.getpid()}.tsv").write_text("".join(lines), "utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("folder", type=Path, help=f"what {DIR_ENV} named")
    parser.add_argument("--top", type=int, default=40, help="tests to list (default 40)")
    args = parser.parse_args(argv)
    files = sorted(args.folder.glob("cpu_*.tsv"))
    if not files:
        print(f"cpu_per_test: no cpu_*.tsv in {args.folder}", file=sys.stderr)
        return 1
    every = []
    print("process totals (CPU-s: own + reaped children, tests, first test):")
    for path in files:
        rows = []
        for line in path.read_text("utf-8").splitlines():
            own, children, nodeid = line.split("\t", 2)
            rows.append((float(own), float(children), nodeid))
        every += rows
        own = sum(row[0] for row in rows)
        children = sum(row[1] for row in rows)
        print(f"  {own:8.1f} + {children:8.1f}  {len(rows):5d}  {rows[0][2]}")
    print(f"costliest {args.top} tests (CPU-s: total = own + reaped children):")
    for own, children, nodeid in sorted(every, key=lambda r: -(r[0] + r[1]))[: args.top]:
        print(f"  {own + children:7.1f} = {own:6.1f} + {children:6.1f}  {nodeid}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
