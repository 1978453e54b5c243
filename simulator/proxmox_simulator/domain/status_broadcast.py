"""What `/cluster/resources` knows of a guest's state: its node's last status broadcast.

On PVE a guest's name, status, template flag, CPUs, memory and disk size in
`/cluster/resources` come from the status each node's pvestatd broadcasts every 10 s
(`PVE::API2Tools::extract_vm_stats` reads them from the RRD dump); only the guest's
existence, node, pool, tags and lock are current (pmxcfs). So for up to one cycle after
a start, stop, resize or config change the list shows the old values, and a guest
created since the last broadcast is listed with status `unknown` and nothing else.

`StatusBroadcast(interval)` models that: every `interval` seconds of the simulator's
clock (taken when first read in a new cycle) it keeps what the guests are; with interval
0 (the default) the list is current, as the simulator has always answered.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

# A resource row's columns that come from the broadcast (the rest are current).
BROADCAST_FIELDS = ("name", "status", "template", "cpus", "maxmem", "maxdisk", "started_at")


@dataclass
class StatusBroadcast:
    interval: float = 0.0
    cycle: float | None = None
    seen: dict[int, dict] = field(default_factory=dict)

    def view(self, rows: Iterable[Mapping], now: float) -> list[dict]:
        """The rows as `/cluster/resources` shows them at `now`: each with the broadcast
        columns of the last cycle, `broadcast` False for a guest that has none yet."""
        rows = [dict(row) for row in rows]
        if self.interval <= 0:
            return [{**row, "broadcast": True} for row in rows]
        cycle = now // self.interval
        if self.cycle != cycle:
            self.cycle = cycle
            self.seen = {row["vmid"]: {f: row[f] for f in BROADCAST_FIELDS} for row in rows}
        out = []
        for row in rows:
            known = self.seen.get(row["vmid"])
            out.append({**row, **(known or {}), "broadcast": known is not None})
        return out
