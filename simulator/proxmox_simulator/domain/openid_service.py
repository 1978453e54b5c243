"""OpenID Connect realms: ``POST /access/openid/auth-url`` and ``POST /access/openid/login``.

As PVE (PVE/API2/OpenId.pm with proxmox-openid), an authorization URL starts
with the provider's discovery document (``<issuer-url>/.well-known/openid-configuration``)
and a stored, private auth state (CSRF token, nonce, PKCE verifier) whose public half
(``{"csrf_token": …, "realm": …}``) travels as the URL's ``state``.  The login takes
that state back once, exchanges the code at the provider's token endpoint and
accepts the ID token only when its RS256 signature (the provider's JWKS), issuer,
audience, nonce and expiry check out; the user is the configured claim
(``username-claim``, default the subject) at the realm, created when the realm
autocreates users.  Every login failure is PVE's bare 401.

The simulator has no network beyond loopback (as ``download-url``): a provider on
any other host is unreachable, so discovery fails there.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import time
from urllib.parse import urlencode

import httpx
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from proxmox_simulator.domain.auth import is_valid_userid
from proxmox_simulator.domain.errors import AuthenticationFailed, PveError
from proxmox_simulator.domain.storage_transfer import reachable
from proxmox_simulator.repositories import access as access_repo
from proxmox_simulator.repositories import section_configs as section_repo

STATE_FILE = "openid-auth-states"  # PVE keeps them under /var/lib/pve-manager
STATE_LIFETIME = 7 * 60
_TIMEOUT = 10.0
_DEFAULT_SCOPES = "email profile"


class _LoginFailed(Exception):
    """Why a login failed (logged by PVE, never answered)."""


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


async def _realm(conn, realm: str) -> dict:
    row = await access_repo.realm(conn, realm)
    if row is None:
        raise PveError(f"authentication domain '{realm}' does not exist")
    if row["type"] != "openid":
        raise PveError(f"wrong realm type ({row['type']} != openid)")
    return dict(row["config"])


async def _get_json(client: httpx.AsyncClient, url: str) -> dict:
    if not reachable(url):
        raise PveError(f"{url}: the simulator has no network beyond loopback")
    try:
        response = await client.get(url)
        response.raise_for_status()
        return response.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise PveError(f"Failed to discover OpenID provider - {exc}") from None


async def _discover(client: httpx.AsyncClient, config: dict) -> dict:
    issuer = str(config.get("issuer-url") or "").rstrip("/")
    metadata = await _get_json(client, f"{issuer}/.well-known/openid-configuration")
    if str(metadata.get("issuer", "")).rstrip("/") != issuer:
        raise PveError("Failed to discover OpenID provider - issuer mismatch")
    missing = [
        k for k in ("authorization_endpoint", "token_endpoint", "jwks_uri") if k not in metadata
    ]
    if missing:
        raise PveError(f"Failed to discover OpenID provider - missing {', '.join(missing)}")
    return metadata


async def auth_url(rt, params: dict) -> str:
    realm, redirect = params["realm"], params["redirect-url"]
    async with rt.pool.acquire() as conn:
        config = await _realm(conn, realm)
    async with httpx.AsyncClient(timeout=_TIMEOUT) as client:
        metadata = await _discover(client, config)
    csrf, nonce, verifier = (secrets.token_urlsafe(24) for _ in range(3))
    public_state = json.dumps({"csrf_token": csrf, "realm": realm}, separators=(",", ":"))
    challenge = _b64url(hashlib.sha256(verifier.encode()).digest())
    query = {
        "response_type": "code",
        "client_id": config.get("client-id", ""),
        "state": public_state,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "redirect_uri": redirect,
        "scope": " ".join(["openid", *str(config.get("scopes") or _DEFAULT_SCOPES).split()]),
        "nonce": nonce,
    }
    if config.get("prompt"):
        query["prompt"] = config["prompt"]
    if config.get("acr-values"):
        query["acr_values"] = config["acr-values"]
    private_state = {
        "realm": realm,
        "nonce": nonce,
        "pkce_verifier": verifier,
        "ctime": int(time.time()),
    }
    async with rt.pool.acquire() as conn, conn.transaction():
        await section_repo.insert(conn, STATE_FILE, csrf, "auth-state", private_state)
    return f"{metadata['authorization_endpoint']}?{urlencode(query)}"


async def _take_state(rt, state: str) -> dict:
    """The private state of a public one, used up; unknown or expired ones fail."""
    try:
        public = json.loads(state)
        csrf, realm = str(public["csrf_token"]), str(public["realm"])
    except (ValueError, KeyError, TypeError):
        raise _LoginFailed("invalid state") from None
    async with rt.pool.acquire() as conn, conn.transaction():
        row = await section_repo.section(conn, STATE_FILE, csrf, for_update=True)
        if row is not None:
            await section_repo.delete(conn, STATE_FILE, csrf)
    private = dict(row["options"]) if row is not None else None
    if private is None or private["realm"] != realm:
        raise _LoginFailed("no openid auth state found (possible timeout)")
    if private["ctime"] + STATE_LIFETIME < time.time():
        raise _LoginFailed("auth state expired")
    return private


def _verify_id_token(token: str, jwks: dict, config: dict, nonce: str) -> dict:
    try:
        header_b64, claims_b64, signature_b64 = token.split(".")
        header = json.loads(_unb64url(header_b64))
        claims = json.loads(_unb64url(claims_b64))
    except ValueError:
        raise _LoginFailed("malformed id token") from None
    if header.get("alg") != "RS256":
        raise _LoginFailed(f"unsupported signing algorithm {header.get('alg')}")
    keys = [
        k
        for k in jwks.get("keys", [])
        if k.get("kty") == "RSA" and header.get("kid") in (None, k.get("kid"))
    ]
    signed = f"{header_b64}.{claims_b64}".encode()
    signature = _unb64url(signature_b64)
    for key in keys:
        public = rsa.RSAPublicNumbers(
            int.from_bytes(_unb64url(key["e"]), "big"), int.from_bytes(_unb64url(key["n"]), "big")
        ).public_key()
        try:
            public.verify(signature, signed, padding.PKCS1v15(), hashes.SHA256())
            break
        except InvalidSignature:
            continue
    else:
        raise _LoginFailed("id token signature verification failed")
    audience = claims.get("aud")
    audiences = audience if isinstance(audience, list) else [audience]
    if str(claims.get("iss", "")).rstrip("/") != str(config.get("issuer-url", "")).rstrip("/"):
        raise _LoginFailed("id token issuer mismatch")
    if config.get("client-id") not in audiences:
        raise _LoginFailed("id token audience mismatch")
    if claims.get("nonce") != nonce:
        raise _LoginFailed("id token nonce mismatch")
    if not isinstance(claims.get("exp"), int | float) or claims["exp"] < time.time():
        raise _LoginFailed("id token expired")
    return claims


def _unique_name(config: dict, claims: dict) -> str:
    claim = config.get("username-claim") or "subject"
    if claims.get(claim) is not None:
        return str(claims[claim])
    if claim == "subject":
        return str(claims["sub"])
    if claim == "username":
        if claims.get("preferred_username") is None:
            raise _LoginFailed("missing claim 'preferred_username'")
        return str(claims["preferred_username"])
    raise _LoginFailed(f"missing configured claim '{claim}'")


async def _exchange(rt, params: dict) -> tuple[str, dict, dict]:
    """The realm, its config and the verified ID token's claims of a login."""
    private = await _take_state(rt, str(params["state"]))
    realm = private["realm"]
    async with rt.pool.acquire() as conn:
        config = await _realm(conn, realm)
    form = {
        "grant_type": "authorization_code",
        "code": str(params["code"]),
        "redirect_uri": str(params["redirect-url"]),
        "code_verifier": private["pkce_verifier"],
    }
    auth = None
    if config.get("client-key"):
        auth = (str(config.get("client-id", "")), str(config["client-key"]))
    else:
        form["client_id"] = str(config.get("client-id", ""))
    async with httpx.AsyncClient(timeout=_TIMEOUT) as client:
        metadata = await _discover(client, config)
        if not reachable(metadata["token_endpoint"]):
            raise _LoginFailed("token endpoint unreachable")
        response = await client.post(metadata["token_endpoint"], data=form, auth=auth)
        if response.status_code >= 400:
            raise _LoginFailed(f"token exchange failed: {response.status_code}")
        id_token = response.json().get("id_token")
        if not id_token:
            raise _LoginFailed("no id token")
        jwks = await _get_json(client, metadata["jwks_uri"])
    return realm, config, _verify_id_token(id_token, jwks, config, private["nonce"])


async def login(rt, params: dict) -> str:
    """The user a login authenticates (created first where the realm autocreates)."""
    try:
        realm, config, claims = await _exchange(rt, params)
        userid = f"{_unique_name(config, claims)}@{realm}"
        if not is_valid_userid(userid):
            raise _LoginFailed(f"invalid user name '{userid}'")
        async with rt.pool.acquire() as conn, conn.transaction():
            if await access_repo.user(conn, userid) is None:
                if not config.get("autocreate") or not int(config["autocreate"]):
                    raise _LoginFailed(f"no such user ('{userid}')")
                await access_repo.insert_user(
                    conn,
                    userid=userid,
                    realm=realm,
                    enable=True,
                    expire=0,
                    firstname=str(claims.get("given_name") or ""),
                    lastname=str(claims.get("family_name") or ""),
                    email=str(claims.get("email") or ""),
                    comment="",
                    password_hash=None,
                )
        rt.access.invalidate()
        state = await rt.access.get()
        if not state.user_active(userid, time.time()):
            raise _LoginFailed(f"user '{userid}' is disabled")
    except (_LoginFailed, PveError, httpx.HTTPError, ValueError, KeyError):
        raise AuthenticationFailed() from None
    return userid
