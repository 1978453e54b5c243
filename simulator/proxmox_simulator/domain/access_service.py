"""Authentication and access administration (application service)."""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid

from proxmox_simulator.domain import openid_service, tfa_service
from proxmox_simulator.domain.access import ROOT, AccessState, Principal, split_userid
from proxmox_simulator.domain.auth import (
    hash_secret,
    is_valid_userid,
    parse_token_header,
    verify_secret,
)
from proxmox_simulator.domain.errors import AuthenticationFailed, ParameterError, PveError
from proxmox_simulator.domain.privileges import BUILTIN_ROLES, known_privileges
from proxmox_simulator.repositories import access as access_repo
from proxmox_simulator.repositories import inventory


# scrypt costs tens of milliseconds of CPU by design; hashlib releases the GIL,
# so running it in a thread keeps the event loop serving other requests.
async def _hash(secret: str) -> str:
    return await asyncio.to_thread(hash_secret, secret)


async def _verify(secret: str, encoded: str | None) -> bool:
    return await asyncio.to_thread(verify_secret, secret, encoded)


_LIST = re.compile(r"[,;\s]+")


def _split(value) -> list[str]:
    return [v for v in _LIST.split(str(value or "")) if v]


async def bootstrap(conn, root_password: str | None) -> None:
    """Realms, built-in roles and root@pam: what every PVE installation has."""
    await access_repo.ensure_realm(conn, "pam", "pam", "Linux PAM standard authentication", True)
    await access_repo.ensure_realm(conn, "pve", "pve", "Proxmox VE authentication server")
    for roleid, privs in BUILTIN_ROLES.items():
        await access_repo.upsert_builtin_role(conn, roleid, sorted(privs))
    if root_password is not None:
        await access_repo.upsert_user_password(conn, ROOT, "pam", hash_secret(root_password))
    elif await access_repo.user(conn, ROOT) is None:
        await access_repo.upsert_user_password(conn, ROOT, "pam", hash_secret(uuid.uuid4().hex))
    await access_repo.notify_changed(conn)


# -- authentication ------------------------------------------------------------


def _qualify(username: str, realm: str | None) -> str:
    if "@" in username:
        return username
    return f"{username}@{realm or 'pam'}"


async def login(rt, params: dict) -> dict:
    """``POST /access/ticket``: password login, or ticket renewal.

    A valid ticket for the same user in ``password`` renews it (PVE's refresh).
    """
    userid = _qualify(str(params["username"]), params.get("realm"))
    password = str(params["password"])
    if not is_valid_userid(userid):
        raise AuthenticationFailed()
    if params.get("tfa-challenge"):
        # Second step: the half ticket plus "totp:<code>" / "recovery:<key>" as password.
        rt.tickets.verify_tfa(str(params["tfa-challenge"]), userid)
        async with rt.pool.acquire() as conn, conn.transaction():
            passed = await tfa_service.verify_response(
                conn, userid, password, lockout=rt.adapter.tfa_lockout
            )
        state = await active_state(rt, userid) if passed else None
        if state is None:
            raise AuthenticationFailed()
        return await _full_ticket(rt, state, userid)
    authenticated = False
    renewal = password.startswith("PVE:")
    if password.startswith("PVE:"):
        try:
            authenticated = rt.tickets.verify(password) == userid
        except AuthenticationFailed:
            authenticated = False
    else:
        async with rt.pool.acquire() as conn:
            row = await access_repo.user(conn, userid)
        authenticated = row is not None and await _verify(password, row["password_hash"])
    state = await active_state(rt, userid) if authenticated else None
    if state is None:
        raise AuthenticationFailed()
    if not renewal:  # renewing a full ticket needs no second factor again
        async with rt.pool.acquire() as conn:
            challenge = await tfa_service.challenge_for(
                conn, userid, lockout=rt.adapter.tfa_lockout
            )
        if challenge is not None and params.get("otp"):
            # The second factor given at once: TOTP (or a recovery key) with the password.
            async with rt.pool.acquire() as conn, conn.transaction():
                passed = await tfa_service.verify_response(
                    conn, userid, str(params["otp"]), lockout=rt.adapter.tfa_lockout
                )
            if not passed:  # after the commit: a failure counts towards the lockout
                raise AuthenticationFailed()
        elif challenge is not None:
            now = time.time()
            if _new_tfa_format(rt, params):
                ticket = rt.tickets.issue_tfa(userid, json.dumps(challenge), now)
            else:
                # 6.x, and 7.x without new-format: "PVE:tfa!<userid>:..." that only
                # POST /access/tfa accepts (see api/auth.py).
                ticket = rt.tickets.issue(f"{OLD_TFA_PREFIX}{userid}", now)
            return {
                "username": userid,
                "ticket": ticket,
                "CSRFPreventionToken": rt.tickets.csrf_token(userid, now),
                "NeedTFA": 1,
            }
    return await _full_ticket(rt, state, userid)


