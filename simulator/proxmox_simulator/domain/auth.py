"""PVE-format credentials: tickets, CSRF prevention tokens, API tokens, scrypt.

Ticket:  ``PVE:<userid>:<HEXTIME>::<base64 Ed25519 signature>``
CSRF:    ``<HEXTIME>:<base64 HMAC-SHA256(secret, "<HEXTIME>:<userid>")>``
Token:   ``PVEAPIToken=<userid>!<tokenid>=<secret>``

Signing keys are generated once and stored in the database so every replica
verifies every other replica's tickets.  Security timestamps use wall time,
never the simulation clock.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass
from urllib.parse import quote, unquote

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from proxmox_simulator.domain.errors import AuthenticationFailed

# PVE accepts tickets from 5 minutes in the future up to 2 hours old.
TICKET_MIN_AGE = -300
TICKET_LIFETIME = 7200

# VNC/terminal tickets live for seconds: PVE accepts ages strictly between -20 and 40 s.
SCOPED_TICKET_MIN_AGE, SCOPED_TICKET_MAX_AGE = -20, 40

_TICKET = re.compile(
    r"^PVE:(?P<userid>[^:\s]+@[^:\s]+):(?P<hex>[0-9A-F]{8})::(?P<sig>[A-Za-z0-9+/=]+)$"
)
_TOKEN = re.compile(
    r"^PVEAPIToken=(?P<userid>[^!\s]+@[^!\s]+)!(?P<tokenid>[A-Za-z][A-Za-z0-9._-]*)[=:](?P<secret>\S+)$"
)
_USERID = re.compile(r"^[^\s:/]+@[A-Za-z][A-Za-z0-9._-]*$")


def is_valid_userid(userid: str) -> bool:
    return bool(_USERID.match(userid))


@dataclass(frozen=True)
class AuthKeys:
    private_key_pem: bytes
    csrf_secret: bytes

    @classmethod
    def generate(cls) -> AuthKeys:
        from cryptography.hazmat.primitives import serialization

        key = Ed25519PrivateKey.generate()
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        return cls(pem, secrets.token_bytes(32))


def _scoped_data(plain: str, userid: str, path: str, port) -> bytes:
    """What a scoped ticket signs: ``<plain>:<user>:<path>[:<port>]``."""
    data = f"{plain}:{userid}:{path}"
    return (data if port is None else f"{data}:{int(port)}").encode()


class TicketAuthority:
    def __init__(self, keys: AuthKeys, lifetime: int = TICKET_LIFETIME) -> None:
        from cryptography.hazmat.primitives import serialization

        self._private: Ed25519PrivateKey = serialization.load_pem_private_key(
            keys.private_key_pem, password=None
        )  # type: ignore[assignment]
        self._public: Ed25519PublicKey = self._private.public_key()
        self._csrf_secret = keys.csrf_secret
        self.lifetime = lifetime
        self._ca_pem: str | None = None

    def issue(self, userid: str, now: float | None = None) -> str:
        stamp = f"{int(now if now is not None else time.time()):08X}"
        plain = f"PVE:{userid}:{stamp}"
        signature = base64.b64encode(self._private.sign(plain.encode())).decode()
        return f"{plain}::{signature}"

    def verify(self, ticket: str, now: float | None = None) -> str:
        """Return the ticket's userid; raise AuthenticationFailed on any defect."""
        match = _TICKET.match(ticket or "")
        if not match:
            raise AuthenticationFailed("invalid PVE ticket")
        plain = f"PVE:{match['userid']}:{match['hex']}"
        try:
            self._public.verify(base64.b64decode(match["sig"]), plain.encode())
        except (InvalidSignature, ValueError) as exc:
            raise AuthenticationFailed("invalid PVE ticket") from exc
        age = int(now if now is not None else time.time()) - int(match["hex"], 16)
        if age < TICKET_MIN_AGE or age > self.lifetime:
            raise AuthenticationFailed("invalid PVE ticket (expired)")
        return match["userid"]

    # -- half tickets (the login's second factor) ----------------------------------

    def issue_tfa(self, userid: str, challenge: str, now: float | None = None) -> str:
        """PVE's half ticket ``PVE:!tfa!<challenge>:<HEXTIME>::<signature>``.

        It names no user (the signature covers the user id), so it opens nothing
        but the second login step of that same user.
        """
        stamp = f"{int(now if now is not None else time.time()):08X}"
        plain = f"PVE:!tfa!{quote(challenge, safe='')}:{stamp}"
        signature = self._private.sign(f"{plain}:{userid}".encode())
        return f"{plain}::{base64.b64encode(signature).decode()}"

    def verify_tfa(self, ticket: str, userid: str, now: float | None = None) -> str:
        """The challenge a half ticket carries, if it was issued to ``userid``."""
        match = re.fullmatch(
            r"(?P<plain>PVE:!tfa!(?P<data>[^:\s]*):(?P<hex>[0-9A-F]{8}))::(?P<sig>[A-Za-z0-9+/=]+)",
            ticket or "",
        )
        if not match:
            raise AuthenticationFailed()
        try:
            self._public.verify(
                base64.b64decode(match["sig"]), f"{match['plain']}:{userid}".encode()
            )
        except (InvalidSignature, ValueError) as exc:
            raise AuthenticationFailed() from exc
        age = int(now if now is not None else time.time()) - int(match["hex"], 16)
        if age < TICKET_MIN_AGE or age > self.lifetime:
            raise AuthenticationFailed()
        return unquote(match["data"])

    # -- short-lived tickets (consoles) --------------------------------------------

    def issue_scoped(
        self, prefix: str, userid: str, path: str, now: float | None = None, port=None
    ) -> str:
        """A ticket bound to a user and a resource path that it does not show.

        Like PVE's VNC tickets (``PVEVNC:<HEXTIME>::<signature>``): the user and
        path (and, where the major binds it, the proxy's port) are signed but left
        out of the ticket, so only a verifier that knows them (the websocket
        endpoint of the same user and guest) accepts it.
        """
        stamp = f"{int(now if now is not None else time.time()):08X}"
        plain = f"{prefix}:{stamp}"
        signed = _scoped_data(plain, userid, path, port)
        return f"{plain}::{base64.b64encode(self._private.sign(signed)).decode()}"

    def verify_scoped(
        self, ticket: str, prefix: str, userid: str, path: str, now: float | None = None, port=None
    ) -> None:
        """Raise PVE's 401 unless the ticket was issued to ``userid`` for ``path`` just now."""
        match = re.fullmatch(
            rf"(?P<plain>{re.escape(prefix)}:(?P<hex>[0-9A-F]{{8}}))::(?P<sig>[A-Za-z0-9+/=]+)",
            ticket or "",
        )
        denied = AuthenticationFailed(f"permission denied - invalid {prefix} ticket")
        if not match:
            raise denied
        signed = _scoped_data(match["plain"], userid, path, port)
        try:
            self._public.verify(base64.b64decode(match["sig"]), signed)
        except (InvalidSignature, ValueError) as exc:
            raise denied from exc
        age = int(now if now is not None else time.time()) - int(match["hex"], 16)
        if not SCOPED_TICKET_MIN_AGE < age < SCOPED_TICKET_MAX_AGE:
            raise denied

    def spice_proxy_ticket(self, vmid: int, node: str, now: float | None = None) -> str:
        """The ``host`` a SPICE viewer hands to the node's proxy on port 3128.

        PVE's form, lower case and short because remote-viewer needs that:
        ``pvespiceproxy:<hextime>:<vmid>:<node>::<40 hex digits>``.
        """
        plain = f"pvespiceproxy:{int(now if now is not None else time.time()):08x}:{vmid}:{node.lower()}"
        digest = hmac.new(self._csrf_secret, plain.encode(), hashlib.sha1).hexdigest()
        return f"{plain}::{digest}"

    def certificate_authority_pem(self) -> str:
        """The cluster CA certificate (PVE's ``pve-root-ca.pem``) consoles hand out.

        Built from the stored signing key with fixed fields, so every replica
        answers the same certificate without storing one more secret.
        """
        if self._ca_pem is None:
            self._ca_pem = _certificate_authority(self._private)
        return self._ca_pem

    def csrf_token(self, userid: str, now: float | None = None) -> str:
        stamp = f"{int(now if now is not None else time.time()):08X}"
        digest = hmac.new(self._csrf_secret, f"{stamp}:{userid}".encode(), hashlib.sha256)
        return f"{stamp}:{base64.b64encode(digest.digest()).decode().rstrip('=')}"

    def verify_csrf(self, token: str | None, userid: str, now: float | None = None) -> bool:
        if not token or ":" not in token:
            return False
        stamp, _, _digest = token.partition(":")
        if not re.fullmatch(r"[0-9A-F]{8}", stamp):
            return False
        expected = hmac.new(self._csrf_secret, f"{stamp}:{userid}".encode(), hashlib.sha256)
        wanted = f"{stamp}:{base64.b64encode(expected.digest()).decode().rstrip('=')}"
        age = int(now if now is not None else time.time()) - int(stamp, 16)
        return hmac.compare_digest(wanted, token) and TICKET_MIN_AGE <= age <= self.lifetime


