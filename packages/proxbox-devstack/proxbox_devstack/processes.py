"""Child processes of the stack: start them detached from the terminal, find them
again from a record, and stop them without ever hitting an unrelated process.

A record is the PID plus the process's start time: a PID reused by the kernel
for another program after a crash has a different start time, so a stale
record never stops the wrong process.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from .errors import StackError


@dataclass(frozen=True)
class ProcessRecord:
    pid: int
    started: float

    @classmethod
    def of(cls, pid: int) -> ProcessRecord:
        return cls(pid=pid, started=psutil.Process(pid).create_time())

    def to_json(self) -> dict[str, float | int]:
        return {"pid": self.pid, "started": self.started}

    @classmethod
    def from_json(cls, raw: Mapping[str, float | int] | int) -> ProcessRecord:
        if isinstance(raw, int):  # a bare PID, as older state files recorded it
            return cls(pid=raw, started=0.0)
        return cls(pid=int(raw["pid"]), started=float(raw["started"]))

    def process(self) -> psutil.Process | None:
        """The live process this record names, or None when it is gone or was replaced."""
        try:
            proc = psutil.Process(self.pid)
            if self.started and abs(proc.create_time() - self.started) > 0.05:
                return None
            if proc.status() == psutil.STATUS_ZOMBIE:
                return None
            return proc
        except psutil.Error:
            return None

    def alive(self) -> bool:
        return self.process() is not None


def stop(record: ProcessRecord, sig: int = signal.SIGTERM, timeout: float = 15.0) -> bool:
    """Stop the recorded process and everything in its process group.

    Sends `sig`, waits up to `timeout` seconds, then kills what is left. Returns
    True when something was running.
    """
    proc = record.process()
    if proc is None:
        return False
    members = [proc]
    with contextlib.suppress(psutil.Error):
        members += proc.children(recursive=True)
    try:
        # Our children lead their own process group (start_new_session), so the
        # group signal also reaches workers they forked (gunicorn, postgres backends).
        if os.getpgid(record.pid) == record.pid:
            os.killpg(record.pid, sig)
        else:
            proc.send_signal(sig)
    except (ProcessLookupError, psutil.NoSuchProcess):
        return True
    _, remaining = psutil.wait_procs(members, timeout=timeout)
    for leftover in remaining:
        with contextlib.suppress(psutil.Error):
            leftover.kill()
    psutil.wait_procs(remaining, timeout=5)
    return True


@dataclass
class ProcessSpec:
    """How to run one managed process of the stack.

    `ready` answers whether the process serves requests yet; `stop_signal` is
    the signal that shuts it down cleanly (SIGINT is PostgreSQL's fast shutdown).
    """

    name: str
    argv: Sequence[str]
    log_file: Path
    env: Mapping[str, str] | None = None
    cwd: Path | None = None
    ready: Callable[[], bool] | None = None
    ready_timeout: float = 60.0
    stop_signal: int = signal.SIGTERM
    stop_timeout: float = 15.0
    user: str | None = None
    extra: dict[str, str] = field(default_factory=dict)


class ProcessFailed(StackError):
    """A managed process died or never became ready; the message quotes its log."""

    def __init__(self, spec: ProcessSpec, reason: str) -> None:
        last = last_log_line(spec.log_file)
        detail = f": {last}" if last else ""
        super().__init__(f"{spec.name} {reason}{detail} (see {spec.log_file})")
        self.spec = spec


def last_log_line(path: Path) -> str:
    """The last non-empty line of a log file, for one-line error messages."""
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, path.stat().st_size - 4000))
            lines = handle.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    return next((line.strip() for line in reversed(lines) if line.strip()), "")


def open_log(path: Path, mode: str = "ab"):
    """Append to a log of the stack, readable by its owner only (0600, as credentials.json):
    logs quote what the processes were handed. A file an older version left 0644 is
    tightened. A new logs folder is the owner's alone; an existing one loses its read and
    write bits for others but keeps their search bit, since it may also hold what a
    service account must reach (the embedded PostgreSQL's data dir beside its log)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder_mode = stat.S_IMODE(path.parent.stat().st_mode)
    if folder_mode & 0o066:
        os.chmod(path.parent, folder_mode & ~0o066)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.fchmod(fd, 0o600)
    return os.fdopen(fd, mode, encoding=None if "b" in mode else "utf-8")


def spawn(spec: ProcessSpec) -> subprocess.Popen:
    """Start `spec` in its own session, output appended to its log file."""
    with open_log(spec.log_file) as log:
        log.write(f"\n--- {time.strftime('%Y-%m-%d %H:%M:%S')} starting {spec.name}\n".encode())
        log.flush()
        kwargs: dict = {}
        if spec.user is not None:
            kwargs.update(user=spec.user, group=_primary_group(spec.user), extra_groups=[])
        return subprocess.Popen(
            list(spec.argv),
            env=dict(spec.env) if spec.env is not None else None,
            cwd=spec.cwd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            **kwargs,
        )


def wait_ready(spec: ProcessSpec, popen: subprocess.Popen) -> None:
    """Block until `spec.ready()` holds; raise ProcessFailed if the process exits or times out."""
    if spec.ready is None:
        return
    deadline = time.monotonic() + spec.ready_timeout
    while True:
        if popen.poll() is not None:
            raise ProcessFailed(spec, f"exited with code {popen.returncode} while starting")
        if spec.ready():
            return
        if time.monotonic() >= deadline:
            raise ProcessFailed(spec, f"was not ready after {spec.ready_timeout:.0f} s")
        time.sleep(0.2)


def _primary_group(user: str) -> int:
    import pwd

    return pwd.getpwnam(user).pw_gid
