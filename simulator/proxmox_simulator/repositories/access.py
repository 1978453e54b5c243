"""Users, groups, roles, ACLs, API tokens and realms.

Every write notifies ``pvesim_access`` (delivered at commit) so each process
drops its cached ``AccessState`` and token verifications.
"""

from __future__ import annotations

import asyncpg

from proxmox_simulator.domain.access import AccessState, AclEntry, TokenRecord, UserRecord
from proxmox_simulator.domain.errors import PveError

ACCESS_CHANNEL = "pvesim_access"

_USERS = """
SELECT u.userid, u.enable, u.expire,
       coalesce(array_agg(m.groupid) FILTER (WHERE m.groupid IS NOT NULL), '{}') AS groups
FROM users u LEFT JOIN group_members m ON m.userid = u.userid
GROUP BY u.userid
"""
_ROLES = "SELECT roleid, privs, special FROM roles ORDER BY roleid"
_ACL = "SELECT path, ugid_type, ugid, roleid, propagate FROM acl ORDER BY path, ugid_type, ugid, roleid"
_TOKENS = "SELECT userid, tokenid, secret_hash, privsep, expire, generation FROM api_tokens"


async def notify_changed(conn: asyncpg.Connection) -> None:
    await conn.execute(f"NOTIFY {ACCESS_CHANNEL}")


async def load_state(conn: asyncpg.Connection) -> AccessState:
    users = {
        r["userid"]: UserRecord(r["userid"], r["enable"], r["expire"], frozenset(r["groups"]))
        for r in await conn.fetch(_USERS)
    }
    roles = {r["roleid"]: frozenset(r["privs"]) for r in await conn.fetch(_ROLES)}
    acl = [AclEntry(**dict(r)) for r in await conn.fetch(_ACL)]
    tokens = {
        (r["userid"], r["tokenid"]): TokenRecord(**dict(r)) for r in await conn.fetch(_TOKENS)
    }
    return AccessState(users=users, roles=roles, acl=acl, tokens=tokens)


# -- realms -----------------------------------------------------------------

_REALMS = "SELECT realm, type, comment, is_default, config FROM realms ORDER BY realm"
_REALM = "SELECT realm, type, comment, is_default, config FROM realms WHERE realm = $1"
_ENSURE_REALM = """
INSERT INTO realms (realm, type, comment, is_default) VALUES ($1, $2, $3, $4)
ON CONFLICT (realm) DO NOTHING
"""


async def realms(conn):
    return await conn.fetch(_REALMS)


async def realm(conn, name: str):
    return await conn.fetchrow(_REALM, name)


async def ensure_realm(conn, name: str, kind: str, comment: str, is_default: bool = False):
    await conn.execute(_ENSURE_REALM, name, kind, comment, is_default)


async def insert_realm(
    conn, name: str, kind: str, comment: str, is_default: bool, config: dict
) -> bool:
    """False when the realm exists already."""
    status = await conn.execute(
        "INSERT INTO realms (realm, type, comment, is_default, config) "
        "VALUES ($1, $2, $3, $4, $5) ON CONFLICT (realm) DO NOTHING",
        name,
        kind,
        comment,
        is_default,
        config,
    )
    return status != "INSERT 0 0"


async def update_realm(
    conn, name: str, comment: str | None, is_default: bool | None, config: dict
) -> None:
    if is_default:
        await conn.execute("UPDATE realms SET is_default = false WHERE realm <> $1", name)
    await conn.execute(
        "UPDATE realms SET comment = coalesce($2, comment), "
        "is_default = coalesce($3, is_default), config = $4 WHERE realm = $1",
        name,
        comment,
        is_default,
        config,
    )


async def delete_realm(conn, name: str) -> None:
    await conn.execute("DELETE FROM realms WHERE realm = $1", name)


async def realm_has_users(conn, name: str) -> bool:
    return await conn.fetchval("SELECT EXISTS (SELECT 1 FROM users WHERE realm = $1)", name)


# -- users ------------------------------------------------------------------

