"""Cluster, nodes, storages, volumes and pools."""

from __future__ import annotations

import asyncpg

# -- cluster ---------------------------------------------------------------

_CLUSTER = "SELECT name, config_version, version FROM cluster WHERE id = 1"
_RENAME_CLUSTER = """
UPDATE cluster SET name = $1, config_version = config_version + 1, version = version + 1
WHERE id = 1 RETURNING name, config_version, version
"""


async def cluster(conn: asyncpg.Connection) -> asyncpg.Record | None:
    return await conn.fetchrow(_CLUSTER)


async def set_cluster_name(conn: asyncpg.Connection, name: str | None) -> asyncpg.Record:
    return await conn.fetchrow(_RENAME_CLUSTER, name)


# -- nodes -------------------------------------------------------------------

_NODES = "SELECT * FROM nodes ORDER BY node"
_NODE = "SELECT * FROM nodes WHERE node = $1"
_NODE_USAGE = """
SELECT n.node,
       count(g.vmid) FILTER (WHERE g.status <> 'stopped') AS running,
       coalesce(sum(g.maxmem) FILTER (WHERE g.status <> 'stopped'), 0) AS guest_mem
FROM nodes n LEFT JOIN guests g ON g.node = n.node
GROUP BY n.node
"""


async def nodes(conn: asyncpg.Connection) -> list[asyncpg.Record]:
    return await conn.fetch(_NODES)


async def node(conn: asyncpg.Connection, name: str) -> asyncpg.Record | None:
    return await conn.fetchrow(_NODE, name)


async def node_usage(conn: asyncpg.Connection) -> dict[str, asyncpg.Record]:
    return {r["node"]: r for r in await conn.fetch(_NODE_USAGE)}


_INSERT_NODE = """
INSERT INTO nodes (node, nodeid, ip, online, cpus, maxmem, maxdisk, cpu_model, pve_version,
                   kversion, boot_epoch)
VALUES ($1, $2, $3, true, $4, $5, $6, $7, $8, $9, $10)
"""
_BUMP_CONFIG_VERSION = """
UPDATE cluster SET config_version = config_version + 1, version = version + 1 WHERE id = 1
"""


async def insert_node(conn, *, node: str, nodeid: int, ip: str, like, boot_epoch: int) -> None:
    """A new cluster member; its hardware is modelled on ``like`` (an existing node row)."""
    await conn.execute(
        _INSERT_NODE,
        node,
        nodeid,
        ip,
        like["cpus"],
        like["maxmem"],
        like["maxdisk"],
        like["cpu_model"],
        like["pve_version"],
        like["kversion"],
        boot_epoch,
    )


async def delete_node(conn: asyncpg.Connection, node: str) -> None:
    await conn.execute("DELETE FROM volumes WHERE node = $1", node)
    await conn.execute("DELETE FROM nodes WHERE node = $1", node)


async def bump_config_version(conn: asyncpg.Connection) -> None:
    """corosync.conf changed: its ``config_version`` goes up."""
    await conn.execute(_BUMP_CONFIG_VERSION)


async def set_node_power(conn, node: str, *, online: bool, boot_epoch: int | None) -> None:
    await conn.execute(
        "UPDATE nodes SET online = $2, boot_epoch = coalesce($3, boot_epoch) WHERE node = $1",
        node,
        online,
        boot_epoch,
    )


# -- storages and volumes ---------------------------------------------------