async def openid_login(rt, params: dict) -> dict:
    """``POST /access/openid/login``: a full ticket for the user the provider vouched for."""
    userid = await openid_service.login(rt, params)
    return await _full_ticket(rt, await rt.access.get(), userid)


OLD_TFA_PREFIX = "tfa!"


def _new_tfa_format(rt, params: dict) -> bool:
    """PVE 8+ always answers the new half ticket; 7.x only when asked (``new-format=1``)."""
    return rt.contract.major >= 8 or bool(int(params.get("new-format") or 0))


async def _full_ticket(rt, state: AccessState, userid: str) -> dict:
    now = time.time()
    result = {
        "username": userid,
        "ticket": rt.tickets.issue(userid, now),
        "CSRFPreventionToken": rt.tickets.csrf_token(userid, now),
        "cap": capabilities(state, Principal(userid)),
    }
    async with rt.pool.acquire() as conn:
        cluster = await inventory.cluster(conn)
    if cluster is not None and cluster["name"]:
        result["clustername"] = cluster["name"]
    return result


def capabilities(state: AccessState, principal: Principal) -> dict:
    groups = {
        "vms": "/vms",
        "storage": "/storage",
        "access": "/access",
        "nodes": "/nodes",
        "dc": "/",
        "sdn": "/sdn",
        "mapping": "/mapping",
    }
    prefixes = {
        "vms": ("VM.",),
        "storage": ("Datastore.",),
        "access": ("User.", "Group.", "Realm.", "Permissions."),
        "nodes": ("Sys.",),
        "dc": ("Sys.", "SDN."),
        "sdn": ("SDN.",),
        "mapping": ("Mapping.",),
    }
    caps = {}
    for name, path in groups.items():
        held = state.privileges(principal, path)
        caps[name] = {p: 1 for p in sorted(held) if p.startswith(prefixes[name])}
    return caps


async def active_state(rt, userid: str) -> AccessState | None:
    """The access state when ``userid`` exists, is enabled and has not expired, else None.

    A refusal is read again from the database first (``AccessCache.reload``): the
    user may have been made or enabled by another replica a moment ago.
    """
    state = await rt.access.get()
    if not state.user_active(userid, time.time()):
        state = await rt.access.reload()
    return state if state.user_active(userid, time.time()) else None


async def authenticate_token(rt, header: str) -> Principal:
    """Verify ``PVEAPIToken=user@realm!id=secret``; scrypt runs once per secret."""
    creds = parse_token_header(header)
    if creds is None:
        raise AuthenticationFailed("invalid token value")
    state = await rt.access.get()
    try:
        return await _token_principal(rt, state, creds)
    except AuthenticationFailed:
        current = await rt.access.reload()
        key = (creds.userid, creds.tokenid)
        if current.tokens.get(key) == state.tokens.get(key) and current.users.get(
            creds.userid
        ) == state.users.get(creds.userid):
            raise  # nothing changed meanwhile: no second scrypt for a wrong secret
        return await _token_principal(rt, current, creds)


async def _token_principal(rt, state, creds) -> Principal:
    token = state.tokens.get((creds.userid, creds.tokenid))
    now = time.time()
    if token is None or (token.expire and token.expire < now):
        raise AuthenticationFailed("invalid token value")
    if not state.user_active(creds.userid, now):
        raise AuthenticationFailed("user account disabled or expired")
    if not rt.token_cache.lookup(creds, token.generation):
        if not await _verify(creds.secret, token.secret_hash):
            raise AuthenticationFailed("invalid token value")
        rt.token_cache.remember(creds, token.generation)
    return Principal(creds.userid, tokenid=creds.tokenid, privsep=token.privsep)


# -- users ----------------------------------------------------------------------