_USER_ROWS = """
SELECT u.userid, u.realm, u.enable, u.expire, u.firstname, u.lastname, u.email, u.comment,
       u.password_hash, u.version,
       coalesce(array_agg(m.groupid ORDER BY m.groupid) FILTER (WHERE m.groupid IS NOT NULL), '{}') AS groups
FROM users u LEFT JOIN group_members m ON m.userid = u.userid
WHERE ($1::text IS NULL OR u.userid = $1)
GROUP BY u.userid ORDER BY u.userid
"""
_INSERT_USER = """
INSERT INTO users (userid, realm, enable, expire, firstname, lastname, email, comment, password_hash)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
"""
_UPSERT_USER_PASSWORD = """
INSERT INTO users (userid, realm, password_hash) VALUES ($1, $2, $3)
ON CONFLICT (userid) DO UPDATE SET password_hash = EXCLUDED.password_hash,
                                   version = users.version + 1
"""
_UPDATE_USER = """
UPDATE users SET enable = $2, expire = $3, firstname = $4, lastname = $5, email = $6,
                 comment = $7, version = version + 1
WHERE userid = $1 AND version = $8 RETURNING version
"""
_SET_PASSWORD = "UPDATE users SET password_hash = $2, version = version + 1 WHERE userid = $1"
_DELETE_USER = "DELETE FROM users WHERE userid = $1"
_CLEAR_USER_GROUPS = "DELETE FROM group_members WHERE userid = $1"
_ADD_MEMBER = "INSERT INTO group_members (groupid, userid) VALUES ($1, $2) ON CONFLICT DO NOTHING"
_DELETE_SUBJECT_ACL = "DELETE FROM acl WHERE ugid_type = $1 AND ugid = $2"
_DELETE_USER_TOKEN_ACL = "DELETE FROM acl WHERE ugid_type = 'token' AND ugid LIKE $1 || '!%'"


async def users(conn, userid: str | None = None):
    return await conn.fetch(_USER_ROWS, userid)


async def user(conn, userid: str):
    rows = await conn.fetch(_USER_ROWS, userid)
    return rows[0] if rows else None


async def insert_user(
    conn, *, userid, realm, enable, expire, firstname, lastname, email, comment, password_hash
):
    try:
        await conn.execute(
            _INSERT_USER,
            userid,
            realm,
            enable,
            expire,
            firstname,
            lastname,
            email,
            comment,
            password_hash,
        )
    except asyncpg.UniqueViolationError as exc:
        raise PveError(f"create user failed: user '{userid}' already exists") from exc
    except asyncpg.ForeignKeyViolationError as exc:
        raise PveError(f"create user failed: domain '{realm}' does not exist") from exc
    await notify_changed(conn)


async def upsert_user_password(conn, userid: str, realm_name: str, password_hash: str):
    await conn.execute(_UPSERT_USER_PASSWORD, userid, realm_name, password_hash)
    await notify_changed(conn)


async def update_user(
    conn, *, userid, version, enable, expire, firstname, lastname, email, comment
):
    new_version = await conn.fetchval(
        _UPDATE_USER, userid, enable, expire, firstname, lastname, email, comment, version
    )
    if new_version is None:
        raise PveError("update user failed: user changed concurrently, try again")
    await notify_changed(conn)


async def set_password(conn, userid: str, password_hash: str) -> None:
    await conn.execute(_SET_PASSWORD, userid, password_hash)
    await notify_changed(conn)


async def set_user_groups(conn, userid: str, groups: list[str], *, append: bool) -> None:
    if not append:
        await conn.execute(_CLEAR_USER_GROUPS, userid)
    for groupid in groups:
        try:
            await conn.execute(_ADD_MEMBER, groupid, userid)
        except asyncpg.ForeignKeyViolationError as exc:
            raise PveError(f"no such group '{groupid}'") from exc
    await notify_changed(conn)


async def delete_user(conn, userid: str) -> None:
    await conn.execute(_DELETE_USER_TOKEN_ACL, userid)
    await conn.execute(_DELETE_SUBJECT_ACL, "user", userid)
    await conn.execute(_DELETE_USER, userid)
    await notify_changed(conn)


# -- groups -----------------------------------------------------------------

_GROUPS = """
SELECT g.groupid, g.comment,
       coalesce(array_agg(m.userid ORDER BY m.userid) FILTER (WHERE m.userid IS NOT NULL), '{}') AS members
FROM groups g LEFT JOIN group_members m ON m.groupid = g.groupid
WHERE ($1::text IS NULL OR g.groupid = $1)
GROUP BY g.groupid ORDER BY g.groupid
"""
_INSERT_GROUP = "INSERT INTO groups (groupid, comment) VALUES ($1, $2)"
_UPDATE_GROUP = "UPDATE groups SET comment = $2 WHERE groupid = $1"
_DELETE_GROUP = "DELETE FROM groups WHERE groupid = $1"


async def groups(conn, groupid: str | None = None):
    return await conn.fetch(_GROUPS, groupid)


async def insert_group(conn, groupid: str, comment: str) -> None:
    try:
        await conn.execute(_INSERT_GROUP, groupid, comment)
    except asyncpg.UniqueViolationError as exc:
        raise PveError(f"create group failed: group '{groupid}' already exists") from exc
    await notify_changed(conn)


async def update_group(conn, groupid: str, comment: str) -> None:
    await conn.execute(_UPDATE_GROUP, groupid, comment)


async def delete_group(conn, groupid: str) -> None:
    await conn.execute(_DELETE_SUBJECT_ACL, "group", groupid)
    await conn.execute(_DELETE_GROUP, groupid)
    await notify_changed(conn)


# -- roles ------------------------------------------------------------------

