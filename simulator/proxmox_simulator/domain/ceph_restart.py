"""Rolling restarts of Ceph daemons (``restart-bulk``), cluster-wide or of a node's OSDs.

The worker's effect on the cluster state: the health gate (blocking checks refuse
unless forced), the plan in PVE's order, the ok-to-stop check per daemon, and the
restart, which brings a stopped daemon up.  The node-scoped OSD restart sets
``noout`` around it.  Nothing here opens a transaction: the caller's is used.
"""

from __future__ import annotations

from proxmox_simulator.domain import ceph_health, ceph_service
from proxmox_simulator.domain.errors import PveError


def _daemons(state: dict, kind: str, scope: str) -> list[tuple[str, str, dict]]:
    """(host, id, record) of the daemons a bulk restart visits, in its order."""
    if kind == "osd":
        found = [(o["host"], i, o) for i, o in state["osds"].items()]
        found.sort(key=lambda d: (d[0], int(d[1])))
    elif kind == "mds":
        found = sorted((m["host"], n, m) for n, m in state.get("mds", {}).items())
    else:
        table = state["mons"] if kind == "mon" else state["mgrs"]
        found = sorted(((n, n, d) for n, d in table.items()), key=lambda d: d[1])
    return [d for d in found if scope == "cluster" or d[0] == scope]


async def restart_bulk(conn, state: dict, payload: dict, now: float, installed: str) -> list[str]:
    """The ``srvrestart`` worker of a rolling restart, as PVE's logs it: the health gate,
    the plan, then each daemon after Ceph says it is safe to stop."""
    kind, dry_run = payload["type"], payload["dry_run"]
    flags = await ceph_service.current_flags(conn)
    lines: list[str] = []
    if not dry_run:
        blockers = ceph_health.restart_blockers(state, flags, now)
        if blockers and not payload["force"]:
            raise PveError(
                "Ceph cluster has blocking HEALTH_WARN issues, refusing rolling restart of "
                f"'{kind}' daemons (pass force=1 to override):\n  - " + "\n  - ".join(blockers)
            )
        if blockers:
            lines.append("WARNING: proceeding past HEALTH_WARN blockers due to force=1:")
            lines += [f"  - {b}" for b in blockers]
    daemons = _daemons(state, kind, payload["scope"])
    if payload["only_outdated"]:
        # Every simulated daemon runs the version its node has installed.
        daemons = [d for d in daemons if d[2].get("version", installed) != installed]
    if not daemons:
        what = "outdated OSDs" if payload["only_outdated"] else f"'{kind}' daemons"
        return [*lines, f"no {what} found in cluster, nothing to do"]
    prefix = "[DRY-RUN] " if dry_run else ""
    lines.append(f"{prefix}planned rolling restart order:")
    total = len(daemons)
    lines += [f"  [{i}/{total}] {h}: {kind}.{n}" for i, (h, n, _d) in enumerate(daemons, 1)]
    if dry_run:
        return [*lines, "[DRY-RUN] no daemons were restarted"]
    noout = kind == "osd" and payload["scope"] != "cluster" and payload["set_noout"]
    if noout:
        lines += await ceph_service.apply_flags(conn, {"noout": 1})
    for i, (host, name, record) in enumerate(daemons, 1):
        safe, message = ceph_health.safety(state, kind, name, "stop")
        if not safe and record.get("up", 1):
            raise PveError(
                f"[{i}/{total}] Ceph reports '{kind}.{name}' is not safe to stop: {message}"
            )
        lines.append(f"[{i}/{total}] restarting {kind}.{name} on {host}")
        record["up"] = 1  # a restart starts a stopped daemon too
        lines.append(f"[{i}/{total}] {kind}.{name} is up")
    if noout and "noout" not in flags:
        lines += await ceph_service.apply_flags(conn, {"noout": 0})
    return [*lines, f"rolling restart of '{kind}' daemons finished"]