def _certificate_authority(key: Ed25519PrivateKey) -> str:
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.x509.oid import NameOID

    public = key.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, "Proxmox Virtual Environment"),
            x509.NameAttribute(
                NameOID.ORGANIZATIONAL_UNIT_NAME, hashlib.sha256(public).hexdigest()
            ),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "PVE Cluster Manager CA"),
        ]
    )
    utc = datetime.UTC
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(int.from_bytes(hashlib.sha256(public).digest()[:16], "big") >> 1)
        .not_valid_before(datetime.datetime(2020, 1, 1, tzinfo=utc))
        .not_valid_after(datetime.datetime(2050, 1, 1, tzinfo=utc))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, None)  # Ed25519 signatures are deterministic: the same PEM everywhere
    )
    return cert.public_bytes(serialization.Encoding.PEM).decode()


@dataclass(frozen=True)
class TokenCredentials:
    userid: str
    tokenid: str
    secret: str


def parse_token_header(header: str) -> TokenCredentials | None:
    match = _TOKEN.match(header.strip())
    if not match:
        return None
    return TokenCredentials(match["userid"], match["tokenid"], match["secret"])


# -- scrypt password hashes -----------------------------------------------------

SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1


def hash_secret(secret: str) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(
        secret.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, dklen=32
    )
    b64 = base64.b64encode
    return f"$scrypt$n={SCRYPT_N},r={SCRYPT_R},p={SCRYPT_P}${b64(salt).decode()}${b64(digest).decode()}"