_STORAGES = "SELECT * FROM storages ORDER BY storage"
_STORAGE = "SELECT * FROM storages WHERE storage = $1"
_STORAGE_USED = """
SELECT storage, coalesce(node, '') AS node, sum(size) AS used FROM volumes GROUP BY 1, 2
"""
_VOLUMES = """
SELECT * FROM volumes
WHERE storage = $1 AND (node IS NULL OR node = $2)
  AND ($3::text IS NULL OR content = $3) AND ($4::int IS NULL OR vmid = $4)
ORDER BY volid
"""
_VOLUME = "SELECT * FROM volumes WHERE volid = $1"
_INSERT_VOLUME = """
INSERT INTO volumes (volid, storage, node, vmid, content, format, size, ctime)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
"""
_SET_VOLUME_SIZE = "UPDATE volumes SET size = $2 WHERE volid = $1"
_SET_VIRTUAL_SIZE = "UPDATE volumes SET virtual_size = $2 WHERE volid = $1"
_SET_GUEST_CONFIG = "UPDATE volumes SET guest_config = $2 WHERE volid = $1"
_LINKED_CHILD = "SELECT volid FROM volumes WHERE starts_with(volid, $1 || '/') LIMIT 1"
_RENAME_VOLUME = "UPDATE volumes SET volid = $2 WHERE volid = $1"
_DELETE_VOLUME = "DELETE FROM volumes WHERE volid = $1"
_MOVE_LOCAL_VOLUMES = "UPDATE volumes SET node = $2 WHERE vmid = $1 AND node IS NOT NULL"
_DELETE_GUEST_VOLUMES = "DELETE FROM volumes WHERE vmid = $1 AND content IN ('images', 'rootdir')"
# A guest's disks: its backup archives carry its VMID too but are not its volumes.
_GUEST_VOLUMES = """
SELECT volid, size FROM volumes WHERE vmid = $1 AND content IN ('images', 'rootdir')
ORDER BY volid
"""
_GUEST_DISK_BYTES = """
SELECT coalesce(sum(size), 0) FROM volumes WHERE vmid = $1 AND content IN ('images', 'rootdir')
"""
# The cloud-init volume (vm-<vmid>-cloudinit) takes no disk number.
_NEXT_DISK_INDEX = """
SELECT count(*) FROM volumes
WHERE vmid = $1 AND content IN ('images', 'rootdir') AND volid NOT LIKE '%-cloudinit%'
"""


async def storages(conn: asyncpg.Connection) -> list[asyncpg.Record]:
    return await conn.fetch(_STORAGES)


async def storage(conn: asyncpg.Connection, name: str) -> asyncpg.Record | None:
    return await conn.fetchrow(_STORAGE, name)


async def storage_used(conn: asyncpg.Connection) -> dict[tuple[str, str], int]:
    return {(r["storage"], r["node"]): int(r["used"]) for r in await conn.fetch(_STORAGE_USED)}


async def volumes(conn, storage_name: str, node_name: str, content: str | None, vmid: int | None):
    return await conn.fetch(_VOLUMES, storage_name, node_name, content, vmid)


async def volume(conn: asyncpg.Connection, volid: str) -> asyncpg.Record | None:
    return await conn.fetchrow(_VOLUME, volid)


async def insert_volume(conn, *, volid, storage_name, node_name, vmid, content, fmt, size, ctime):
    await conn.execute(
        _INSERT_VOLUME, volid, storage_name, node_name, vmid, content, fmt, size, ctime
    )


_COPY_VOLUME = """
INSERT INTO volumes (volid, storage, node, vmid, content, format, size, ctime, guest_config)
SELECT $2, $3, $4, $5, content, $6, size, $7, guest_config FROM volumes WHERE volid = $1
"""


async def copy_volume(conn, source: str, *, volid, storage_name, node_name, vmid, fmt, ctime):
    """A new volume with the source's content type, size and archived guest config."""
    await conn.execute(_COPY_VOLUME, source, volid, storage_name, node_name, vmid, fmt, ctime)


async def set_volume_size(conn: asyncpg.Connection, volid: str, size: int) -> None:
    await conn.execute(_SET_VOLUME_SIZE, volid, size)


async def set_virtual_size(conn: asyncpg.Connection, volid: str, size: int | None) -> None:
    await conn.execute(_SET_VIRTUAL_SIZE, volid, size)


