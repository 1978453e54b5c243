"""OpenID Connect realms against a provider on loopback (the simulator's only network):
auth-url discovers the provider and stores the auth state, login spends that state once,
exchanges the code (PKCE) and accepts only a properly signed ID token for the nonce."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from simtest_support import expect_data, expect_error

CLIENT_ID, CLIENT_KEY = "pve-sim", "s3cret"
REDIRECT = "https://pve.example.test:8006"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Provider:
    """A minimal OpenID provider: discovery, JWKS, and a token endpoint for codes the
    test 'authorizes' (as the user's browser would at the authorization endpoint)."""

    def __init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.codes: dict[str, dict] = {}
        self.tokens_requested: list[dict] = []
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _json(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == "/.well-known/openid-configuration":
                    self._json(200, provider.metadata())
                elif self.path == "/jwks":
                    numbers = provider.key.public_key().public_numbers()
                    e = numbers.e.to_bytes((numbers.e.bit_length() + 7) // 8, "big")
                    n = numbers.n.to_bytes((numbers.n.bit_length() + 7) // 8, "big")
                    key = {"kty": "RSA", "kid": "k1", "alg": "RS256", "e": _b64(e), "n": _b64(n)}
                    self._json(200, {"keys": [key]})
                else:
                    self._json(404, {})

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
                provider.tokens_requested.append(form)
                grant = provider.codes.pop(form.get("code", ""), None)
                basic = "Basic " + base64.b64encode(f"{CLIENT_ID}:{CLIENT_KEY}".encode()).decode()
                verifier = form.get("code_verifier", "").encode()
                if (
                    grant is None
                    or self.headers.get("Authorization") != basic
                    or _b64(hashlib.sha256(verifier).digest()) != grant["challenge"]
                    or form.get("redirect_uri") != REDIRECT
                ):
                    self._json(400, {"error": "invalid_grant"})
                    return
                self._json(
                    200,
                    {
                        "access_token": "x",
                        "token_type": "Bearer",
                        "id_token": provider.id_token(grant["claims"]),
                    },
                )

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def metadata(self) -> dict:
        return {
            "issuer": self.url,
            "authorization_endpoint": f"{self.url}/authorize",
            "token_endpoint": f"{self.url}/token",
            "jwks_uri": f"{self.url}/jwks",
        }

    def id_token(self, claims: dict, key=None) -> str:
        header = _b64(json.dumps({"alg": "RS256", "kid": "k1", "typ": "JWT"}).encode())
        body = _b64(json.dumps(claims).encode())
        signature = (key or self.key).sign(
            f"{header}.{body}".encode(), padding.PKCS1v15(), hashes.SHA256()
        )
        return f"{header}.{body}.{_b64(signature)}"

    def authorize(self, auth_url: str, **claims) -> tuple[str, str]:
        """The user signs in: a code for the request's nonce and PKCE challenge."""
        query = {k: v[0] for k, v in parse_qs(urlsplit(auth_url).query).items()}
        code = secrets.token_hex(8)
        self.codes[code] = {
            "challenge": query["code_challenge"],
            "claims": {
                "iss": self.url,
                "aud": CLIENT_ID,
                "nonce": query["nonce"],
                "exp": int(time.time()) + 300,
                "iat": int(time.time()),
                **claims,
            },
        }
        return code, query["state"]


@pytest.fixture(scope="module")
def provider():
    idp = Provider()
    yield idp
    idp.server.shutdown()


@pytest.fixture
def realm(root, provider):
    name = f"oidc{uuid.uuid4().hex[:6]}"
    created = root.post(
        "/access/domains",
        data={
            "realm": name,
            "type": "openid",
            "issuer-url": provider.url,
            "client-id": CLIENT_ID,
            "client-key": CLIENT_KEY,
            "autocreate": 1,
        },
    )
    assert created.status_code == 200, created.text
    return name


def _anonymous(server, path: str, data: dict) -> httpx.Response:
    with httpx.Client(base_url=server.base_url + "/api2/json", verify=False, timeout=30) as c:
        return c.post(path, data=data)


def _auth_url(server, realm: str) -> str:
    answer = _anonymous(
        server, "/access/openid/auth-url", {"realm": realm, "redirect-url": REDIRECT}
    )
    return expect_data(answer, "/access/openid/auth-url", "POST")


def _login(server, state: str, code: str) -> httpx.Response:
    return _anonymous(
        server, "/access/openid/login", {"state": state, "code": code, "redirect-url": REDIRECT}
    )


def test_auth_url_comes_from_the_providers_discovery(server, root, provider, realm):
    url = _auth_url(server, realm)
    parts = urlsplit(url)
    assert f"{parts.scheme}://{parts.netloc}{parts.path}" == f"{provider.url}/authorize"
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    assert query["response_type"] == "code" and query["client_id"] == CLIENT_ID
    assert query["redirect_uri"] == REDIRECT and query["scope"] == "openid email profile"
    assert query["code_challenge_method"] == "S256" and query["nonce"]
    assert json.loads(query["state"])["realm"] == realm

    expect_error(
        _anonymous(
            server, "/access/openid/auth-url", {"realm": "nosuch", "redirect-url": REDIRECT}
        ),
        500,
        "authentication domain 'nosuch' does not exist",
    )
    expect_error(
        _anonymous(server, "/access/openid/auth-url", {"realm": "pve", "redirect-url": REDIRECT}),
        500,
        "wrong realm type (pve != openid)",
    )
    far = f"far{uuid.uuid4().hex[:6]}"
    root.post(
        "/access/domains",
        data={
            "realm": far,
            "type": "openid",
            "issuer-url": "https://idp.example.test",
            "client-id": CLIENT_ID,
        },
    ).raise_for_status()
    expect_error(
        _anonymous(server, "/access/openid/auth-url", {"realm": far, "redirect-url": REDIRECT}),
        500,
        "no network beyond loopback",
    )


def test_login_creates_the_user_and_spends_the_state(server, root, provider, realm):
    code, state = provider.authorize(
        _auth_url(server, realm), sub="alice", email="alice@example.test", given_name="Alice"
    )
    answer = expect_data(_login(server, state, code))
    assert answer["username"] == f"alice@{realm}" and answer["ticket"].startswith("PVE:")
    user = expect_data(root.get(f"/access/users/alice@{realm}"))
    assert (user["email"], user["firstname"], user["enable"]) == ("alice@example.test", "Alice", 1)
    # The ticket is a real login.
    with httpx.Client(base_url=server.base_url + "/api2/json", verify=False, timeout=30) as c:
        version = c.get("/version", headers={"Cookie": f"PVEAuthCookie={answer['ticket']}"})
    assert version.status_code == 200
    # A state is good for one login only.
    again = _login(server, state, code)
    assert (again.status_code, again.reason_phrase) == (401, "authentication failure")


@pytest.mark.parametrize("broken", ["unknown state", "wrong nonce", "foreign key", "no user"])
def test_login_failures_are_a_bare_401(server, root, provider, realm, broken):
    url = _auth_url(server, realm)
    code, state = provider.authorize(url, sub=f"bob{uuid.uuid4().hex[:4]}")
    claims = provider.codes[code]["claims"]
    if broken == "unknown state":
        state = json.dumps({"csrf_token": "forged", "realm": realm})
    elif broken == "wrong nonce":
        claims["nonce"] = "another"
    elif broken == "foreign key":
        other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        provider.id_token = lambda c, key=other, original=provider.id_token: original(c, key)
    else:
        root.put(f"/access/domains/{realm}", data={"autocreate": 0}).raise_for_status()
    try:
        failed = _login(server, state, code)
    finally:
        provider.__dict__.pop("id_token", None)
    assert (failed.status_code, failed.reason_phrase) == (401, "authentication failure")
    assert not [
        u for u in root.get("/access/users").json()["data"] if u["userid"].startswith("bob")
    ]