def _user_entry(row, *, with_tokens: list | None = None) -> dict:
    entry = {
        "userid": row["userid"],
        "enable": 1 if row["enable"] else 0,
        "expire": row["expire"],
        "realm-type": split_userid(row["userid"])[1]
        if row["realm"] in ("pam", "pve")
        else row["realm"],
    }
    for key in ("firstname", "lastname", "email", "comment"):
        if row[key]:
            entry[key] = row[key]
    if row["groups"]:
        entry["groups"] = ",".join(row["groups"])
    if with_tokens is not None:
        entry["tokens"] = with_tokens
    return entry


async def list_users(rt, state: AccessState, principal: Principal, params: dict) -> list[dict]:
    locks = await tfa_service.lock_statuses(rt) if rt.adapter.tfa_lockout else {}
    async with rt.pool.acquire() as conn:
        rows = await access_repo.users(conn)
        out = []
        for row in rows:
            if params.get("enabled") is not None and bool(row["enable"]) != bool(params["enabled"]):
                continue
            visible = row["userid"] == principal.userid or state.has(
                principal, "/access/groups", ["User.Modify", "Sys.Audit"], any_of=True
            )
            if not visible:
                continue
            tokens = None
            if params.get("full"):
                tokens = [_token_entry(t) for t in await access_repo.tokens(conn, row["userid"])]
            out.append({**_user_entry(row, with_tokens=tokens), **locks.get(row["userid"], {})})
    return out


async def get_user(rt, userid: str) -> dict:
    async with rt.pool.acquire() as conn:
        row = await access_repo.user(conn, userid)
        if row is None:
            raise PveError(f"no such user ('{userid}')")
        tokens = await access_repo.tokens(conn, userid)
    entry = _user_entry(row)
    entry.pop("userid")
    entry["groups"] = list(row["groups"])
    entry["tokens"] = {t["tokenid"]: _token_entry(t, with_id=False) for t in tokens}
    return entry


async def create_user(rt, params: dict) -> None:
    userid = params["userid"]
    if not is_valid_userid(userid):
        raise ParameterError({"userid": "value does not look like a valid user name"})
    _name, realm = split_userid(userid)
    password = params.get("password")
    if password and realm == "pam":
        # PAM users authenticate against the host; PVE refuses to store their password.
        raise PveError("can't set password on auth type 'pam'")
    password_hash = await _hash(password) if password else None
    async with rt.pool.acquire() as conn, conn.transaction():
        await access_repo.insert_user(
            conn,
            userid=userid,
            realm=realm,
            enable=bool(params.get("enable", 1)),
            expire=int(params.get("expire") or 0),
            firstname=params.get("firstname") or "",
            lastname=params.get("lastname") or "",
            email=params.get("email") or "",
            comment=params.get("comment") or "",
            password_hash=password_hash,
        )
        if params.get("groups"):
            await access_repo.set_user_groups(conn, userid, _split(params["groups"]), append=True)
    rt.access.invalidate()


async def update_user(rt, userid: str, params: dict) -> None:
    async with rt.pool.acquire() as conn, conn.transaction():
        row = await access_repo.user(conn, userid)
        if row is None:
            raise PveError(f"update user failed: no such user ('{userid}')")
        await access_repo.update_user(
            conn,
            userid=userid,
            version=row["version"],
            enable=bool(params.get("enable", row["enable"])),
            expire=int(params.get("expire", row["expire"]) or 0),
            firstname=params.get("firstname", row["firstname"]) or "",
            lastname=params.get("lastname", row["lastname"]) or "",
            email=params.get("email", row["email"]) or "",
            comment=params.get("comment", row["comment"]) or "",
        )
        if "groups" in params:
            await access_repo.set_user_groups(
                conn, userid, _split(params["groups"]), append=bool(params.get("append"))
            )
    rt.access.invalidate()


async def delete_user(rt, userid: str) -> None:
    if userid == ROOT:
        raise PveError("delete user failed: cannot delete root@pam")
    async with rt.pool.acquire() as conn, conn.transaction():
        if await access_repo.user(conn, userid) is None:
            raise PveError(f"delete user failed: no such user ('{userid}')")
        await access_repo.delete_user(conn, userid)
    rt.access.invalidate()


async def change_password(rt, principal: Principal, params: dict) -> None:
    userid = params["userid"]
    _name, realm = split_userid(userid)
    if realm not in ("pve", "pam"):
        raise PveError(f"authentication domain '{realm}' does not support password changes")
    password_hash = await _hash(params["password"])
    async with rt.pool.acquire() as conn, conn.transaction():
        if await access_repo.user(conn, userid) is None:
            raise PveError(f"no such user ('{userid}')")
        await access_repo.set_password(conn, userid, password_hash)
    rt.access.invalidate()


