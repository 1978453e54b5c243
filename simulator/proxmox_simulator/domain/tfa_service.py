"""Second factors (PVE's ``priv/tfa.cfg``): TOTP and recovery keys, and the two-step login.

Secrets never leave the simulator: a TOTP entry keeps its key to check codes,
recovery keys are kept as hashes and shown once, when they are generated.
A user with an enabled entry gets a half ticket (``NeedTFA``) at login and
completes it with ``tfa-challenge`` plus ``totp:<code>`` or ``recovery:<key>``.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import secrets
import struct
import time
import uuid
from urllib.parse import parse_qs, urlparse

from proxmox_simulator.domain.access import ROOT, Principal, split_userid
from proxmox_simulator.domain.auth import verify_secret
from proxmox_simulator.domain.errors import (
    AuthenticationFailed,
    ParameterError,
    PermissionDenied,
    PveError,
)
from proxmox_simulator.repositories import access as access_repo
from proxmox_simulator.repositories import section_configs as section_repo

TFA_FILE = "priv/tfa.cfg"
TOTP_STEP, TOTP_DIGITS, TOTP_WINDOW = 30, 6, 1
RECOVERY_KEYS = 10
RECOVERY_ID = "recovery"
# Types PVE knows; the simulator verifies only these two (no browser for WebAuthn/U2F).
SUPPORTED_TYPES = ("totp", "recovery")


def totp_code(secret_b32: str, at: float, digits: int = TOTP_DIGITS, step: int = TOTP_STEP) -> str:
    """RFC 6238 with HMAC-SHA1, as authenticator apps compute it."""
    key = base64.b32decode(secret_b32.upper() + "=" * (-len(secret_b32) % 8))
    counter = struct.pack(">Q", int(at) // step)
    digest = hmac.new(key, counter, hashlib.sha1).digest()
    offset = digest[-1] & 0x0F
    value = struct.unpack(">I", digest[offset : offset + 4])[0] & 0x7FFFFFFF
    return str(value % 10**digits).zfill(digits)


def _totp_matches(secret: str, code: str, now: float) -> bool:
    return any(
        hmac.compare_digest(totp_code(secret, now + drift * TOTP_STEP), code)
        for drift in range(-TOTP_WINDOW, TOTP_WINDOW + 1)
    )


def _section_id(userid: str, entry_id: str) -> str:
    return f"{userid}/{entry_id}"


def _public(options: dict) -> dict:
    """An entry as PVE lists it: never its key or recovery hashes."""
    return {
        "type": options["type"],
        "id": options["id"],
        "description": options.get("description", ""),
        "created": options["created"],
        "enable": int(options.get("enable", 1)),
    }


async def _entries(conn, userid: str | None = None) -> list[dict]:
    rows = await section_repo.sections(conn, TFA_FILE)
    return [
        dict(row["options"])
        for row in rows
        if userid is None or row["options"].get("userid") == userid
    ]


async def list_all(rt, principal: Principal) -> list[dict]:
    """root@pam sees every user's entries, anyone else only their own."""
    async with rt.pool.acquire() as conn:
        entries = await _entries(conn, None if principal.is_root else principal.userid)
    users: dict[str, list[dict]] = {}
    for entry in entries:
        users.setdefault(entry["userid"], []).append(_public(entry))
    return [{"userid": userid, "entries": users[userid]} for userid in sorted(users)]


async def list_user(rt, userid: str) -> list[dict]:
    async with rt.pool.acquire() as conn:
        return [_public(e) for e in await _entries(conn, userid)]


async def get_entry(rt, userid: str, entry_id: str) -> dict:
    async with rt.pool.acquire() as conn:
        row = await section_repo.section(conn, TFA_FILE, _section_id(userid, entry_id))
    if row is None:
        raise PveError("no such tfa entry", status=404)
    return _public(dict(row["options"]))


