"""Ceph health: the checks the cluster state raises, and the mutes an admin puts on them.

A mute (``ceph health mute <code> [<ttl>] [--sticky]``) hides a check from the
overall status until its TTL ends; a mute that is not sticky also ends when its
check clears.  Expired or cleared mutes are dropped when the state is read, so
the list, ``ceph status`` and health agree.  Nothing here does I/O.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from proxmox_simulator.domain import ceph_fs
from proxmox_simulator.domain.errors import ParameterError, PveError

_UNITS = {
    "s": 1, "sec": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hr": 3600, "hour": 3600, "hours": 3600,
    "d": 86400, "day": 86400, "days": 86400,
    "w": 604800, "wk": 604800, "week": 604800, "weeks": 604800,
    "mo": 2592000, "month": 2592000, "months": 2592000,
    "y": 31536000, "yr": 31536000, "year": 31536000, "years": 31536000,
}  # fmt: skip
_TTL_PART = re.compile(r"(\d+)[ \t]*([a-z]+)")
# Checks a rolling restart may pass without force: the flags an operator sets for it.
RESTART_BENIGN = frozenset({"OSDMAP_FLAGS"})


def ttl_seconds(ttl: str) -> int:
    parts = _TTL_PART.findall(ttl.strip())
    if not parts or any(unit not in _UNITS for _n, unit in parts):
        raise ParameterError({"ttl": f"invalid time span '{ttl}'"})
    return sum(int(n) * _UNITS[unit] for n, unit in parts)


def _check(severity: str, message: str) -> dict:
    return {"severity": severity, "summary": {"message": message, "count": 1}, "muted": False}


def raised_checks(state: dict, flags: set[str]) -> dict[str, dict]:
    checks: dict = {}
    osds = state["osds"]
    down = [i for i, o in osds.items() if not o["up"]]
    if down:
        checks["OSD_DOWN"] = _check("HEALTH_WARN", f"{len(down)} osds down")
    if flags:
        checks["OSDMAP_FLAGS"] = _check("HEALTH_WARN", f"{','.join(sorted(flags))} flag(s) set")
    usable = sum(1 for o in osds.values() if o["up"] and o["in"])
    small = [n for n, p in state["pools"].items() if usable < int(p["size"])]
    if small:
        checks["PG_DEGRADED"] = _check(
            "HEALTH_WARN", f"Degraded data redundancy: {len(small)} pool(s) undersized"
        )
    return checks


def active_mutes(state: dict, checks: dict, now: float) -> dict[str, dict]:
    """The mutes still in force: not expired, and sticky or on a raised check."""
    return {
        code: mute
        for code, mute in state.get("mutes", {}).items()
        if (mute.get("until") is None or mute["until"] > now)
        and (mute.get("sticky") or code in checks)
    }


def health(state: dict, flags: set[str], now: float) -> dict:
    checks = raised_checks(state, flags)
    mutes = active_mutes(state, checks, now)
    for code, check in checks.items():
        check["muted"] = code in mutes
    loud = [c for c in checks.values() if not c["muted"]]
    return {
        "status": "HEALTH_OK" if not loud else "HEALTH_WARN",
        "checks": checks,
        "mutes": [
            {
                "code": code,
                "sticky": bool(m.get("sticky")),
                "summary": checks[code]["summary"]["message"] if code in checks else "",
                "count": 1,
            }
            for code, m in sorted(mutes.items())
        ],
    }


def list_mutes(state: dict, flags: set[str], now: float) -> list[dict]:
    checks = raised_checks(state, flags)
    out = []
    for code, mute in sorted(active_mutes(state, checks, now).items()):
        entry = {"code": code, "sticky": int(bool(mute.get("sticky")))}
        if code in checks:
            entry["summary"] = checks[code]["summary"]["message"]
        if mute.get("until") is not None:
            entry["ttl"] = datetime.fromtimestamp(mute["until"], UTC).isoformat()
        out.append(entry)
    return out


def set_mute(
    state: dict, code: str, value: bool, sticky: bool, ttl: str | None, now: float
) -> None:
    mutes = state.setdefault("mutes", {})
    if not value:
        mutes.pop(code, None)
        return
    until = now + ttl_seconds(ttl) if ttl else None
    mutes[code] = {"sticky": sticky, "until": until}


def restart_blockers(state: dict, flags: set[str], now: float) -> list[str]:
    """Raised, unmuted checks a rolling restart stops at unless forced."""
    checks = health(state, flags, now)["checks"]
    return [
        f"{code}: {c['summary']['message']}"
        for code, c in sorted(checks.items())
        if not c["muted"] and code not in RESTART_BENIGN
    ]


def _hosts_up(state: dict, without: str | None = None) -> int:
    return len(
        {o["host"] for i, o in state["osds"].items() if o["up"] and o["in"] and i != without}
    )


def safety(state: dict, service: str, daemon_id: str, action: str) -> tuple[bool, str]:
    """Whether stopping or destroying a daemon keeps the cluster available, as Ceph's
    ``ok-to-stop`` / ``safe-to-destroy`` / ``ok-to-rm`` answer it for the state."""
    if service == "mds" and action == "destroy":
        raise PveError(f"Service does not support this action: {service}: {action}")
    if service == "osd":
        osd = state["osds"].get(daemon_id)
        if osd is None:
            raise PveError(f"osd.{daemon_id} does not exist")
        if action == "destroy":
            safe = not osd["in"]
            status = (
                f"OSD(s) {daemon_id} are safe to destroy without reducing data durability."
                if safe
                else f"OSD(s) {daemon_id} have PGs currently mapped to them."
            )
            return safe, status
        # Every pool places one replica per host: it stays available while at least
        # min_size hosts keep an up and in OSD.
        hosts = _hosts_up(state, without=daemon_id)
        offline = [n for n, p in state["pools"].items() if hosts < int(p["min_size"])]
        safe = not offline
        status = (
            f"OSD(s) {daemon_id} are ok to stop without reducing availability or risking data, "
            "provided there are no other concurrent failures or interventions."
            if safe
            else f"unsafe to stop osd(s) at this time ({len(offline)} pool(s) would become inactive)"
        )
        return safe, status
    if service == "mon":
        if daemon_id not in state["mons"]:
            raise PveError(f"mon.{daemon_id} does not exist")
        remaining = len(state["mons"]) - 1
        # Stopping must leave a majority of the monmap; removing shrinks the monmap too.
        safe = remaining > len(state["mons"]) / 2 if action == "stop" else remaining >= 1
        others = ",".join(sorted(n for n in state["mons"] if n != daemon_id))
        status = (
            f"quorum should be preserved ({others}) after {'stopping' if action == 'stop' else 'removing'} [{daemon_id}]"
            if safe
            else f"not enough monitors would be available ({others}) after stopping mons [{daemon_id}]"
        )
        return safe, status
    if service == "mgr":
        # Ceph asks nothing of managers: a standby takes over, or the mgr map waits.
        return daemon_id in state["mgrs"], ""
    derived = ceph_fs.mds_states(state)
    if daemon_id not in derived:
        raise PveError(f"mds.{daemon_id} does not exist")
    standby = any(d["state"].startswith("up:standby") for n, d in derived.items() if n != daemon_id)
    safe = derived[daemon_id]["state"] != "up:active" or standby
    status = (
        "" if safe else f"one or more filesystems is currently degraded (mds.{daemon_id} is active)"
    )
    return safe, status