# -- groups -----------------------------------------------------------------------


async def list_groups(rt) -> list[dict]:
    async with rt.pool.acquire() as conn:
        rows = await access_repo.groups(conn)
    return [
        {"groupid": r["groupid"], "comment": r["comment"], "users": ",".join(r["members"])}
        for r in rows
    ]


async def get_group(rt, groupid: str) -> dict:
    async with rt.pool.acquire() as conn:
        rows = await access_repo.groups(conn, groupid)
    if not rows:
        raise PveError(f"group '{groupid}' does not exist")
    return {"comment": rows[0]["comment"], "members": list(rows[0]["members"])}


async def create_group(rt, groupid: str, comment: str) -> None:
    async with rt.pool.acquire() as conn, conn.transaction():
        await access_repo.insert_group(conn, groupid, comment)
    rt.access.invalidate()


async def update_group(rt, groupid: str, comment: str) -> None:
    async with rt.pool.acquire() as conn, conn.transaction():
        if not await access_repo.groups(conn, groupid):
            raise PveError(f"group '{groupid}' does not exist")
        await access_repo.update_group(conn, groupid, comment)


async def delete_group(rt, groupid: str) -> None:
    async with rt.pool.acquire() as conn, conn.transaction():
        if not await access_repo.groups(conn, groupid):
            raise PveError(f"group '{groupid}' does not exist")
        await access_repo.delete_group(conn, groupid)
    rt.access.invalidate()


# -- roles ------------------------------------------------------------------------


def _checked_privs(rt, value) -> list[str]:
    privs = _split(value)
    known = known_privileges(rt.contract)
    unknown = [p for p in privs if p not in known]
    if unknown:
        raise ParameterError({"privs": f"invalid privilege '{unknown[0]}'"})
    return sorted(set(privs))


def _major_has(rt, roleid: str, special: bool, privs) -> bool:
    """A built-in role all of whose privileges the served major lacks came with a later
    major (PVEMappingAdmin with 8.x): this one has no such role."""
    known = known_privileges(rt.contract)
    return not (special and privs and not set(privs) & known)


async def list_roles(rt) -> list[dict]:
    """Roles with the privileges the served major knows (``known_privileges``)."""
    known = known_privileges(rt.contract)
    async with rt.pool.acquire() as conn:
        rows = await access_repo.roles(conn)
    return [
        {
            "roleid": r["roleid"],
            "privs": ",".join(sorted(set(r["privs"]) & known)),
            "special": 1 if r["special"] else 0,
        }
        for r in rows
        if _major_has(rt, r["roleid"], r["special"], r["privs"])
    ]


async def get_role(rt, roleid: str) -> dict:
    state = await rt.access.get()
    privs = state.roles.get(roleid)
    special = roleid in BUILTIN_ROLES
    if privs is None or not _major_has(rt, roleid, special, privs):
        raise PveError(f"role '{roleid}' does not exist")
    return dict.fromkeys(sorted(privs & known_privileges(rt.contract)), 1)


async def create_role(rt, roleid: str, privs) -> None:
    async with rt.pool.acquire() as conn, conn.transaction():
        await access_repo.insert_role(conn, roleid, _checked_privs(rt, privs))
    rt.access.invalidate()


async def update_role(rt, roleid: str, privs, append: bool) -> None:
    state = await rt.access.get()
    if roleid not in state.roles:
        raise PveError(f"role '{roleid}' does not exist")
    new = _checked_privs(rt, privs)
    if append:
        new = sorted(set(new) | state.roles[roleid])
    async with rt.pool.acquire() as conn, conn.transaction():
        if not await access_repo.update_role(conn, roleid, new):
            raise PveError(f"cannot modify special role '{roleid}'")
    rt.access.invalidate()


async def delete_role(rt, roleid: str) -> None:
    async with rt.pool.acquire() as conn, conn.transaction():
        if not await access_repo.delete_role(conn, roleid):
            raise PveError(f"role '{roleid}' does not exist or is a built-in role")
    rt.access.invalidate()


# -- ACL ------------------------------------------------------------------------