async def user_types(rt, userid: str, *, multiple: bool, legacy: bool) -> dict:
    """``GET /access/users/{userid}/tfa``: the realm's TFA type and the user's factors.

    ``multiple`` lists the types of the user's entries (in ``user``, as PVE's code
    answers it); ``legacy`` is 6.x's tfa.cfg, one factor per user, where a TOTP
    entry is the user's ``oath``."""
    _name, realm = split_userid(userid)
    async with rt.pool.acquire() as conn:
        realm_row = await access_repo.realm(conn, realm)
        if realm_row is None:
            raise PveError(f"auth domain '{realm}' does not exist")
        entries = await _entries(conn, userid)
    answer: dict = {}
    realm_tfa = dict(
        part.split("=", 1)
        for part in str(realm_row["config"].get("tfa") or "").split(",")
        if "=" in part
    )
    if realm_tfa.get("type"):
        answer["realm"] = realm_tfa["type"]
    if multiple:
        answer["user"] = sorted({e["type"] for e in entries})
    elif legacy and any(e["type"] == "totp" for e in entries):
        answer["user"] = "oath"
    return answer


def _totp_secret(uri: str) -> str:
    parsed = urlparse(uri)
    secret = (parse_qs(parsed.query).get("secret") or [""])[0]
    if parsed.scheme != "otpauth" or parsed.netloc.lower() != "totp" or not secret:
        raise ParameterError({"totp": "invalid totp uri"})
    try:
        totp_code(secret, 0)
    except ValueError as exc:
        raise ParameterError({"totp": "invalid totp secret"}) from exc
    return secret


async def verify_password(rt, userid: str, password: str) -> bool:
    async with rt.pool.acquire() as conn:
        row = await access_repo.user(conn, userid)
    return row is not None and await asyncio.to_thread(
        verify_secret, password, row["password_hash"]
    )


async def _confirm_owner(rt, principal: Principal, userid: str, password) -> None:
    """PVE: only root changes root's factors; anyone but root confirms with a password."""
    if userid == ROOT and principal.auth_id != ROOT:
        raise PermissionDenied()
    if principal.auth_id != ROOT:
        if password is None:
            raise ParameterError({"password": "password is required to modify TFA data"})
        if not await verify_password(rt, principal.userid, str(password)):
            raise AuthenticationFailed()


async def add_entry(rt, principal: Principal, userid: str, params: dict) -> dict:
    await _confirm_owner(rt, principal, userid, params.get("password"))
    kind = params["type"]
    if kind not in SUPPORTED_TYPES:
        raise PveError(f"the simulator cannot register '{kind}' entries (no authenticator)")
    now = int(time.time())
    options = {
        "userid": userid,
        "type": kind,
        "description": params.get("description") or "",
        "created": now,
        "enable": 1,
    }
    answer: dict = {}
    if kind == "totp":
        if not params.get("totp") or not params.get("value"):
            raise ParameterError({"totp": "'totp' and 'value' are required for a TOTP entry"})
        secret = _totp_secret(str(params["totp"]))
        if not _totp_matches(secret, str(params["value"]), time.time()):
            raise PveError("failed to verify TOTP challenge", status=400)
        options.update(id=uuid.uuid4().hex[:16], secret=secret)
    else:
        keys = ["-".join(secrets.token_hex(2) for _ in range(4)) for _ in range(RECOVERY_KEYS)]
        options.update(id=RECOVERY_ID, unused=[_key_hash(k) for k in keys])
        answer["recovery"] = keys  # shown once; only hashes are kept
    async with rt.pool.acquire() as conn, conn.transaction():
        await section_repo.lock_file(conn, TFA_FILE)
        if not await section_repo.insert(
            conn, TFA_FILE, _section_id(userid, options["id"]), kind, options
        ):
            raise PveError("user already has recovery keys")
    return {"id": options["id"], **answer}


def _key_hash(key: str) -> str:
    return hashlib.sha256(key.strip().lower().encode()).hexdigest()


async def update_entry(rt, principal: Principal, userid: str, entry_id: str, params: dict) -> None:
    await _confirm_owner(rt, principal, userid, params.get("password"))
    async with rt.pool.acquire() as conn, conn.transaction():
        row = await section_repo.section(
            conn, TFA_FILE, _section_id(userid, entry_id), for_update=True
        )
        if row is None:
            raise PveError("no such tfa entry", status=404)
        options = dict(row["options"])
        if "description" in params:
            options["description"] = params["description"] or ""
        if params.get("enable") is not None:
            options["enable"] = int(bool(int(params["enable"])))
        await section_repo.update(conn, TFA_FILE, row["id"], row["version"], options)


async def delete_entry(rt, principal: Principal, userid: str, entry_id: str, password) -> None:
    await _confirm_owner(rt, principal, userid, password)
    async with rt.pool.acquire() as conn, conn.transaction():
        if not await section_repo.delete(conn, TFA_FILE, _section_id(userid, entry_id)):
            raise PveError("no such tfa entry", status=404)


