"""Run the workspace's test suites side by side, for `nox` (the `tests` and `e2e` sessions
and the default run that overlaps them).

On a two-core machine the suites leave a core idle much of the time: the end-to-end
suite mostly waits on the servers it starts, while the Django suites keep one core
busy. So up to `jobs` suites run at once, each a pytest process of its own with its
output in a log file; a finished suite prints one line (its duration and outcome),
a failed one its whole log, and the run ends with every suite's duration and the
wall-clock time, the figures CI's time budget is watched by, and with what the machine
did meanwhile: how busy its CPUs were, how much CPU work the run took, and how long a
fixed piece of Python work took before and after. Two machines drawn for CI can differ
by half in speed, and one machine by a fifth within an hour; those figures say whether a
longer run did more work or ran on a slower machine.

Suites that run at the same time must not share a NetBox's Redis queues (a NetBox test
case flushes its queue database): each suite names its Redis database pair in its
environment (PROXBOX_REDIS_DATABASES).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

JOBS_ENV = "PROXBOX_TEST_JOBS"
# How many suites share the machine at once when PROXBOX_TEST_JOBS is unset: measured on
# two cores, a third suite beside the end-to-end one and a Django suite made the run longer.
DEFAULT_JOBS = 2
POLL_SECONDS = 0.2


@dataclass
class Suite:
    """One pytest process: `argv` after `pytest`, `env` added to the run's environment."""

    name: str
    argv: Sequence[str]
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class Outcome:
    suite: Suite
    returncode: int
    seconds: float
    log: Path

    @property
    def passed(self) -> bool:
        return self.returncode == 0


def jobs_from_env(environ: dict[str, str] | os._Environ = os.environ) -> int:
    raw = environ.get(JOBS_ENV, "").strip()
    if not raw:
        return DEFAULT_JOBS
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"{JOBS_ENV}={raw!r} is invalid: expected a whole number of at least 1")
    return int(raw)


@dataclass(frozen=True)
class CpuTimes:
    """The machine's CPU seconds so far, summed over its CPUs (`/proc/stat`'s `cpu` line)."""

    busy: float
    idle: float
    stolen: float

    @classmethod
    def read(cls, stat: Path = Path("/proc/stat")) -> CpuTimes | None:
        """None where there is no such file (not Linux) or its first line is not the
        machine's `cpu` line: the run's figures never fail the run."""
        try:
            label, *values = stat.read_text().splitlines()[0].split()
            # user nice system idle iowait irq softirq steal; guest time is inside user's.
            user, nice, system, idle, iowait, irq, softirq, steal = map(int, values[:8])
        except (OSError, IndexError, ValueError):
            return None
        if label != "cpu":
            return None
        hz = os.sysconf("SC_CLK_TCK")
        return cls(
            busy=(user + nice + system + irq + softirq) / hz,
            idle=(idle + iowait) / hz,
            stolen=steal / hz,
        )


def reference_work_seconds(repeats: int = 3) -> float:
    """CPU seconds of a fixed piece of Python work (dicts, strings, JSON, a regex: what
    the suites' processes mostly do), the fastest of `repeats`: the machine's speed."""
    fastest = float("inf")
    for _ in range(repeats):
        began = time.process_time()
        guests = [
            {"vmid": i, "name": f"vm-{i}", "tags": ["proxbox", f"t{i % 7}"], "mb": i * 64}
            for i in range(60_000)
        ]
        text = json.dumps(guests)
        by_tag: dict[str, int] = {}
        for guest in json.loads(text):
            for tag in guest["tags"]:
                by_tag[tag] = by_tag.get(tag, 0) + guest["mb"]
        sorted(guests, key=lambda guest: (guest["tags"][1], guest["name"]))
        re.findall(r'"vm-(\d+)"', text)
        fastest = min(fastest, time.process_time() - began)
    return fastest