_UPSERT_ROLE = """
INSERT INTO roles (roleid, privs, special) VALUES ($1, $2, $3)
ON CONFLICT (roleid) DO UPDATE SET privs = EXCLUDED.privs, special = EXCLUDED.special
"""
_INSERT_ROLE = "INSERT INTO roles (roleid, privs, special) VALUES ($1, $2, false)"
_UPDATE_ROLE = "UPDATE roles SET privs = $2 WHERE roleid = $1 AND NOT special"
_DELETE_ROLE = "DELETE FROM roles WHERE roleid = $1 AND NOT special"


async def roles(conn):
    return await conn.fetch(_ROLES)


async def upsert_builtin_role(conn, roleid: str, privs: list[str]) -> None:
    await conn.execute(_UPSERT_ROLE, roleid, privs, True)


async def insert_role(conn, roleid: str, privs: list[str]) -> None:
    try:
        await conn.execute(_INSERT_ROLE, roleid, privs)
    except asyncpg.UniqueViolationError as exc:
        raise PveError(f"role '{roleid}' already exists") from exc
    await notify_changed(conn)


async def update_role(conn, roleid: str, privs: list[str]) -> bool:
    status = await conn.execute(_UPDATE_ROLE, roleid, privs)
    await notify_changed(conn)
    return status.endswith(" 1")


async def delete_role(conn, roleid: str) -> bool:
    status = await conn.execute(_DELETE_ROLE, roleid)
    await notify_changed(conn)
    return status.endswith(" 1")


# -- ACL --------------------------------------------------------------------

_ACL_UPSERT = """
INSERT INTO acl (path, ugid_type, ugid, roleid, propagate) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (path, ugid_type, ugid, roleid) DO UPDATE SET propagate = EXCLUDED.propagate
"""
_ACL_DELETE = "DELETE FROM acl WHERE path = $1 AND ugid_type = $2 AND ugid = $3 AND roleid = $4"


_ACL_DELETE_PATH = "DELETE FROM acl WHERE path = $1"


async def delete_path_acl(conn, path: str) -> None:
    await conn.execute(_ACL_DELETE_PATH, path)
    await notify_changed(conn)


async def acl(conn):
    return await conn.fetch(_ACL)


async def set_acl(conn, *, path, ugid_type, ugid, roleid, propagate, delete) -> None:
    if delete:
        await conn.execute(_ACL_DELETE, path, ugid_type, ugid, roleid)
    else:
        try:
            await conn.execute(_ACL_UPSERT, path, ugid_type, ugid, roleid, propagate)
        except asyncpg.ForeignKeyViolationError as exc:
            raise PveError(f"role '{roleid}' does not exist") from exc
    await notify_changed(conn)


# -- API tokens -------------------------------------------------------------

_TOKEN_ROWS = """
SELECT userid, tokenid, privsep, expire, comment, generation FROM api_tokens
WHERE userid = $1 AND ($2::text IS NULL OR tokenid = $2) ORDER BY tokenid
"""
_INSERT_TOKEN = """
INSERT INTO api_tokens (userid, tokenid, secret_hash, privsep, expire, comment)
VALUES ($1, $2, $3, $4, $5, $6)
"""
_UPDATE_TOKEN = """
UPDATE api_tokens SET privsep = $3, expire = $4, comment = $5, generation = generation + 1
WHERE userid = $1 AND tokenid = $2
"""
_REGENERATE_TOKEN = """
UPDATE api_tokens SET secret_hash = $3, generation = generation + 1
WHERE userid = $1 AND tokenid = $2
"""
_DELETE_TOKEN = "DELETE FROM api_tokens WHERE userid = $1 AND tokenid = $2"


async def tokens(conn, userid: str, tokenid: str | None = None):
    return await conn.fetch(_TOKEN_ROWS, userid, tokenid)


async def insert_token(conn, *, userid, tokenid, secret_hash, privsep, expire, comment) -> None:
    try:
        await conn.execute(_INSERT_TOKEN, userid, tokenid, secret_hash, privsep, expire, comment)
    except asyncpg.UniqueViolationError as exc:
        raise PveError("Token already exists.\n") from exc
    except asyncpg.ForeignKeyViolationError as exc:
        raise PveError(f"no such user ('{userid}')") from exc
    await notify_changed(conn)


async def update_token(conn, *, userid, tokenid, privsep, expire, comment) -> None:
    await conn.execute(_UPDATE_TOKEN, userid, tokenid, privsep, expire, comment)
    await notify_changed(conn)


async def regenerate_token(conn, userid: str, tokenid: str, secret_hash: str) -> None:
    await conn.execute(_REGENERATE_TOKEN, userid, tokenid, secret_hash)
    await notify_changed(conn)


async def delete_token(conn, userid: str, tokenid: str) -> None:
    await conn.execute(_DELETE_SUBJECT_ACL, "token", f"{userid}!{tokenid}")
    await conn.execute(_DELETE_TOKEN, userid, tokenid)
    await notify_changed(conn)
