"""A node's TLS certificates: ``GET /nodes/{node}/certificates/info`` and the custom
certificate (``POST``/``DELETE /nodes/{node}/certificates/custom``).

PVE lists the files that exist of ``/etc/pve/pve-root-ca.pem``, the node's
``pve-ssl.pem`` (issued by that cluster CA) and ``pveproxy-ssl.pem`` (an uploaded
custom or ACME certificate).  Here the cluster CA and each node's ``pve-ssl``
are made once, on first use, and kept with the custom certificate in the
simulator's settings; private keys are stored but never answered.
"""

from __future__ import annotations

import datetime
import ipaddress

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from proxmox_simulator.domain.errors import ParameterError, PveError
from proxmox_simulator.domain.guest_service import require_node
from proxmox_simulator.repositories import section_configs
from proxmox_simulator.repositories import settings as settings_repo

ROOT_CA_FILE = "/etc/pve/pve-root-ca.pem"
_ROOT_CA_KEY = "certificates:pve-root-ca"
_VALIDITY_DAYS = {"ca": 3650, "node": 730}


def _node_file(node: str, name: str) -> str:
    return f"/etc/pve/nodes/{node}/{name}.pem"


def _key(node: str, name: str) -> str:
    return f"certificates:{node}:{name}"


def _pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def _key_pem(key) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


def _issue(subject: x509.Name, key, issuer: x509.Name, signer, *, ca: bool, san=()):
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=_VALIDITY_DAYS["ca" if ca else "node"]))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if san:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(san)), critical=False)
    return builder.sign(signer, hashes.SHA256())


def _new_key():
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _make_root_ca() -> dict:
    key = _new_key()
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, "Proxmox Virtual Environment"),
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "pvesim"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "PVE Cluster Manager CA"),
        ]
    )
    return {"cert": _pem(_issue(name, key, name, key, ca=True)), "key": _key_pem(key)}


def _make_node_cert(node: str, ip: str | None, ca: dict) -> dict:
    ca_cert = x509.load_pem_x509_certificate(ca["cert"].encode())
    ca_key = serialization.load_pem_private_key(ca["key"].encode(), password=None)
    key = _new_key()
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "PVE Cluster Node"),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Proxmox Virtual Environment"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"{node}.pvesim.internal"),
        ]
    )
    san: list = [
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.DNSName("localhost"),
        x509.DNSName(node),
        x509.DNSName(f"{node}.pvesim.internal"),
    ]
    if ip:
        san.insert(1, x509.IPAddress(ipaddress.ip_address(ip)))
    cert = _issue(subject, key, ca_cert.subject, ca_key, ca=False, san=san)
    return {"cert": _pem(cert), "key": _key_pem(key)}


def _oneline(name: x509.Name) -> str:
    """OpenSSL's one-line form, as PVE reports subject and issuer."""
    short = {
        NameOID.COMMON_NAME: "CN",
        NameOID.ORGANIZATION_NAME: "O",
        NameOID.ORGANIZATIONAL_UNIT_NAME: "OU",
        NameOID.COUNTRY_NAME: "C",
        NameOID.STATE_OR_PROVINCE_NAME: "ST",
        NameOID.LOCALITY_NAME: "L",
    }
    return "".join(
        f"/{short.get(attr.oid, attr.oid.dotted_string)}={attr.value}"
        for rdn in name.rdns
        for attr in rdn
    )


def _san(cert: x509.Certificate) -> list[str]:
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [str(n.value) for n in names]


def certificate_info(filename: str, pem: str) -> dict:
    """PVE's ``pve-certificate-info`` of the first certificate in ``pem``."""
    cert = x509.load_pem_x509_certificates(pem.encode())[0]
    digest = cert.fingerprint(hashes.SHA256())
    public = cert.public_key()
    key_type = {rsa.RSAPublicKey: "rsaEncryption"}
    kind = next((v for k, v in key_type.items() if isinstance(public, k)), "id-ecPublicKey")
    return {
        "filename": filename,
        "fingerprint": ":".join(f"{b:02X}" for b in digest),
        "subject": _oneline(cert.subject),
        "issuer": _oneline(cert.issuer),
        "notbefore": int(cert.not_valid_before_utc.timestamp()),
        "notafter": int(cert.not_valid_after_utc.timestamp()),
        "san": _san(cert),
        "pem": pem,
        "public-key-type": kind,
        "public-key-bits": public.key_size,
    }


