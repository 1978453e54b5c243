"""A node's system journal, built from what the simulator recorded about the node.

The journal holds what a PVE node logs about the work it did: the kernel's banner
at the node's boot, pvedaemon's ``starting task``/``end task`` lines around every
task (with the task's user and its exit status), and systemd's lines when a
service task starts, stops, restarts or reloads a unit.  Entries are ordered by
time; nothing later than the simulated clock's "now" is shown.

``syslog`` reads it like ``journalctl -o short`` through PVE's ``dump_journal``
(``start``/``limit`` paging over line numbers, ``since``/``until`` as local
date-times, ``total`` beside the data, "no content" for an empty result);
``journal`` reads it like ``mini-journalreader`` (epoch bounds, cursors, the last
N entries, the first and last lines being the start and end cursors).
"""

from __future__ import annotations

import datetime
import hashlib
import re
import zoneinfo
from dataclasses import dataclass

from proxmox_simulator.domain.errors import ParameterError, PveError
from proxmox_simulator.domain.guest_service import require_node
from proxmox_simulator.domain.node_system_service import SERVICE_DESCRIPTIONS
from proxmox_simulator.repositories import node_system as node_repo
from proxmox_simulator.repositories import tasks as task_repo

_SYSTEMD_VERBS = {
    "start": ("Starting", "Started"),
    "stop": ("Stopping", "Stopped"),
    "restart": ("Stopping", "Started"),
    "reload": ("Reloading", "Reloaded"),
}
_SERVICE_ALIASES = {"postfix": "postfix@-"}
_DEFAULT_LINES = 50
_CURSOR = re.compile(
    r"^s=([0-9a-f]{32});i=([0-9a-f]+);b=([0-9a-f]{32});m=([0-9a-f]+);t=([0-9a-f]+);x=([0-9a-f]{16})$"
)


@dataclass(frozen=True)
class Entry:
    usec: int
    order: int  # ties at one microsecond keep the order they were written in
    unit: str | None
    ident: str
    pid: int | None
    priority: int
    message: str


def _daemon_pid(node: str) -> int:
    return 1000 + int(hashlib.sha256(f"pvedaemon:{node}".encode()).hexdigest()[:4], 16) % 8000


def _owner(row) -> str:
    return f"{row['userid']}!{row['tokenid']}" if row["tokenid"] else row["userid"]


def _entries(node_row, tasks, kernel: str, now: int) -> list[Entry]:
    node = node_row["node"]
    daemon = _daemon_pid(node)
    out = [
        Entry(
            node_row["boot_epoch"] * 1_000_000,
            0,
            None,
            "kernel",
            None,
            5,
            f"Linux version {kernel} (build@proxmox) #1 SMP PREEMPT_DYNAMIC PMX",
        )
    ]
    for index, task in enumerate(tasks):
        who = f"<{_owner(task)}>"
        base = (index + 1) * 4
        out.append(
            Entry(
                task["starttime"] * 1_000_000,
                base,
                "pvedaemon.service",
                "pvedaemon",
                daemon,
                6,
                f"{who} starting task {task['upid']}",
            )
        )
        unit = verbs = None
        if task["type"].startswith("srv") and task["id"] in SERVICE_DESCRIPTIONS:
            unit = f"{task['id']}.service"
            verbs = _SYSTEMD_VERBS.get(task["type"][3:])
        if task["endtime"] is None or task["endtime"] > now:
            continue
        end = task["endtime"] * 1_000_000
        if unit and verbs:
            desc = SERVICE_DESCRIPTIONS[task["id"]]
            out.append(
                Entry(end, base + 1, unit, "systemd", 1, 6, f"{verbs[0]} {unit} - {desc}...")
            )
            out.append(Entry(end, base + 2, unit, "systemd", 1, 6, f"{verbs[1]} {unit} - {desc}."))
        status = task["exitstatus"] or "unexpected status"
        priority = 6 if status == "OK" or status.startswith("WARNINGS") else 3
        out.append(
            Entry(
                end,
                base + 3,
                "pvedaemon.service",
                "pvedaemon",
                daemon,
                priority,
                f"{who} end task {task['upid']} {status}",
            )
        )
    return sorted((e for e in out if e.usec <= now * 1_000_000), key=lambda e: (e.usec, e.order))


async def _journal(rt, node: str) -> tuple[list[Entry], zoneinfo.ZoneInfo, str]:
    now = int(rt.clock.now())
    async with rt.pool.acquire() as conn:
        node_row = await require_node(conn, node)
        zone = (await node_repo.setting(conn, node, "timezone", "UTC"))["value"]
        tasks = await task_repo.node_history(conn, node)
    entries = _entries(node_row, tasks, rt.adapter.kernel_release, now)
    return entries, zoneinfo.ZoneInfo(zone), node


