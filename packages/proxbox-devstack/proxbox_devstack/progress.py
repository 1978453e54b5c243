"""Progress of `proxbox up`'s long steps: services, migrations, clone, first sync.

Steps run in the launcher and in its children (the database preparation child,
its `migrate` grandchild). Children report through one machine-readable line
on stderr (`EVENT_PREFIX` + JSON), which the launcher turns into a step of its
reporter. The reporter draws rich progress bars on a terminal and writes plain
lines otherwise (`-d`'s log, CI output); the plain lines are parseable again,
so the foreground half of `proxbox up -d` draws the same bars from the log.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

EVENT_PREFIX = "proxbox-progress "
# Plain lines, one per step start, per tenth of a counted step, per step end.
_COUNTED = re.compile(r"^(?P<label>.+) \.\.\. (?P<done>\d+)/(?P<total>\d+)$")
_STARTED = re.compile(r"^(?P<label>.+) \.\.\.$")
_FINISHED = re.compile(r"^(?P<label>.+): done in (?P<seconds>[\d.]+) s$")


def event_line(label: str, done: int | None = None, total: int | None = None, end=False) -> str:
    payload = {"label": label, "done": done, "total": total, "end": end}
    return EVENT_PREFIX + json.dumps(payload)


def emit(label: str, done: int | None = None, total: int | None = None, end=False) -> None:
    """Report progress from a child process to the launcher (on stderr)."""
    print(event_line(label, done, total, end), file=sys.stderr, flush=True)


def parse_event(line: str) -> dict | None:
    if not line.startswith(EVENT_PREFIX):
        return None
    try:
        return json.loads(line[len(EVENT_PREFIX) :])
    except json.JSONDecodeError:
        return None


class Reporter:
    """Shows steps as rich bars on a terminal, else as plain lines through `log`."""

    def __init__(self, log: Callable[[str], None] = print, stream: TextIO | None = None):
        self.log = log
        stream = stream if stream is not None else sys.stdout
        self.rich = stream.isatty()
        self._progress = None
        self._tasks: dict[str, int] = {}
        self._started: dict[str, float] = {}
        self._shown_tenth: dict[str, int] = {}

    def _bars(self):
        if self._progress is None:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
            )

            self._progress = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
            )
            self._progress.start()
        return self._progress

    def start(self, label: str, total: int | None = None) -> None:
        if label in self._started:
            self.update(label, 0, total)
            return
        self._started[label] = time.monotonic()
        if self.rich:
            self._tasks[label] = self._bars().add_task(label, total=total)
        else:
            self.log(f"{label} ...")

    def update(self, label: str, done: int, total: int | None) -> None:
        if label not in self._started:
            self.start(label, total)
        if self.rich:
            self._bars().update(self._tasks[label], completed=done, total=total)
            return
        if total:
            tenth = done * 10 // total
            if tenth != self._shown_tenth.get(label):
                self._shown_tenth[label] = tenth
                self.log(f"{label} ... {done}/{total}")

    def finish(self, label: str) -> None:
        began = self._started.pop(label, None)
        if began is None:
            return
        self._shown_tenth.pop(label, None)
        if self.rich:
            task = self._tasks.pop(label)
            total = self._progress.tasks[task].total if self._progress else None
            self._bars().update(task, completed=total if total else 1, total=total or 1)
        else:
            self.log(f"{label}: done in {time.monotonic() - began:.1f} s")

    def event(self, payload: dict) -> None:
        """A child's event (see `emit`)."""
        if payload.get("end"):
            self.finish(payload["label"])
        elif payload.get("done") is None:
            self.start(payload["label"], payload.get("total"))
        else:
            self.update(payload["label"], payload["done"], payload.get("total"))

    def replay(self, line: str) -> bool:
        """Feed one plain line another reporter wrote; False when it is not a progress line."""
        if match := _COUNTED.match(line):
            self.update(match["label"], int(match["done"]), int(match["total"]))
        elif match := _FINISHED.match(line):
            self.finish(match["label"])
        elif match := _STARTED.match(line):
            self.start(match["label"])
        else:
            return False
        return True

    @contextmanager
    def step(self, label: str, total: int | None = None) -> Iterator[None]:
        self.start(label, total)
        try:
            yield
        finally:
            self.finish(label)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