# -- the login's second step ----------------------------------------------------------


async def challenge_for(conn, userid: str, *, lockout: bool = False) -> dict | None:
    """What a login must still answer, or None for a user without enabled factors.

    With ``lockout`` (PVE 8+) a TOTP-locked user is offered no TOTP."""
    entries = [e for e in await _entries(conn, userid) if int(e.get("enable", 1))]
    if not entries:
        return None
    locks = await _lock_state(conn, userid) if lockout else {}
    challenge: dict = {}
    if any(e["type"] == "totp" for e in entries) and not locks.get("totp-locked"):
        challenge["totp"] = True
    recovery = next((e for e in entries if e["type"] == "recovery"), None)
    if recovery is not None:
        challenge["recovery"] = {"available": len(recovery.get("unused", []))}
    return challenge


# -- lockout after failed attempts (PVE 8+) -------------------------------------------

# PVE keeps each user's failure counters beside their factors in priv/tfa.cfg.
LOCK_FILE = "priv/tfa.cfg#locks"
TOTP_FAILURE_LIMIT = 8  # failed TOTP codes that lock the user's TOTP factors
TFA_FAILURE_LIMIT = 100  # failed second factors of any kind that block them all ...
TFA_LOCK_SECONDS = 3600  # ... for an hour


async def _lock_state(conn, userid: str, *, for_update: bool = False) -> dict:
    row = await section_repo.section(conn, LOCK_FILE, userid, for_update=for_update)
    return dict(row["options"]) if row is not None else {}


async def _save_lock_state(conn, userid: str, state: dict) -> None:
    row = await section_repo.section(conn, LOCK_FILE, userid, for_update=True)
    if row is None:
        await section_repo.insert(conn, LOCK_FILE, userid, "lock", state)
    else:
        await section_repo.update(conn, LOCK_FILE, userid, row["version"], state)


def _counted(state: dict, kind: str, passed: bool, now: float) -> dict:
    """The counters after one second-factor attempt of ``kind``."""
    state = dict(state)
    if passed:
        state["tfa-failures"] = 0
        if kind == "totp":
            state["totp-failures"] = 0
        if kind == "recovery":  # a recovery key lifts the TOTP lock
            state.update({"totp-failures": 0, "totp-locked": 0})
        return state
    state["tfa-failures"] = state.get("tfa-failures", 0) + 1
    if kind == "totp":
        state["totp-failures"] = state.get("totp-failures", 0) + 1
        if state["totp-failures"] >= TOTP_FAILURE_LIMIT:
            state["totp-locked"] = 1
    if state["tfa-failures"] >= TFA_FAILURE_LIMIT:
        state.update({"tfa-failures": 0, "tfa-locked-until": int(now) + TFA_LOCK_SECONDS})
    return state


def lock_status(state: dict, now: float) -> dict:
    """``totp-locked`` and (while it lasts) ``tfa-locked-until``, as the user list shows."""
    status = {"totp-locked": int(bool(state.get("totp-locked")))}
    if state.get("tfa-locked-until", 0) > now:
        status["tfa-locked-until"] = state["tfa-locked-until"]
    return status


async def lock_statuses(rt) -> dict[str, dict]:
    """Each user with second factors or lock state → their lock status (PVE 8+)."""
    now = time.time()
    async with rt.pool.acquire() as conn:
        users = {e["userid"] for e in await _entries(conn)}
        states = {r["id"]: dict(r["options"]) for r in await section_repo.sections(conn, LOCK_FILE)}
    return {u: lock_status(states.get(u, {}), now) for u in users | set(states)}


async def unlock(rt, userid: str) -> bool:
    """``PUT /access/users/{userid}/unlock-tfa``: whether the user was locked."""
    async with rt.pool.acquire() as conn, conn.transaction():
        await section_repo.lock_file(conn, LOCK_FILE)
        state = await _lock_state(conn, userid, for_update=True)
        if not state:
            return False
        was_locked = bool(state.get("totp-locked")) or "tfa-locked-until" in state
        await section_repo.delete(conn, LOCK_FILE, userid)
    return was_locked


