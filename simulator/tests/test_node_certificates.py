"""A node's certificates through proxmoxer: certificates/info lists the cluster CA,
the node's pve-ssl and an uploaded custom certificate; the private key never comes back."""

from __future__ import annotations

import datetime

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from proxmoxer.core import ResourceException
from simtest_support import close_proxmoxer, proxmoxer_client

NODE = "pve3"


@pytest.fixture(scope="module")
def prox(server):
    api = proxmoxer_client(server)
    yield api
    close_proxmoxer(api)


def _custom(cn: str) -> tuple[str, str, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    start = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(7)
        .not_valid_before(start)
        .not_valid_after(start + datetime.timedelta(days=90))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(cn)]), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    return cert.public_bytes(serialization.Encoding.PEM).decode(), key_pem, cert


def _fingerprint(cert: x509.Certificate) -> str:
    return ":".join(f"{b:02X}" for b in cert.fingerprint(hashes.SHA256()))


def test_info_lists_the_cluster_ca_and_the_nodes_pve_ssl(prox):
    info = prox.nodes(NODE).certificates.info.get()
    assert [c["filename"] for c in info][:2] == [
        "/etc/pve/pve-root-ca.pem",
        f"/etc/pve/nodes/{NODE}/pve-ssl.pem",
    ]
    ca, ssl = info[0], info[1]
    assert ssl["issuer"] == ca["subject"]
    assert ssl["subject"].endswith(f"/CN={NODE}.pvesim.internal")
    assert NODE in ssl["san"] and "127.0.0.1" in ssl["san"]
    assert ssl["notbefore"] < ssl["notafter"]
    # The fingerprint is the PEM's, and the answer is the same the next time.
    cert = x509.load_pem_x509_certificate(ssl["pem"].encode())
    assert ssl["fingerprint"] == _fingerprint(cert)
    assert prox.nodes(NODE).certificates.info.get()[:2] == info[:2]
    assert "PRIVATE KEY" not in str(info)
    # Each node has a certificate of its own from the same CA.
    other = prox.nodes("pve2").certificates.info.get()
    assert other[0] == ca and other[1]["fingerprint"] != ssl["fingerprint"]


def test_custom_certificate_upload_replace_and_delete(prox):
    node = prox.nodes(NODE).certificates
    pem, key, cert = _custom("proxy.example.test")
    with pytest.raises(ResourceException, match="without \\(existing\\) key"):
        node.custom.post(certificates=pem)
    _other_pem, other_key, _ = _custom("other.example.test")
    with pytest.raises(ResourceException, match="do not match"):
        node.custom.post(certificates=pem, key=other_key)
    with pytest.raises(ResourceException, match="certificates"):
        node.custom.post(certificates="not a certificate", key=key)

    answer = node.custom.post(certificates="leading text\n" + pem, key=key, restart=1)
    assert answer["filename"] == f"/etc/pve/nodes/{NODE}/pveproxy-ssl.pem"
    assert answer["fingerprint"] == _fingerprint(cert)
    assert answer["subject"] == answer["issuer"] == "/CN=proxy.example.test"
    assert answer["san"] == ["proxy.example.test"]
    assert answer["notafter"] - answer["notbefore"] == 90 * 86400
    assert answer["pem"] == pem and "PRIVATE" not in str(answer)
    info = node.info.get()
    assert info[-1] == answer and len(info) == 3

    # A second upload needs force; the stored key serves a renewed certificate.
    with pytest.raises(ResourceException, match="force flag is not set"):
        node.custom.post(certificates=pem, key=key)
    node.custom.post(certificates=pem, force=1)

    node.custom.delete(restart=1)
    assert [c["filename"] for c in node.info.get()] == [
        "/etc/pve/pve-root-ca.pem",
        f"/etc/pve/nodes/{NODE}/pve-ssl.pem",
    ]
