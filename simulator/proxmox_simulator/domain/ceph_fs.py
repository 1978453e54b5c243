"""Ceph metadata servers (MDS) and CephFS: the rules on the cluster state.

An MDS is configured (``[mds.<id>]`` in ceph.conf) and running or not.  Which
running MDS serves which file system is derived, as Ceph's MDS map does it:
each file system (oldest first) takes the first running MDS (by name) not
already serving one as its rank 0 (``up:active``); the rest are ``up:standby``
(``up:standby-replay`` when created as hot standby and a file system exists).
Destroying or stopping an active MDS therefore hands its rank to a standby.
Nothing here does I/O: the cluster service loads and stores the state.
"""

from __future__ import annotations

from proxmox_simulator.domain.errors import PveError

MDS_PORT = 6800
DEFAULT_FS = "cephfs"
DEFAULT_FS_PG_NUM = 128


def mds_states(state: dict) -> dict[str, dict]:
    """MDS id → {"state", "rank", "fs"} as the MDS map would show it."""
    daemons = state.get("mds", {})
    running = [name for name in sorted(daemons) if daemons[name].get("up", 1)]
    out = {name: {"state": "stopped"} for name in daemons}
    free = list(running)
    for fs_name, _fs in sorted(state.get("fs", {}).items(), key=lambda item: item[1]["id"]):
        if free:
            out[free.pop(0)] = {"state": "up:active", "rank": 0, "fs": fs_name}
    for name in free:
        replay = daemons[name].get("standby_replay") and state.get("fs")
        out[name] = {"state": "up:standby-replay" if replay else "up:standby"}
    return out


def list_mds(state: dict) -> list[dict]:
    derived = mds_states(state)
    out = []
    for name, mds in sorted(state.get("mds", {}).items()):
        entry = {
            "name": name,
            "host": mds["host"],
            "addr": mds["addr"],
            "state": derived[name]["state"],
            "standby_replay": int(bool(mds.get("standby_replay"))),
        }
        if "rank" in derived[name]:
            entry["rank"] = derived[name]["rank"]
        out.append(entry)
    return out


def fsmap(state: dict) -> dict:
    """The ``fsmap`` part of ``ceph status``."""
    derived = mds_states(state)
    file_systems = state.get("fs", {})
    by_rank = [
        {
            "filesystem_id": file_systems[d["fs"]]["id"],
            "rank": d["rank"],
            "name": name,
            "status": "up:active",
        }
        for name, d in sorted(derived.items())
        if d["state"] == "up:active"
    ]
    standby = sum(1 for d in derived.values() if d["state"].startswith("up:standby"))
    return {"epoch": state.get("fs_epoch", 1), "by_rank": by_rank, "up:standby": standby}


def list_fs(state: dict) -> list[dict]:
    return [
        {"name": name, "metadata_pool": fs["metadata_pool"], "data_pool": fs["data_pool"]}
        for name, fs in sorted(state.get("fs", {}).items(), key=lambda item: item[1]["id"])
    ]


def check_mds_id(mds_id: str) -> None:
    if mds_id[:1].isdigit():
        raise PveError("ID of the MDS cannot start with a number!")


def fs_pools(name: str) -> tuple[str, str]:
    """CephFS ``<name>`` stores its data and metadata in ``<name>_data`` / ``<name>_metadata``."""
    return f"{name}_data", f"{name}_metadata"


def check_create_fs(state: dict, name: str) -> None:
    """pveceph's checks before it forks the ``cephfscreate`` worker, in its order."""
    data, metadata = fs_pools(name)
    if data in state["pools"] or metadata in state["pools"]:
        raise PveError(f"ceph pools '{data}' and/or '{metadata}' already exist")
    if name in state.get("fs", {}):
        raise PveError(f"ceph fs '{name}' already exists")
    derived = mds_states(state)
    if not any(d["state"].startswith("up:") for d in derived.values()):
        raise PveError("no running Metadata Server (MDS) found!")
    if not any(d["state"] == "up:standby" for d in derived.values()):
        raise PveError("no standby Metadata Server (MDS) found!")


def metadata_pg_num(pg_num: int) -> int:
    """The metadata pool gets a quarter of the data pool's PGs (at least 8)."""
    return pg_num // 4 if pg_num >= 32 else 8


def create_mds(state: dict, mds_id: str, host: str, addr: str, hot_standby: bool) -> str:
    state.setdefault("mds", {})
    if mds_id in state["mds"]:
        raise PveError(f"MDS '{mds_id}' already referenced in ceph config, abort!")
    state["mds"][mds_id] = {"host": host, "addr": addr, "standby_replay": hot_standby, "up": 1}
    state["fs_epoch"] = state.get("fs_epoch", 1) + 1
    return f"creating MDS mds.{mds_id} on {host}"


def destroy_mds(state: dict, mds_id: str) -> str:
    # PVE drops the ceph.conf section if there is one and removes the daemon; an
    # unknown id leaves nothing to remove, which is no error.
    state.get("mds", {}).pop(mds_id, None)
    state["fs_epoch"] = state.get("fs_epoch", 1) + 1
    return f"removed MDS mds.{mds_id}"


def create_fs(state: dict, name: str, pool_defaults: dict, pg_num: int) -> list[str]:
    """The worker's effect: both pools (application ``cephfs``), then the file system."""
    check_create_fs(state, name)
    data, metadata = fs_pools(name)
    lines = []
    for pool_name, pgs in ((data, pg_num), (metadata, metadata_pg_num(pg_num))):
        lines.append(
            f"creating {'data' if pool_name == data else 'metadata'} pool '{pool_name}'..."
        )
        state["pools"][pool_name] = {
            "id": state["next_pool_id"],
            **pool_defaults,
            "pg_num": pgs,
            "application": "cephfs",
        }
        state["next_pool_id"] += 1
    state.setdefault("fs", {})[name] = {
        "id": state.get("next_fs_id", 1),
        "data_pool": data,
        "metadata_pool": metadata,
    }
    state["next_fs_id"] = state.get("next_fs_id", 1) + 1
    state["fs_epoch"] = state.get("fs_epoch", 1) + 1
    lines += [f"configuring new CephFS '{name}'", f"Successfully create CephFS '{name}'"]
    return lines


def pool_user(state: dict, pool_name: str) -> str | None:
    """The CephFS using a pool, if any (Ceph refuses to delete such a pool)."""
    for name, fs in state.get("fs", {}).items():
        if pool_name in (fs["data_pool"], fs["metadata_pool"]):
            return name
    return None


def destroy_fs(state: dict, name: str, remove_pools: bool) -> list[str]:
    """``fs rm``: Ceph refuses while an MDS still serves the file system; the pools go
    only when asked (their removal failing is a warning, as in PVE)."""
    fs = state.get("fs", {}).get(name)
    if fs is None:
        raise PveError(f"no such cephfs '{name}'")
    if any(d.get("fs") == name for d in mds_states(state).values()):
        raise PveError(
            "mon_command failed - all MDS daemons must be inactive/failed before removing "
            "filesystem. See `ceph fs fail`."
        )
    del state["fs"][name]
    state["fs_epoch"] = state.get("fs_epoch", 1) + 1
    lines = [f"removed CephFS '{name}'"]
    if remove_pools:
        for pool in (fs["metadata_pool"], fs["data_pool"]):
            lines.append(
                f"removing {'metadata' if pool == fs['metadata_pool'] else 'data'} pool '{pool}'"
            )
            state["pools"].pop(pool, None)
    return lines