async def list_acl(rt, state: AccessState, principal: Principal) -> list[dict]:
    async with rt.pool.acquire() as conn:
        rows = await access_repo.acl(conn)
    out = []
    for r in rows:
        # PVE shows an entry only to callers who may audit or modify its path.
        if not state.has(principal, r["path"], ["Sys.Audit", "Permissions.Modify"], any_of=True):
            continue
        out.append(
            {
                "path": r["path"],
                "type": r["ugid_type"],
                "ugid": r["ugid"],
                "roleid": r["roleid"],
                "propagate": 1 if r["propagate"] else 0,
            }
        )
    return out


async def update_acl(rt, state: AccessState, principal: Principal, params: dict) -> None:
    path = "/" + "/".join(p for p in str(params["path"]).split("/") if p)
    roles = _split(params["roles"])
    subjects = (
        [("user", u) for u in _split(params.get("users"))]
        + [("group", g) for g in _split(params.get("groups"))]
        + [("token", t) for t in _split(params.get("tokens"))]
    )
    if not subjects:
        raise ParameterError({"users": "either 'users', 'groups' or 'tokens' is required"})
    delete = bool(params.get("delete"))
    for roleid in roles:
        if roleid not in state.roles:
            raise PveError(f"role '{roleid}' does not exist")
        # Without Permissions.Modify on the path a caller may not grant a role
        # holding privileges it does not have itself (no escalation by ACL edit).
        if not principal.is_root and not state.roles[roleid] <= state.privileges(principal, path):
            raise PveError(f"insufficient privileges to grant role '{roleid}'", status=403)
    async with rt.pool.acquire() as conn, conn.transaction():
        for ugid_type, ugid in subjects:
            if ugid_type == "user" and ugid not in state.users:
                raise PveError(f"user '{ugid}' does not exist")
            if ugid_type == "token":
                owner, _, tokenid = ugid.partition("!")
                if (owner, tokenid) not in state.tokens:
                    raise PveError(f"token '{ugid}' does not exist")
            for roleid in roles:
                await access_repo.set_acl(
                    conn,
                    path=path,
                    ugid_type=ugid_type,
                    ugid=ugid,
                    roleid=roleid,
                    propagate=bool(params.get("propagate", 1)),
                    delete=delete,
                )
    rt.access.invalidate()


# -- API tokens -------------------------------------------------------------------


def _token_entry(row, *, with_id: bool = True) -> dict:
    entry = {"privsep": 1 if row["privsep"] else 0, "expire": row["expire"]}
    if row["comment"]:
        entry["comment"] = row["comment"]
    if with_id:
        entry["tokenid"] = row["tokenid"]
    return entry


async def list_tokens(rt, userid: str) -> list[dict]:
    async with rt.pool.acquire() as conn:
        if await access_repo.user(conn, userid) is None:
            raise PveError(f"no such user ('{userid}')")
        return [_token_entry(t) for t in await access_repo.tokens(conn, userid)]


async def get_token(rt, userid: str, tokenid: str) -> dict:
    async with rt.pool.acquire() as conn:
        rows = await access_repo.tokens(conn, userid, tokenid)
    if not rows:
        raise PveError(f"no such token '{tokenid}' for user '{userid}'")
    return _token_entry(rows[0], with_id=False)


async def create_token(rt, userid: str, tokenid: str, params: dict) -> dict:
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9._-]*", tokenid):
        raise ParameterError({"tokenid": "invalid format - invalid API token ID"})
    secret = str(uuid.uuid4())
    privsep = bool(params.get("privsep", 1))
    secret_hash = await _hash(secret)
    async with rt.pool.acquire() as conn, conn.transaction():
        await access_repo.insert_token(
            conn,
            userid=userid,
            tokenid=tokenid,
            secret_hash=secret_hash,
            privsep=privsep,
            expire=int(params.get("expire") or 0),
            comment=params.get("comment") or "",
        )
    rt.access.invalidate()
    info = {"privsep": 1 if privsep else 0, "expire": int(params.get("expire") or 0)}
    if params.get("comment"):
        info["comment"] = params["comment"]
    return {"full-tokenid": f"{userid}!{tokenid}", "info": info, "value": secret}


