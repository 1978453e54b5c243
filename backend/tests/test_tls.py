"""TLS verification is on by default for NetBox and Proxmox; an untrusted certificate
fails at once (no retries) with an error that says what to configure."""

from __future__ import annotations

import datetime as dt
import http.server
import ipaddress
import json
import ssl
import subprocess
import sys
import threading

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from proxbox_backend.clients.http import CertificateNotTrusted
from proxbox_backend.clients.netbox import NetBoxClient
from proxbox_backend.clients.proxmox import ProxmoxClient, ProxmoxCredentials
from proxbox_backend.config import Settings
from proxbox_backend.domain.endpoint import Endpoint
from proxbox_backend.secrets import Secret


class Sleeps(list):
    async def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture(scope="module")
def self_signed(tmp_path_factory):
    """A certificate for 127.0.0.1 that no default trust store knows."""
    return make_self_signed(tmp_path_factory.mktemp("tls"))


def make_self_signed(folder):
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "proxbox-test")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    folder.mkdir(parents=True, exist_ok=True)
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


@pytest.fixture(scope="module")
def https_server(self_signed):
    """Answers every GET with an empty JSON list, over TLS with the self-signed cert."""
    answered = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            answered.append(self.path)
            body = json.dumps({"data": {"version": "8.2"}, "results": [], "count": 0}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*map(str, self_signed))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"https://127.0.0.1:{server.server_address[1]}", answered
    server.shutdown()


def _netbox(url: str, **kw) -> tuple[NetBoxClient, Sleeps]:
    sleeps = Sleeps()
    return NetBoxClient(url, Secret("t" * 40), sleep=sleeps, **kw), sleeps


def _proxmox(url: str, **kw) -> tuple[ProxmoxClient, Sleeps]:
    sleeps = Sleeps()
    credentials = ProxmoxCredentials(token_id="sync@pve!x", token_secret=Secret("s" * 36))
    return ProxmoxClient(url, credentials, sleep=sleeps, **kw), sleeps


def test_verification_is_the_default():
    settings = Settings(netbox_url="https://netbox.example", netbox_token=Secret("t" * 40))
    assert settings.netbox_verify_tls is True
    # None: the endpoint's verify_tls (default on) decides, never "off".
    assert settings.proxmox_verify_tls is None
    endpoint = Endpoint.from_api({"id": 1, "name": "pve", "host": "pve.example"})
    assert endpoint.verify_tls is True


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("make", "call", "hint"),
    [
        (_netbox, lambda c: c.get("/status/"), "--netbox-ca-bundle"),
        (_proxmox, lambda c: c.version(), "--proxmox-ca-bundle"),
    ],
)
async def test_untrusted_certificate_fails_at_once_with_a_clear_error(
    https_server, self_signed, make, call, hint
):
    url, answered = https_server
    client, sleeps = make(url)
    before = len(answered)
    with pytest.raises(CertificateNotTrusted) as failure:
        await call(client)
    await client.aclose()
    message = str(failure.value)
    assert "TLS certificate of 127.0.0.1 is not trusted" in message
    assert "self-signed certificate" in message and hint in message
    assert sleeps == [] and len(answered) == before  # no retry, no request got through

    # The same server, its CA given: the failure above was the verification.
    trusting, _ = make(url, ca_bundle=str(self_signed[0]))
    await call(trusting)
    await trusting.aclose()
    assert len(answered) == before + 1


def test_cli_names_the_untrusted_certificate(https_server, monkeypatch):
    url, _ = https_server
    env = {
        "PATH": "/usr/bin:/bin",
        "PROXBOX_NETBOX_URL": url,
        "PROXBOX_NETBOX_TOKEN": "t" * 40,
    }
    result = subprocess.run(
        [sys.executable, "-m", "proxbox_backend.cli", "run", "--endpoint", "1", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["status"] == "failed"
    assert "netbox: the TLS certificate of 127.0.0.1 is not trusted" in report["error"]
    assert "PROXBOX_NETBOX_CA_BUNDLE" in report["error"]
    assert "retry in" not in result.stderr


@pytest.mark.asyncio
async def test_a_ca_bundle_replaced_in_place_is_read_again(https_server, self_signed, tmp_path):
    """Clients share one TLS context per bundle (parsing it per client costs CPU on every
    watcher poll), but a bundle rotated in place is the new trust store at the next client."""
    url, _ = https_server
    bundle = tmp_path / "ca.pem"
    other_ca, _ = make_self_signed(tmp_path / "other")
    bundle.write_bytes(other_ca.read_bytes())
    client, _ = _netbox(url, ca_bundle=str(bundle))
    with pytest.raises(CertificateNotTrusted):
        await client.get("/status/")
    await client.aclose()

    bundle.write_bytes(self_signed[0].read_bytes() + b"\n")  # the server's CA now
    rotated, _ = _netbox(url, ca_bundle=str(bundle))
    await rotated.get("/status/")
    await rotated.aclose()
