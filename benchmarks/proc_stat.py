"""Every process's CPU as the kernel counts it (/proc/PID/stat), for the scripts that
attribute a run's CPU to processes (`cpu_per_test.py`, `cpu_by_command.py`)."""

from __future__ import annotations

import os
from dataclasses import dataclass

_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ProcessCPU:
    pid: int
    parent: int
    started: int  # clock ticks after boot: with the pid, names one process for good
    own: float  # CPU-s it used (user + system)
    reaped: float  # CPU-s of the children it waited for


def read_all() -> dict[int, ProcessCPU]:
    """The processes readable now, by pid (one that ends meanwhile is left out)."""
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as stat:
                fields = stat.read().rpartition(b")")[2].split()
        except OSError:
            continue
        pid = int(entry.name)
        found[pid] = ProcessCPU(
            pid=pid,
            parent=int(fields[1]),
            started=int(fields[19]),
            own=(int(fields[11]) + int(fields[12])) / _TICKS,
            reaped=(int(fields[13]) + int(fields[14])) / _TICKS,
        )
    return found


def command_line(pid: int) -> str:
    """Its command line, or its name in brackets when it has none (a kernel thread, an
    exiting process); "" once it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            command = cmdline.read().replace(b"\0", b" ").decode(errors="replace").strip()
        if command:
            return command
        with open(f"/proc/{pid}/comm") as comm:
            return f"[{comm.read().strip()}]"
    except OSError:
        return ""