async def update_token(rt, userid: str, tokenid: str, params: dict) -> dict:
    async with rt.pool.acquire() as conn, conn.transaction():
        rows = await access_repo.tokens(conn, userid, tokenid)
        if not rows:
            raise PveError(f"no such token '{tokenid}' for user '{userid}'")
        row = rows[0]
        await access_repo.update_token(
            conn,
            userid=userid,
            tokenid=tokenid,
            privsep=bool(params.get("privsep", row["privsep"])),
            expire=int(params.get("expire", row["expire"]) or 0),
            comment=params.get("comment", row["comment"]) or "",
        )
        updated = (await access_repo.tokens(conn, userid, tokenid))[0]
    rt.access.invalidate()
    return _token_entry(updated, with_id=False)


async def delete_token(rt, userid: str, tokenid: str) -> None:
    async with rt.pool.acquire() as conn, conn.transaction():
        if not await access_repo.tokens(conn, userid, tokenid):
            raise PveError(f"no such token '{tokenid}' for user '{userid}'")
        await access_repo.delete_token(conn, userid, tokenid)
    rt.access.invalidate()


# -- domains ----------------------------------------------------------------------


async def list_domains(rt) -> list[dict]:
    async with rt.pool.acquire() as conn:
        rows = await access_repo.realms(conn)
    out = []
    for r in rows:
        entry = {"realm": r["realm"], "type": r["type"], "comment": r["comment"]}
        if r["is_default"]:
            entry["default"] = 1
        out.append(entry)
    return out


async def get_domain(rt, realm: str) -> dict:
    async with rt.pool.acquire() as conn:
        row = await access_repo.realm(conn, realm)
    if row is None:
        raise PveError(f"domain '{realm}' does not exist")
    entry = {
        **dict(row["config"]),
        "type": row["type"],
        "comment": row["comment"],
        "digest": row["realm"],
    }
    if row["is_default"]:
        entry["default"] = 1
    return entry


# Realm types PVE ships that cannot be added or removed (one each, built in).
_BUILTIN_REALM_TYPES = frozenset({"pam", "pve"})


def _realm_settings(params: dict) -> dict:
    """Type-specific realm settings: everything but the columns and write controls."""
    skip = {"realm", "type", "comment", "default", "digest", "delete", "password"}
    return {k: v for k, v in params.items() if k not in skip}


async def create_domain(rt, params: dict) -> None:
    realm, kind = params["realm"], params["type"]
    if kind in _BUILTIN_REALM_TYPES:
        raise PveError(f"create domain failed: unable to create builtin type '{kind}'")
    async with rt.pool.acquire() as conn, conn.transaction():
        if params.get("default"):
            await conn.execute("UPDATE realms SET is_default = false")
        created = await access_repo.insert_realm(
            conn,
            realm,
            kind,
            params.get("comment", ""),
            bool(params.get("default")),
            _realm_settings(params),
        )
        if not created:
            raise PveError(f"create domain failed: domain '{realm}' already exists")
        await access_repo.notify_changed(conn)
    rt.access.invalidate()


async def update_domain(rt, params: dict) -> None:
    realm = params["realm"]
    async with rt.pool.acquire() as conn, conn.transaction():
        row = await access_repo.realm(conn, realm)
        if row is None:
            raise PveError(f"update auth server failed: domain '{realm}' does not exist")
        if params.get("digest") and params["digest"] != row["realm"]:
            raise PveError(
                "detected modified configuration - file changed by other user? Try again."
            )
        deleted = set(str(params.get("delete") or "").replace(";", ",").split(","))
        comment = "" if "comment" in deleted else params.get("comment")
        default = (
            False
            if "default" in deleted
            else (bool(params["default"]) if "default" in params else None)
        )
        config = {k: v for k, v in dict(row["config"]).items() if k not in deleted}
        config.update(_realm_settings(params))
        await access_repo.update_realm(conn, realm, comment, default, config)
        await access_repo.notify_changed(conn)
    rt.access.invalidate()


async def delete_domain(rt, realm: str) -> None:
    async with rt.pool.acquire() as conn, conn.transaction():
        row = await access_repo.realm(conn, realm)
        if row is None:
            raise PveError(f"delete auth server failed: domain '{realm}' does not exist")
        if row["type"] in _BUILTIN_REALM_TYPES:
            raise PveError(f"delete auth server failed: can't remove builtin type '{row['type']}'")
        if await access_repo.realm_has_users(conn, realm):
            # Simulated users reference their realm; PVE keeps orphans, we refuse.
            raise PveError(f"delete auth server failed: domain '{realm}' still has users")
        await access_repo.delete_realm(conn, realm)
        await access_repo.notify_changed(conn)
    rt.access.invalidate()