def verify_secret(secret: str, encoded: str | None) -> bool:
    if not encoded or not encoded.startswith("$scrypt$"):
        return False
    try:
        _, _, params, salt_b64, digest_b64 = encoded.split("$")
        opts = dict(item.split("=") for item in params.split(","))
        salt, expected = base64.b64decode(salt_b64), base64.b64decode(digest_b64)
        actual = hashlib.scrypt(
            secret.encode(),
            salt=salt,
            n=int(opts["n"]),
            r=int(opts["r"]),
            p=int(opts["p"]),
            dklen=len(expected),
        )
    except (ValueError, KeyError):
        return False
    return hmac.compare_digest(actual, expected)


class TokenVerificationCache:
    """Remembers successful token-secret verifications so scrypt runs once.

    Keyed by SHA-256 of the *full* credential (id and secret), so a different
    secret for the same token is a cache miss and is verified afresh.  An entry
    is valid only for the token generation it was verified against and for a
    bounded time; changing or deleting a token bumps its generation.
    """

    def __init__(self, ttl: float = 300.0, max_entries: int = 4096) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self._entries: dict[bytes, tuple[str, str, int, float]] = {}

    @staticmethod
    def _key(creds: TokenCredentials) -> bytes:
        material = f"{creds.userid}!{creds.tokenid}={creds.secret}".encode()
        return hashlib.sha256(material).digest()

    def lookup(self, creds: TokenCredentials, generation: int) -> bool:
        entry = self._entries.get(self._key(creds))
        if entry is None:
            return False
        userid, tokenid, gen, expires = entry
        if (userid, tokenid, gen) != (creds.userid, creds.tokenid, generation) or (
            time.monotonic() > expires
        ):
            self._entries.pop(self._key(creds), None)
            return False
        return True

    def remember(self, creds: TokenCredentials, generation: int) -> None:
        if len(self._entries) >= self.max_entries:
            self._entries.clear()
        self._entries[self._key(creds)] = (
            creds.userid,
            creds.tokenid,
            generation,
            time.monotonic() + self.ttl,
        )

    def clear(self) -> None:
        self._entries.clear()