async def verify_response(conn, userid: str, response: str, *, lockout: bool = False) -> bool:
    """``totp:<code>`` against any enabled TOTP entry; ``recovery:<key>`` spends that key.

    A bare code counts as TOTP (the old API's clients send just the digits).  With
    ``lockout`` (PVE 8+) failures are counted: a TOTP-locked user's codes and a
    blocked user's factors are refused, and ``conn``'s transaction keeps the count."""
    kind, _, value = response.partition(":") if ":" in response else ("totp", "", response)
    if not lockout:
        return await _check_response(conn, userid, kind, value)
    now = time.time()
    await section_repo.lock_file(conn, LOCK_FILE)
    state = await _lock_state(conn, userid, for_update=True)
    if state.get("tfa-locked-until", 0) > now:
        return False
    locked_out = kind == "totp" and bool(state.get("totp-locked"))
    passed = not locked_out and await _check_response(conn, userid, kind, value)
    if kind in ("totp", "recovery"):
        await _save_lock_state(conn, userid, _counted(state, kind, passed, now))
    return passed


async def _check_response(conn, userid: str, kind: str, value: str) -> bool:
    entries = [e for e in await _entries(conn, userid) if int(e.get("enable", 1))]
    if kind == "totp":
        return any(
            _totp_matches(e["secret"], value.strip(), time.time())
            for e in entries
            if e["type"] == "totp"
        )
    if kind == "recovery":
        await section_repo.lock_file(conn, TFA_FILE)
        row = await section_repo.section(
            conn, TFA_FILE, _section_id(userid, RECOVERY_ID), for_update=True
        )
        if row is None or not int(row["options"].get("enable", 1)):
            return False
        options = dict(row["options"])
        wanted = _key_hash(value)
        if wanted not in options.get("unused", []):
            return False
        options["unused"] = [h for h in options["unused"] if h != wanted]
        await section_repo.update(conn, TFA_FILE, row["id"], row["version"], options)
        return True
    return False


async def verify_old_api(rt, principal: Principal, response: str) -> dict:
    """6.x/7.x ``POST /access/tfa``: check a second factor, answer a fresh full ticket."""
    async with rt.pool.acquire() as conn:
        challenge = await challenge_for(conn, principal.userid)
        if challenge is None:
            raise PveError("no u2f data available")
        async with conn.transaction():
            passed = await verify_response(conn, principal.userid, response)
    if not passed:
        raise AuthenticationFailed()
    return {"ticket": rt.tickets.issue(principal.userid)}


async def change_old_api(rt, principal: Principal, params: dict) -> dict:
    """6.x ``PUT /access/tfa``: ``delete`` drops a user's factors, ``new`` sets up TOTP (oath).

    U2F registration (``confirm``) needs a hardware key the simulator does not have.
    """
    userid = params["userid"]
    await _confirm_owner(rt, principal, userid, params.get("password"))
    action = params["action"]
    if action == "delete":
        async with rt.pool.acquire() as conn, conn.transaction():
            await section_repo.lock_file(conn, TFA_FILE)
            for entry in await _entries(conn, userid):
                await section_repo.delete(conn, TFA_FILE, _section_id(userid, entry["id"]))
        return {}
    if action == "new":
        config = dict(
            part.split("=", 1) for part in str(params.get("config") or "").split(",") if "=" in part
        )
        if config.get("type", "oath") != "oath":
            raise PveError(f"the simulator cannot register '{config['type']}' entries")
        keys = [k for k in str(params.get("key") or "").replace(",", " ").split() if k]
        if not keys:
            raise ParameterError({"key": "missing key"})
        secret = keys[0]
        try:
            totp_code(secret, 0)
        except ValueError as exc:
            raise ParameterError({"key": "invalid base32 key"}) from exc
        if params.get("response") and not _totp_matches(
            secret, str(params["response"]), time.time()
        ):
            raise AuthenticationFailed()
        entry = {
            "userid": userid,
            "type": "totp",
            "id": uuid.uuid4().hex[:16],
            "description": "",
            "created": int(time.time()),
            "enable": 1,
            "secret": secret,
        }
        async with rt.pool.acquire() as conn, conn.transaction():
            await section_repo.lock_file(conn, TFA_FILE)
            await section_repo.insert(
                conn, TFA_FILE, _section_id(userid, entry["id"]), "totp", entry
            )
        return {}
    if action == "confirm":
        raise PveError("no u2f data available")
    raise PveError(f"invalid action: {action}")