def machine_summary(
    before: CpuTimes, after: CpuTimes, cpus: int, work_before: float, work_after: float
) -> str:
    busy = after.busy - before.busy
    stolen = after.stolen - before.stolen
    total = busy + stolen + (after.idle - before.idle)
    share = (lambda part: 100 * part / total) if total > 0 else (lambda part: 0.0)
    return (
        f"machine: {cpus} CPUs {share(busy):.0f} % busy, {share(stolen):.0f} % stolen by the"
        f" host; {busy:,.0f} CPU-s of work while the suites ran; a fixed piece of Python work"
        f" took {work_before:.2f} CPU-s before them and {work_after:.2f} after (less is a"
        " faster machine)"
    )


def _summary_lines(log: Path, count: int = 25) -> str:
    """The end of a passed suite's log: pytest's slowest tests and its result line."""
    lines = log.read_text(errors="replace").splitlines()
    return "\n".join(lines[-count:])


def run_suites(
    suites: Sequence[Suite],
    log_dir: Path,
    jobs: int,
    env: dict[str, str],
    say: Callable[[str], None] = print,
) -> list[Outcome]:
    """Run `suites` in order, at most `jobs` at once; every suite runs even when an
    earlier one fails. Returns each suite's outcome, in the order given."""
    log_dir.mkdir(parents=True, exist_ok=True)
    waiting = list(suites)
    running: dict[str, tuple[Suite, subprocess.Popen, float, Path, BinaryIO]] = {}
    outcomes: dict[str, Outcome] = {}
    work_before = reference_work_seconds()
    cpu_before = CpuTimes.read()
    started = time.monotonic()
    try:
        while waiting or running:
            while waiting and len(running) < jobs:
                suite = waiting.pop(0)
                log = log_dir / f"{suite.name.replace('/', '_').replace(' ', '_')}.log"
                handle = log.open("wb")
                process = subprocess.Popen(
                    [sys.executable, "-m", "pytest", *suite.argv],
                    env={**os.environ, **env, **suite.env},
                    stdout=handle,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
                running[suite.name] = (suite, process, time.monotonic(), log, handle)
                say(f"started {suite.name} (log: {log})")
            for name, (suite, process, began, log, handle) in list(running.items()):
                if process.poll() is None:
                    continue
                handle.close()
                del running[name]
                outcome = Outcome(suite, process.returncode, time.monotonic() - began, log)
                outcomes[name] = outcome
                verdict = "passed" if outcome.passed else f"FAILED (exit {process.returncode})"
                if outcome.passed:
                    say(f"{name}: {verdict} in {outcome.seconds:.0f} s\n{_summary_lines(log)}")
                else:
                    say(f"{name}: {verdict} in {outcome.seconds:.0f} s; its output:")
                    say(log.read_text(errors="replace"))
            time.sleep(POLL_SECONDS)
    finally:
        # Interrupted (Ctrl-C, a nox timeout): no suite outlives the run.
        for _, process, *_ in running.values():
            process.terminate()
        for _, process, _, _, handle in running.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            handle.close()
    wall = time.monotonic() - started
    cpu_after = CpuTimes.read()
    ordered = [outcomes[s.name] for s in suites]
    say(durations_table(ordered, wall, jobs))
    if cpu_before is not None and cpu_after is not None:
        cpus = os.cpu_count() or 1
        say(machine_summary(cpu_before, cpu_after, cpus, work_before, reference_work_seconds()))
    return ordered


def durations_table(outcomes: Sequence[Outcome], wall: float, jobs: int) -> str:
    rows = [f"suite durations ({jobs} at once):"]
    for outcome in sorted(outcomes, key=lambda o: -o.seconds):
        state = "passed" if outcome.passed else "FAILED"
        rows.append(f"  {outcome.seconds:7.0f} s  {state:6}  {outcome.suite.name}")
    rows.append(f"  {wall:7.0f} s  wall clock")
    return "\n".join(rows)