async def _ensure_node_certs(conn, node: str) -> tuple[dict, dict]:
    """The cluster CA and the node's pve-ssl, made on first use."""
    row = await require_node(conn, node)
    await section_configs.lock_file(conn, "certificates")
    ca = await settings_repo.get_or_create(conn, _ROOT_CA_KEY, _make_root_ca)
    ip = row["ip"]
    ssl = await settings_repo.get_or_create(
        conn, _key(node, "pve-ssl"), lambda: _make_node_cert(node, ip, ca)
    )
    return ca, ssl


async def info(rt, node: str) -> list[dict]:
    async with rt.pool.acquire() as conn, conn.transaction():
        ca, ssl = await _ensure_node_certs(conn, node)
        custom = await settings_repo.get(conn, _key(node, "pveproxy-ssl"))
    entries = [
        certificate_info(ROOT_CA_FILE, ca["cert"]),
        certificate_info(_node_file(node, "pve-ssl"), ssl["cert"]),
    ]
    if custom is not None:
        entries.append(certificate_info(_node_file(node, "pveproxy-ssl"), custom["cert"]))
    return entries


def _from_first_pem(text: str) -> str:
    """PVE drops any text before the first PEM block."""
    start = text.find("-----BEGIN")
    return text[start:] if start >= 0 else text


def _public_bytes(key) -> bytes:
    return key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


async def upload_custom(rt, node: str, params: dict) -> dict:
    certs = _from_first_pem(str(params["certificates"]))
    try:
        chain = x509.load_pem_x509_certificates(certs.encode())
    except ValueError:
        raise ParameterError(
            {"certificates": "value does not look like a valid PEM certificate chain"}
        ) from None
    key_text = params.get("key")
    key = None
    if key_text:
        key_text = _from_first_pem(str(key_text))
        try:
            key = serialization.load_pem_private_key(key_text.encode(), password=None)
        except (ValueError, TypeError):
            raise ParameterError(
                {"key": "value does not look like a valid PEM private key"}
            ) from None
    async with rt.pool.acquire() as conn, conn.transaction():
        await _ensure_node_certs(conn, node)
        existing = await settings_repo.get(conn, _key(node, "pveproxy-ssl"))
        if key is None and existing is None:
            raise ParameterError(
                {"key": "Attempted to upload custom certificate without (existing) key."}
            )
        if existing is not None and not params.get("force"):
            raise PveError("Custom certificate file exists but force flag is not set.")
        key_pem = key_text if key is not None else existing["key"]
        stored_key = serialization.load_pem_private_key(key_pem.encode(), password=None)
        # pveproxy refuses to serve a certificate its key does not belong to.
        if _public_bytes(stored_key.public_key()) != _public_bytes(chain[0].public_key()):
            raise PveError("Certificate and private key do not match.")
        await settings_repo.put(conn, _key(node, "pveproxy-ssl"), {"cert": certs, "key": key_pem})
    return certificate_info(_node_file(node, "pveproxy-ssl"), certs)


async def delete_custom(rt, node: str) -> None:
    async with rt.pool.acquire() as conn, conn.transaction():
        await require_node(conn, node)
        await section_configs.lock_file(conn, "certificates")
        await settings_repo.delete(conn, _key(node, "pveproxy-ssl"))


async def custom_certificate(conn, node: str) -> str | None:
    """The PEM of the node's uploaded ``pveproxy-ssl.pem``, if any."""
    stored = await settings_repo.get(conn, _key(node, "pveproxy-ssl"))
    return stored["cert"] if stored else None
