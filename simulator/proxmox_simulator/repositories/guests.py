"""Guest rows (QEMU and LXC share one table so VMIDs are unique cluster-wide)."""

from __future__ import annotations

import asyncpg

from proxmox_simulator.domain.errors import PveError, StaleWrite

_COLUMNS = "vmid, type, node, name, status, template, pool, config, interfaces, started_at, maxmem, maxdisk, cpus, version"
_GET = f"SELECT {_COLUMNS} FROM guests WHERE vmid = $1"
_GET_FOR_UPDATE = f"SELECT {_COLUMNS} FROM guests WHERE vmid = $1 FOR UPDATE"
_INSERT = """
INSERT INTO guests (vmid, type, node, name, status, template, pool, config, interfaces,
                    maxmem, maxdisk, cpus)
VALUES ($1, $2, $3, $4, 'stopped', $5, $6, $7, $8, $9, $10, $11)
"""
# Compare-and-swap: a writer that read an older version updates nothing.
_UPDATE_CONFIG = """
UPDATE guests
SET config = $3, name = $4, maxmem = $5, maxdisk = $6, cpus = $7, interfaces = $8,
    pool = $9, version = version + 1
WHERE vmid = $1 AND version = $2
RETURNING version
"""
_SET_STATUS = """
UPDATE guests SET status = $2, started_at = $3, version = version + 1
WHERE vmid = $1 RETURNING version
"""
_SET_TEMPLATE = """
UPDATE guests SET template = true, config = config || '{"template": 1}'::jsonb,
                  version = version + 1
WHERE vmid = $1
"""
_MOVE = "UPDATE guests SET node = $2, version = version + 1 WHERE vmid = $1"
_SET_POOL = "UPDATE guests SET pool = $2, version = version + 1 WHERE vmid = $1"
_DELETE = "DELETE FROM guests WHERE vmid = $1"
_LIST = f"SELECT {_COLUMNS} FROM guests WHERE ($1::text IS NULL OR node = $1) ORDER BY vmid"
_LIST_POOL = f"SELECT {_COLUMNS} FROM guests WHERE pool = $1 ORDER BY vmid"
_POOL = "SELECT pool FROM guests WHERE vmid = $1"
_EXISTS = "SELECT EXISTS (SELECT 1 FROM guests WHERE vmid = $1)"
_NEXTID = """
SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM guests WHERE vmid = 100) THEN 100 ELSE
  (SELECT min(g.vmid) + 1 FROM guests g
   WHERE NOT EXISTS (SELECT 1 FROM guests h WHERE h.vmid = g.vmid + 1)) END
"""

# The node's guest list is assembled by PostgreSQL as one JSON text from the
# entries rendered at write time (migration 0004); only "uptime" is computed
# here.  This is the hot path of every inventory sync: no per-row Python
# objects and no per-row JSON building on read.
_LIST_JSON = """
SELECT coalesce('[' || string_agg(
    left(list_entry, -1) || ',"uptime":' ||
    (CASE WHEN status = 'stopped' OR started_at IS NULL THEN 0
          ELSE greatest($3::bigint - started_at, 0) END)::text || '}',
    ',' ORDER BY vmid) || ']', '[]')
FROM guests
WHERE node = $1 AND type = $2 AND ($4::int[] IS NULL OR vmid = ANY($4))
"""


class VmidTaken(PveError):
    pass


async def get(conn: asyncpg.Connection, vmid: int, *, for_update: bool = False):
    return await conn.fetchrow(_GET_FOR_UPDATE if for_update else _GET, vmid)


async def pool_of(conn: asyncpg.Connection, vmid: int) -> str | None:
    return await conn.fetchval(_POOL, vmid)


async def exists(conn: asyncpg.Connection, vmid: int) -> bool:
    return await conn.fetchval(_EXISTS, vmid)


# The widest size a guest row stores (bigint): PVE bounds `cores` and `memory` only below,
# and its Perl numbers go on as floats past this.
_WIDEST_SIZE = 2**63 - 1


def _stored(size: int) -> int:
    return min(size, _WIDEST_SIZE)


async def insert(
    conn, *, vmid, kind, node, name, template, pool, config, interfaces, maxmem, maxdisk, cpus
):
    try:
        await conn.execute(
            _INSERT,
            vmid,
            kind,
            node,
            name,
            template,
            pool,
            config,
            interfaces,
            _stored(maxmem),
            _stored(maxdisk),
            _stored(cpus),
        )
    except asyncpg.UniqueViolationError as exc:
        raise VmidTaken(f"unable to create VM {vmid} - VM {vmid} already exists") from exc


