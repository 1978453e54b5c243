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
from proxmoxer.tools import Tasks
from simtest_support import close_proxmoxer, proxmoxer_client

NODE = "pve3"


@pytest.fixture(scope="module")
def prox(server):
    api = proxmoxer_client(server)
    yield api
    close_proxmoxer(api)


def _custom(cn: str, days: int = 90) -> tuple[str, str, x509.Certificate]:
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
        .not_valid_after(start + datetime.timedelta(days=days))
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


def _task(prox, upid) -> tuple[dict, list[str]]:
    status = Tasks.blocking_status(prox, upid, polling_interval=0.02)
    return status, Tasks.decode_log(prox.nodes(status["node"]).tasks(upid).log.get()).splitlines()


def test_acme_accounts_never_reach_a_ca(prox):
    acme = prox.cluster.acme
    assert acme.account.get() == []
    status, log = _task(prox, acme.account.post(name="probe", contact="ops@example.test"))
    assert status["type"] == "acmeregister"
    assert status["exitstatus"].startswith("Registration failed: acme-v02.api.letsencrypt.org")
    assert log[:2] == ["Generating ACME account key..", "Registering ACME account.."]
    assert acme.account.get() == []
    for call in (
        acme.account("probe").get,
        acme.account("probe").put,
        acme.account("probe").delete,
    ):
        with pytest.raises(ResourceException, match="ACME account config file 'probe' does not"):
            call()
    with pytest.raises(ResourceException, match="staging.example.test"):
        acme.meta.get(directory="https://staging.example.test/directory")


def test_acme_order_checks_the_node_config_then_needs_an_account(prox):
    node = prox.nodes("pve2")
    with pytest.raises(ResourceException, match="ACME domain list in node configuration"):
        node.certificates.acme.certificate.post()
    node.config.put(acmedomain0="pve2.example.test", acme="account=ops")
    try:
        status, _log = _task(prox, node.certificates.acme.certificate.post())
        assert status["type"] == "acmenewcert"
        assert status["exitstatus"] == "ACME account config file 'ops' does not exist."
    finally:
        node.config.put(delete="acmedomain0,acme")


def test_acme_renew_and_revoke_check_certificate_and_config(prox):
    node = prox.nodes("pve1")
    acme_cert = node.certificates.acme.certificate
    with pytest.raises(ResourceException, match="No current \\(custom\\) certificate found"):
        acme_cert.put()
    pem, key, _cert = _custom("pve1.example.test")  # valid for 90 days from 2026-01-01
    node.certificates.custom.post(certificates=pem, key=key, force=1)
    try:
        with pytest.raises(ResourceException, match="ACME settings in node configuration"):
            acme_cert.put(force=1)
        with pytest.raises(ResourceException, match="ACME settings in node configuration"):
            acme_cert.delete()
        node.config.put(acme="account=ops,domains=pve1.example.test")
        # The uploaded certificate expired long ago (simulated "now" is later): no force needed.
        for call in (acme_cert.put, acme_cert.delete):
            status, _log = _task(prox, call())
            assert status["type"] in ("acmerenew", "acmerevoke")
            assert status["exitstatus"] == "ACME account config file 'ops' does not exist."
        fresh, fresh_key, _ = _custom("pve1.example.test", days=36500)
        node.certificates.custom.post(certificates=fresh, key=fresh_key, force=1)
        with pytest.raises(ResourceException, match="does not expire within the next 30 days"):
            acme_cert.put()
    finally:
        node.config.put(delete="acme")
        node.certificates.custom.delete()