def _short(entry: Entry, zone, node: str) -> str:
    when = datetime.datetime.fromtimestamp(entry.usec / 1_000_000, zone).strftime("%b %d %H:%M:%S")
    ident = f"{entry.ident}[{entry.pid}]" if entry.pid is not None else entry.ident
    return f"{when} {node} {ident}: {entry.message}"


def _local_epoch(text: str, zone) -> int:
    """journalctl's ``--since``/``--until`` date-time (node local time), as epoch seconds."""
    parts = text.split(" ")
    day = datetime.date.fromisoformat(parts[0])
    hms = [int(p) for p in parts[1].split(":")] if len(parts) > 1 else []
    # A bare date means its midnight, like journalctl.
    hms += [0] * (3 - len(hms))
    local = datetime.datetime(day.year, day.month, day.day, *hms, tzinfo=zone)
    return int(local.timestamp())


async def syslog(rt, node: str, params: dict) -> tuple[list[dict], int]:
    entries, zone, name = await _journal(rt, node)
    service = params.get("service")
    if service:
        unit = _SERVICE_ALIASES.get(service, service)
        unit = unit if "." in unit else f"{unit}.service"
        entries = [e for e in entries if e.unit == unit]
    if params.get("since"):
        since = _local_epoch(params["since"], zone) * 1_000_000
        entries = [e for e in entries if e.usec >= since]
    if params.get("until"):
        until = _local_epoch(params["until"], zone) * 1_000_000
        entries = [e for e in entries if e.usec <= until]
    start = int(params.get("start") or 0)
    limit = int(params.get("limit") or _DEFAULT_LINES)
    lines = [
        {"n": n, "t": _short(e, zone, name)}
        for n, e in enumerate(entries, start=1)
        if start < n <= start + limit
    ]
    count = len(entries)
    if not count:
        # PVE adds this line: the GUI's store does not like an empty array.
        count, lines = 1, [{"n": 1, "t": "no content"}]
    return lines, count


def _boot_id(node: str) -> str:
    return hashlib.md5(f"pvesim-boot:{node}".encode()).hexdigest()


def _cursor(entry: Entry, seqnum: int, node: str) -> str:
    boot = _boot_id(node)
    xor = hashlib.sha256(f"{entry.usec}:{entry.order}:{entry.message}".encode()).hexdigest()[:16]
    return f"s={boot};i={seqnum:x};b={boot};m={entry.usec:x};t={entry.usec:x};x={xor}"


def _seek(cursor: str, node: str) -> int:
    """The sequence number a cursor names; a malformed one fails like the reader does."""
    match = _CURSOR.match(cursor)
    if not match or match.group(1) != _boot_id(node):
        raise PveError(f"command '/usr/bin/mini-journalreader -f {cursor}' failed: exit code 1")
    return int(match.group(2), 16)


def _matches(entry: Entry, params: dict) -> bool:
    unit = params.get("unit") or params.get("service")
    if unit and entry.unit != (unit if "." in unit else f"{unit}.service"):
        return False
    if params.get("kernel") and entry.ident != "kernel":
        return False
    priority = params.get("priority")
    if priority:
        low, _, high = priority.partition("..")
        lo, hi = (int(low), int(high)) if high else (0, int(low))
        if not min(lo, hi) <= entry.priority <= max(lo, hi):
            return False
    return True


async def journal(rt, node: str, params: dict) -> list[str]:
    since, until = params.get("since"), params.get("until")
    start, end = params.get("startcursor"), params.get("endcursor")
    if since and start:
        raise ParameterError({"startcursor": "conflicts with 'since'"})
    if until and end:
        raise ParameterError({"endcursor": "conflicts with 'until'"})
    entries, zone, name = await _journal(rt, node)
    numbered = [(seq, e) for seq, e in enumerate(entries, start=1) if _matches(e, params)]
    ranged = bool(since or until or start or end)
    if since:
        numbered = [(s, e) for s, e in numbered if e.usec >= int(since) * 1_000_000]
    if until:
        numbered = [(s, e) for s, e in numbered if e.usec <= int(until) * 1_000_000]
    if start:
        after = _seek(start, name)
        numbered = [(s, e) for s, e in numbered if s > after]
    if end:
        before = _seek(end, name)
        numbered = [(s, e) for s, e in numbered if s < before]
    last = params.get("lastentries")
    if last or not ranged:
        numbered = numbered[-int(last or _DEFAULT_LINES) :]
    if not numbered:
        return []
    first_seq, first = numbered[0]
    last_seq, final = numbered[-1]
    return [
        _cursor(first, first_seq, name),
        *(_short(e, zone, name) for _s, e in numbered),
        _cursor(final, last_seq, name),
    ]