async def set_guest_config(conn: asyncpg.Connection, volid: str, config: dict | None) -> None:
    """The guest description a volume carries: an archive's config, an OVF's descriptor."""
    await conn.execute(_SET_GUEST_CONFIG, volid, config)


async def linked_child(conn: asyncpg.Connection, volid: str) -> str | None:
    """A linked clone's volume based on ``volid`` (``<base volid>/vm-N-disk-M``), if any."""
    return await conn.fetchval(_LINKED_CHILD, volid)


async def rename_volume(conn: asyncpg.Connection, volid: str, new_volid: str) -> None:
    await conn.execute(_RENAME_VOLUME, volid, new_volid)


async def delete_volume(conn: asyncpg.Connection, volid: str) -> None:
    await conn.execute(_DELETE_VOLUME, volid)


async def move_local_volumes(conn: asyncpg.Connection, vmid: int, node: str) -> None:
    """Volumes on non-shared storage follow the guest to its new node."""
    await conn.execute(_MOVE_LOCAL_VOLUMES, vmid, node)


async def delete_guest_volumes(conn: asyncpg.Connection, vmid: int) -> None:
    await conn.execute(_DELETE_GUEST_VOLUMES, vmid)


async def guest_volumes(conn: asyncpg.Connection, vmid: int) -> list[asyncpg.Record]:
    return await conn.fetch(_GUEST_VOLUMES, vmid)


async def guest_disk_bytes(conn: asyncpg.Connection, vmid: int) -> int:
    return await conn.fetchval(_GUEST_DISK_BYTES, vmid)


async def next_disk_index(conn: asyncpg.Connection, vmid: int) -> int:
    return await conn.fetchval(_NEXT_DISK_INDEX, vmid)


# -- pools -------------------------------------------------------------------

_POOLS = "SELECT poolid, comment FROM pools ORDER BY poolid"
_POOL = "SELECT poolid, comment FROM pools WHERE poolid = $1"
_POOL_STORAGES = "SELECT storage FROM pool_storages WHERE poolid = $1 ORDER BY storage"
_INSERT_POOL = "INSERT INTO pools (poolid, comment) VALUES ($1, $2)"
_UPDATE_POOL_COMMENT = "UPDATE pools SET comment = $2 WHERE poolid = $1"
_DELETE_POOL = "DELETE FROM pools WHERE poolid = $1"
_ADD_POOL_STORAGE = "INSERT INTO pool_storages VALUES ($1, $2) ON CONFLICT DO NOTHING"
_REMOVE_POOL_STORAGE = "DELETE FROM pool_storages WHERE poolid = $1 AND storage = $2"
_POOL_HAS_MEMBERS = """
SELECT EXISTS (SELECT 1 FROM guests WHERE pool = $1)
    OR EXISTS (SELECT 1 FROM pool_storages WHERE poolid = $1)
"""


async def pools(conn):
    return await conn.fetch(_POOLS)


async def pool(conn, poolid: str):
    return await conn.fetchrow(_POOL, poolid)


async def pool_storages(conn, poolid: str) -> list[str]:
    return [r["storage"] for r in await conn.fetch(_POOL_STORAGES, poolid)]


async def insert_pool(conn, poolid: str, comment: str) -> None:
    await conn.execute(_INSERT_POOL, poolid, comment)


async def update_pool_comment(conn, poolid: str, comment: str) -> None:
    await conn.execute(_UPDATE_POOL_COMMENT, poolid, comment)


async def delete_pool(conn, poolid: str) -> None:
    await conn.execute(_DELETE_POOL, poolid)


async def pool_has_members(conn, poolid: str) -> bool:
    return await conn.fetchval(_POOL_HAS_MEMBERS, poolid)


async def add_pool_storage(conn, poolid: str, storage_name: str) -> None:
    await conn.execute(_ADD_POOL_STORAGE, poolid, storage_name)


async def remove_pool_storage(conn, poolid: str, storage_name: str) -> None:
    await conn.execute(_REMOVE_POOL_STORAGE, poolid, storage_name)