async def update_config(
    conn, *, vmid, expected_version, config, name, maxmem, maxdisk, cpus, interfaces, pool
) -> int:
    version = await conn.fetchval(
        _UPDATE_CONFIG,
        vmid,
        expected_version,
        config,
        name,
        _stored(maxmem),
        _stored(maxdisk),
        _stored(cpus),
        interfaces,
        pool,
    )
    if version is None:
        raise StaleWrite("detected modified configuration - file changed by other user? Try again.")
    return version


async def save_config(conn, row, config: dict, **columns) -> int:
    """Write ``config`` over the guest ``row`` was read as, keeping its other columns
    except those given in ``columns``."""
    kept = {key: row[key] for key in ("name", "maxmem", "maxdisk", "cpus", "interfaces", "pool")}
    return await update_config(
        conn,
        vmid=row["vmid"],
        expected_version=row["version"],
        config=config,
        **{**kept, **columns},
    )


async def set_status(conn, vmid: int, status: str, started_at: int | None) -> None:
    await conn.execute(_SET_STATUS, vmid, status, started_at)


async def set_template(conn, vmid: int) -> None:
    await conn.execute(_SET_TEMPLATE, vmid)


async def move(conn, vmid: int, node: str) -> None:
    await conn.execute(_MOVE, vmid, node)


async def set_pool(conn, vmid: int, pool: str | None) -> None:
    await conn.execute(_SET_POOL, vmid, pool)


async def delete(conn, vmid: int) -> None:
    await conn.execute(_DELETE, vmid)


# The cluster resource list needs neither config nor interfaces: decoding
# 10,000 jsonb documents would cost more than the rest of the request.
_RESOURCE_ROWS = """
SELECT vmid, type, node, name, status, template, pool, cpus, maxmem, maxdisk, started_at,
       config->>'tags' AS tags
FROM guests ORDER BY vmid
"""


async def resource_rows(conn):
    return await conn.fetch(_RESOURCE_ROWS)


async def list_all(conn, node: str | None = None):
    return await conn.fetch(_LIST, node)


async def list_pool(conn, pool: str):
    return await conn.fetch(_LIST_POOL, pool)


async def list_json(conn, node: str, kind: str, now: int, vmids: list[int] | None) -> str:
    return await conn.fetchval(_LIST_JSON, node, kind, now, vmids)


_GENERATION = "SELECT value FROM guest_generation WHERE id = 1"


async def generation(conn) -> int:
    """Bumped by a statement trigger on every committed change to ``guests``."""
    return await conn.fetchval(_GENERATION)


async def next_free_vmid(conn) -> int:
    return await conn.fetchval(_NEXTID)


# -- snapshots ---------------------------------------------------------------

_SNAPSHOTS = "SELECT * FROM guest_snapshots WHERE vmid = $1 ORDER BY snaptime, name"
_SNAPSHOT = "SELECT * FROM guest_snapshots WHERE vmid = $1 AND name = $2"
_INSERT_SNAPSHOT = """
INSERT INTO guest_snapshots (vmid, name, parent, description, snaptime, vmstate, config)
VALUES ($1, $2, $3, $4, $5, $6, $7)
"""
_DELETE_SNAPSHOT = "DELETE FROM guest_snapshots WHERE vmid = $1 AND name = $2"
_REPARENT = "UPDATE guest_snapshots SET parent = $3 WHERE vmid = $1 AND parent = $2"
_UPDATE_SNAPSHOT_DESCRIPTION = (
    "UPDATE guest_snapshots SET description = $3 WHERE vmid = $1 AND name = $2"
)


async def snapshots(conn, vmid: int):
    return await conn.fetch(_SNAPSHOTS, vmid)


async def snapshot(conn, vmid: int, name: str):
    return await conn.fetchrow(_SNAPSHOT, vmid, name)


async def insert_snapshot(conn, *, vmid, name, parent, description, snaptime, vmstate, config):
    try:
        await conn.execute(
            _INSERT_SNAPSHOT, vmid, name, parent, description, snaptime, vmstate, config
        )
    except asyncpg.UniqueViolationError as exc:
        raise PveError(f"snapshot name '{name}' already used") from exc


async def delete_snapshot(conn, vmid: int, name: str, parent: str | None) -> None:
    await conn.execute(_REPARENT, vmid, name, parent)
    await conn.execute(_DELETE_SNAPSHOT, vmid, name)


async def update_snapshot_description(conn, vmid: int, name: str, description: str) -> None:
    await conn.execute(_UPDATE_SNAPSHOT_DESCRIPTION, vmid, name, description)
