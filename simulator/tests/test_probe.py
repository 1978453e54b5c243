"""The probe: every declared method of PVE 6.4, 7.4, 8.4 and 9.2, called over HTTP.

For each major a simulator serving that contract runs on a fresh seeded
database; every (method, path) is called by root with contract-valid input
generated from its parameter schemas, in an order that creates parents before
children and deletes them last.  The probe fails on any 501, any other error
status, a task that does not end OK, or a response that does not validate
against the method's ``returns`` schema.

Narrow it while working:

    PROXMOX_SIMULATOR_PROBE_MAJORS=8.4.5 PROXMOX_SIMULATOR_PROBE_PREFIX=/cluster/ha \\
        uv run pytest simulator/tests/test_probe.py -p no:django -q
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field

import asyncpg
import httpx
import pytest
from simtest_support import ROOT_PASSWORD, create_database, drop_database, official_apidoc, run

from proxmox_simulator.api.handlers.dispatch import handling
from proxmox_simulator.api.validation import coerce
from proxmox_simulator.config import Settings
from proxmox_simulator.contracts import sources
from proxmox_simulator.contracts.model import Contract, Endpoint, Parameter
from proxmox_simulator.contracts.returns import field_set_errors
from proxmox_simulator.domain import resource_shapes as shapes

MAJORS = ("6.4-15", "7.4-16", "8.4.5", "9.2.12")
PREFIX = os.environ.get("PROXMOX_SIMULATOR_PROBE_PREFIX", "/")
SELECTED = [m for m in os.environ.get("PROXMOX_SIMULATOR_PROBE_MAJORS", "").split(",") if m]

# VMIDs of the guests the probe creates (QEMU and LXC), their clones, and the
# node a migration goes to; everything else comes from the parameter schemas.
PROBE_VMID = {"qemu": 990100, "lxc": 990200}
NEW_VMID = {"qemu": 990101, "lxc": 990201}
# Guests of the bulk actions: BULK_VMID on pve2, BULK_VMID + 1 on pve3 (migrateall).
BULK_VMID = 990300


# Answers that are right although they are not 200 or differ from the schema,
# each with the reason; matched by (major or None, method, path) and a message part.
EXPECTED = {
    # The seeded cluster exists: PVE refuses to create a second one, or to join
    # another one (its pre-worker checks).
    (None, "POST", "/cluster/config"): "already exists",
    (None, "POST", "/cluster/config/join"): "corosync.conf' already exists",
    # The probe's device name is no disk of the node, and the OSD ids it finds live on
    # other nodes (test_ceph_cluster.py creates and destroys an OSD on a real disk).
    (None, "POST", "/nodes/{node}/ceph/osd"): "unable to get device info for",
    (None, "DELETE", "/nodes/{node}/ceph/osd/{osdid}"): "does not belong to node",
    (None, "GET", "/nodes/{node}/ceph/osd/{osdid}/metadata"): "does not exists on host",
    (None, "GET", "/nodes/{node}/ceph/osd/{osdid}/lv-info"): "not found in 'ceph-volume lvm list'",
    # The probe's daemon id is no daemon of the cluster (test_ceph_daemons.py asks real ones).
    (None, "GET", "/nodes/{node}/ceph/cmd-safety"): "does not exist",
    # The probe reaches ``fs`` before ``mds``: without a metadata server PVE refuses the
    # file system (test_ceph_daemons.py creates an MDS first), so there is none to delete.
    (None, "POST", "/nodes/{node}/ceph/fs/{name}"): "no running Metadata Server (MDS) found!",
    (9, "DELETE", "/nodes/{node}/ceph/fs/{name}"): "no such cephfs",
    # 7.x keeps the old pools path beside the new one; both name the same pools, so
    # the second create of the probe's pool finds it, and the second delete misses it.
    (7, "POST", "/nodes/{node}/ceph/pools"): "already exists",
    (7, "DELETE", "/nodes/{node}/ceph/pools/{name}"): "does not exist",
    # 7.x and 8.x declare the per-daemon maps with one literal '{id}' property; PVE
    # keys them '<id>@<host>' (9.x declares additionalProperties).
    (7, "GET", "/cluster/ceph/metadata"): "data.mon.{id}: required property missing",
    (8, "GET", "/cluster/ceph/metadata"): "data.mon.{id}: required property missing",
    # Some majors' schema types a monitor's host as boolean; PVE answers the host name.
    (None, "GET", "/nodes/{node}/ceph/mon"): "host: str is not boolean",
    # root has no second factor to verify: PVE's old TFA API refuses the call then.
    (None, "POST", "/access/tfa"): "no u2f data available",
    # The appliance index comes from download.proxmox.com: a node without network
    # has none, so every template is unknown (test_iac_storage_transfer.py).
    (None, "POST", "/nodes/{node}/aplinfo"): "no such template",
    # The probe's form body has no file part for pveproxy to store; real multipart
    # uploads are in test_iac_storage_transfer.py.
    (None, "POST", "/nodes/{node}/storage/{storage}/upload"): "missing temporary file name",
    # Single-file restore reads PBS snapshots only; the probe's storage is a directory
    # (test_storage_restore.py backs up to a PBS storage and browses the snapshot).
    (None, "GET", "/nodes/{node}/storage/{storage}/file-restore/list"): "Only PBS storages",
    (None, "GET", "/nodes/{node}/storage/{storage}/file-restore/download"): "Only PBS storages",
    # The probe names a whole volume ID where PVE prefixes the storage to a volume name,
    # which PVE does not parse either (test_storage_restore.py reads uploaded OVA/OVF files).
    (None, "GET", "/nodes/{node}/storage/{storage}/import-metadata"): "unable to parse",
    # OCI registries: the probe's reference is on Docker Hub, beyond loopback
    # (test_storage_restore.py runs a registry on 127.0.0.1).
    (None, "GET", "/nodes/{node}/query-oci-repo-tags"): "pinging container registry docker.io",
    (None, "POST", "/nodes/{node}/storage/{storage}/oci-registry-pull"): "skopeo copy docker://",
    # ACME needs the CA's servers, which the simulator never contacts: no account can be
    # registered, so none exists to read, update or deactivate, the directory's
    # metadata is out of reach, and certificate orders stop where PVE's would
    # (test_node_certificates.py).
    (None, "POST", "/cluster/acme/account"): "the simulator never contacts an ACME CA",
    (None, "GET", "/cluster/acme/account/{name}"): "does not exist",
    (None, "PUT", "/cluster/acme/account/{name}"): "does not exist",
    (None, "DELETE", "/cluster/acme/account/{name}"): "does not exist",
    (None, "GET", "/cluster/acme/meta"): "the simulator never contacts an ACME CA",
    (None, "GET", "/cluster/acme/tos"): "the simulator never contacts an ACME CA",
    (None, "POST", "/nodes/{node}/certificates/acme/certificate"): "ACME domain list",
    (None, "PUT", "/nodes/{node}/certificates/acme/certificate"): "certificate found",
    (None, "DELETE", "/nodes/{node}/certificates/acme/certificate"): "ACME settings",
    # A realm sync and a realm-sync job need a scope (and a job its realm), which the
    # schemas declare optional and PVE requires (from the request or the realm's
    # sync-defaults-options); without a job the probe's reads, update and delete
    # find none (test_realm_sync.py creates one).
    (None, "POST", "/access/domains/{realm}/sync"): "not defined in realm default sync options",
    (None, "POST", "/cluster/jobs/realm-sync/{id}"): "property is missing and it is not optional",
    (None, "GET", "/cluster/jobs/realm-sync/{id}"): "No such job 'probe1'",
    (None, "PUT", "/cluster/jobs/realm-sync/{id}"): "no such realm-sync job",
    (None, "DELETE", "/cluster/jobs/realm-sync/{id}"): "No such job 'probe1'",
    # The probe's VNC ticket is no console's: PVE's verification refuses it
    # (test_consoles.py verifies a real one).
    (None, "POST", "/access/vncticket"): "authentication failure",
    # The probe's realm is an AD realm, not OpenID, and its login state was never
    # issued (test_openid.py signs in through a provider on loopback).
    (None, "POST", "/access/openid/auth-url"): "wrong realm type (ad != openid)",
    (None, "POST", "/access/openid/login"): "authentication failure",
    # No storage points at the probe's server name, so it does not resolve (and no backup
    # server listens there); test_storage_scan.py scans servers storages use.
    (None, "GET", "/nodes/{node}/scan/nfs"): "unable to resolve address for server 'probe'",
    (None, "GET", "/nodes/{node}/scan/cifs"): "unable to resolve address for server 'probe'",
    (None, "GET", "/nodes/{node}/scan/glusterfs"): "unable to resolve address for server 'probe'",
    (None, "GET", "/nodes/{node}/scan/iscsi"): "unable to resolve portal address 'probe'",
    # The probe VM is HA-managed, which a remote migration refuses; the (running) probe
    # container migrates online towards an address nothing answers at
    # (test_remote_migration.py migrates to the simulator itself).
    (None, "POST", "/nodes/{node}/qemu/{vmid}/remote_migrate"): (
        "cannot remote-migrate VM that is configured for HA"
    ),
    (None, "POST", "/nodes/{node}/lxc/{vmid}/remote_migrate"): (
        "Can't connect to 192.0.2.10:8006 (Connection refused)"
    ),
    (None, "GET", "/nodes/{node}/scan/pbs"): "Can't connect to probe:8007",
    # PVE asks the URL's server with a HEAD request; the probe's loopback URL (the
    # simulator's health check) answers GET only (test_node_admin.py serves files).
    (None, "GET", "/nodes/{node}/query-url-metadata"): "invalid server response: '405",
    # 6.4's viewer declares these sizes as strings; PVE 6.4 answers integers.
    (6, "GET", "/cluster/resources"): "int is not string",
}


def _expected(major: int, endpoint: Endpoint, failure: str) -> bool:
    for key in ((major, endpoint.method, endpoint.path), (None, endpoint.method, endpoint.path)):
        if key in EXPECTED and EXPECTED[key] in failure:
            return True
    return False


def _contract(version: str) -> Contract:
    if version.startswith("9."):
        return sources.parse_artifact(sources.read_fakepve(), version).contract
    return sources.parse_artifact(sources.read_file(official_apidoc(version)), version).contract


# -- contract-valid input -----------------------------------------------------------

_FORMAT_VALUES = {
    "pve-node": "pve1",
    "pve-storage-id": "local",
    "pve-userid": "probe@pve",
    "pve-groupid": "probegroup",
    "pve-roleid": "ProbeRole",
    "pve-realm": "probe",
    "pve-tokenid": "probetoken",
    "pve-poolid": "probepool",
    "pve-configid": "probe1",
    "pve-sdn-zone-id": "probez",
    "pve-sdn-vnet-id": "probev",
    "pve-sdn-controller-id": "probec",
    "pve-ha-resource-or-vm-id": "vm:990100",
    "pve-ha-resource-id": "vm:990100",
    "pve-ha-resource-id-list": "vm:990100",
    "pve-ha-group-node-list": "pve1",
    "pve-ha-node-list": "pve1",
    "pve-vmid": "990100",
    "pve-vmid-list": "990100",
    "ipv4": "192.0.2.10",
    "ipv6": "2001:db8::10",
    "ip": "192.0.2.10",
    "CIDR": "192.0.2.0/24",
    "CIDRv4": "192.0.2.0/24",
    "ipv4mask": "255.255.255.0",
    "mac-addr": "BC:24:11:00:00:01",
    "email": "probe@example.com",
    "email-opt": "probe@example.com",
    "dns-name": "probe.example.com",
    "pve-iface": "vmbr9",
    "pve-bridge-id": "vmbr0",
    "pve-volume-id": "local:iso/debian-12.9.0-amd64-netinst.iso",
    "pve-volume-id-or-qm-path": "local:iso/debian-12.9.0-amd64-netinst.iso",
    "pve-calendar-event": "daily",
    "pve-fw-addr-spec": "192.0.2.10",
    "pve-fw-dport-spec": "22",
    "pve-fw-sport-spec": "22",
    "pve-fw-protocol-spec": "tcp",
    "pve-priv-list": "VM.Audit",
    "pve-tag-list": "probe",
    "urlencoded": "probe",
    "disk-size": "1G",
}
_NAME_VALUES = {
    "node": "pve1",
    "target": "pve2",
    "storage": "local",
    "volume": "local:iso/debian-12.9.0-amd64-netinst.iso",
    "userid": "probe@pve",
    "groupid": "probegroup",
    "roleid": "ProbeRole",
    "tokenid": "probetoken",
    "poolid": "probepool",
    "realm": "probe",
    "snapname": "probesnap",
    "iface": "vmbr0",
    "disk": "scsi0",
    "username": "root@pam",
    "type": None,  # from its enum
    "password": ROOT_PASSWORD,
    "ostemplate": "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",
    "cidr": "192.0.2.0/24",
    "sid": "vm:990100",
    "service": "pveproxy",
    "roles": "PVEAuditor",
    # Values PVE checks beyond their schema (a firewall action, a key name, a zone).
    "action": "ACCEPT",
    "key": "ret",
    "timezone": "Europe/Vienna",
    "ds": "cpu",
    "zone": "probez",
    "vnet": "probev",
}


# Tried in order for a string parameter with a ``pattern``: the first that matches.
_PATTERN_CANDIDATES = (
    "probe",
    "probe1",
    "990100-0",
    "+1G",
    "1G",
    "/dev/sda",
    "sda",
    "https://example.com/probe.iso",
    "docker.io/library/debian:12",
    "pve1c-0123456789",
    "OSD_DOWN",
    "02:00",
    "0000:00:02.0",
    ":".join(["AB"] * 32),
    "vm:990100",
    "0",
    "1",
    "a",
)


def _matching(pattern: str, candidates=None):
    from proxmox_simulator.api.validation import _compiled

    compiled = _compiled(pattern)
    if compiled is None:
        return "probe"
    if candidates is not None:
        return next((c for c in candidates if compiled.fullmatch(c)), None)
    return next((c for c in _PATTERN_CANDIDATES if compiled.fullmatch(c)), "probe")


def _property_string(fmt: dict) -> str:
    """The required keys of a property-string format, ``key=value`` joined."""
    parts = []
    for key, spec in sorted(fmt.items()):
        if not isinstance(spec, dict) or spec.get("optional"):
            continue
        value = _scalar(key, spec)
        parts.append(str(value) if spec.get("default_key") else f"{key}={value}")
    return ",".join(parts) or "probe"


def _scalar(name: str, spec: dict):
    kind = spec.get("type", "string")
    if spec.get("enum"):
        preferred = _NAME_VALUES.get(name)
        return preferred if preferred in spec["enum"] else spec["enum"][0]
    if kind == "boolean":
        return 0
    if kind in ("integer", "number"):
        low = spec.get("minimum")
        high = spec.get("maximum")
        value = 1 if low is None else low
        return value if high is None or value <= high else high
    fmt = spec.get("format")
    if isinstance(fmt, dict):
        return _property_string(fmt)
    preferred = _NAME_VALUES.get(name)
    if preferred is not None and not (
        spec.get("pattern") and _matching(spec["pattern"], [preferred]) is None
    ):
        return preferred
    if isinstance(fmt, str) and fmt in _FORMAT_VALUES:
        return _FORMAT_VALUES[fmt]
    if spec.get("pattern"):
        return _matching(spec["pattern"])
    return "probe"


# Values the probe learned from earlier answers: a real UPID, the keys the
# store assigned to created items ({item template: key}).
WORLD: dict = {"keys": {}}


# Path parameters that must differ from the generic value for one item template:
# node-wide power and disk work happens away from the probe guests' node (pve1),
# a new cluster member gets a fresh name, each disk tool its own name.
_SDN_VIEWS = ("content", "bridges", "ip-vrf")
_FABRIC_VIEWS = ("interfaces", "neighbors", "routes")
_PATH_VALUES = {
    ("/nodes/{node}/status", "node"): "pve3",
    ("/nodes/{node}/startall", "node"): "pve3",
    ("/nodes/{node}/stopall", "node"): "pve3",
    ("/nodes/{node}/migrateall", "node"): "pve3",
    # Not the probe guest's node: hibernating it would lock it for the methods after
    # (test_node_admin.py hibernates guests of its own).
    ("/nodes/{node}/suspendall", "node"): "pve3",
    # Not the node answering the API (pve1): PVE refuses to wake itself.
    ("/nodes/{node}/wakeonlan", "node"): "pve2",
    ("/nodes/{node}/disks/zfs", "node"): "pve2",
    ("/nodes/{node}/disks/zfs/{name}", "node"): "pve2",
    ("/nodes/{node}/disks/zfs/{name}", "name"): "probezfs",
    ("/nodes/{node}/disks/wipedisk", "node"): "pve2",
    ("/nodes/{node}/disks/initgpt", "node"): "pve2",
    ("/nodes/{node}/disks/directory/{name}", "name"): "probedir",
    ("/nodes/{node}/disks/lvm/{name}", "name"): "probevg",
    ("/nodes/{node}/disks/lvmthin/{name}", "name"): "probethin",
    ("/cluster/config/nodes/{node}", "node"): "pve9",
    # ``local`` holds no disk images.
    ("/nodes/{node}/storage/{storage}/content", "storage"): "local-lvm",
    # The node's one device that offers mediated devices (a Tesla T4).
    ("/nodes/{node}/hardware/pci/{pciid}/mdev", "pciid"): "0000:41:00.0",
    ("/nodes/{node}/hardware/pci/{pci-id-or-mapping}/mdev", "pci-id-or-mapping"): "0000:41:00.0",
    # The built-in sendmail target is the one a test can reach.
    ("/cluster/notifications/targets/{name}/test", "name"): "mail-to-root",
    # A node's SDN views show the applied config: the EVPN zone _BEFORE applies.
    **{(f"/nodes/{{node}}/sdn/zones/{{zone}}/{tail}", "zone"): "probeev" for tail in _SDN_VIEWS},
    ("/nodes/{node}/sdn/vnets/{vnet}/mac-vrf", "vnet"): "probeevv",
    # The sequence number the probe's prefix-list entry gets.
    ("/cluster/sdn/prefix-lists/{id}/entries/{url_seq}", "url_seq"): "5",
    # An incoming migration reserves a VMID no guest has.
    ("/nodes/{node}/qemu/{vmid}/mtunnel", "vmid"): 990150,
    ("/nodes/{node}/lxc/{vmid}/mtunnel", "vmid"): 990152,
    # A node's fabric views show the applied fabric _BEFORE makes.
    **{
        (f"/nodes/{{node}}/sdn/fabrics/{{fabric}}/{tail}", "fabric"): "probef"
        for tail in _FABRIC_VIEWS
    },
}


def value_for(param: Parameter, endpoint: Endpoint, *, body: bool):
    name = param.name
    kind = "lxc" if "/lxc" in endpoint.path else "qemu"
    if not body and (endpoint.path, name) in _PATH_VALUES:
        return _PATH_VALUES[(endpoint.path, name)]
    if name == "pid" and "pid" in WORLD:
        return WORLD["pid"]
    if name == "vmid":
        # Migration runs on the clone, so the probe guest stays on its node.
        if not body and endpoint.method == "POST" and endpoint.path.endswith("/migrate"):
            return NEW_VMID[kind]
        return PROBE_VMID[kind]
    if name == "newid":
        return NEW_VMID[kind]
    if name == "upid" and "upid" in WORLD:
        return WORLD["upid"]
    if not body:
        template = endpoint.path[: endpoint.path.index("{" + name + "}") + len(name) + 2]
        if template in WORLD["keys"]:
            return WORLD["keys"][template]
    spec = param.to_dict()
    if param.format is not None and not isinstance(param.format, (str, dict)):
        spec.pop("format")
    return _scalar(name, spec)


# -- plan -----------------------------------------------------------------------

_PHASE = {
    shapes.CREATE: 1,
    shapes.LIST: 2,
    shapes.READ: 2,
    shapes.CONFIG_READ: 2,
    shapes.UPDATE: 3,
    shapes.CONFIG_WRITE: 3,
    shapes.ACTION: 4,
    shapes.DELETE: 5,
    shapes.CONFIG_CLEAR: 5,
}


def _guest_destroy(endpoint: Endpoint) -> bool:
    return endpoint.method == "DELETE" and endpoint.path.endswith(("/qemu/{vmid}", "/lxc/{vmid}"))


# Power actions in an order each is valid in (the guests start running).
# (A snapshot rollback without vmstate runs before them and stops the guests.)
_POWER_ORDER = ("start", "suspend", "resume", "reboot", "reset", "shutdown", "stop")
# Run after every other method of the guest, just before it is destroyed.
_LAST_GUEST_ACTIONS = ("/template",)


# Creates whose items others reference (a vnet names its zone): made first.
_REFERENCED_FIRST = ("/cluster/sdn/zones", "/cluster/sdn/controllers", "/cluster/sdn/ipams")
# Reads of what an action makes (an exec's status, an archive's config): run with
# the actions; the path order puts them after the one they follow.
_READ_AFTER = {
    "/nodes/{node}/qemu/{vmid}/agent/exec-status": "/nodes/{node}/qemu/{vmid}/agent/exec",
    "/nodes/{node}/vzdump/extractconfig": "/nodes/{node}/vzdump",
}
# Actions whose order matters among themselves (9.x arms HA after disarming it).
_ACTION_RANK = {"/cluster/ha/status/disarm-ha": -2, "/cluster/ha/status/arm-ha": -1}
# Guest-agent power calls: after the other agent calls, before the power actions
# (the probe resumes or starts the guest between them, see _BEFORE).
_AGENT_POWER = ("suspend-ram", "suspend-hybrid", "suspend-disk", "shutdown")

# Deletes that free what other deletes need gone (a subnet with mapped IPs stays).
_DELETED_FIRST = {("DELETE", "/cluster/sdn/vnets/{vnet}/ips")}


def plan(contract: Contract) -> list[Endpoint]:
    def order(endpoint: Endpoint):
        shape = shapes.shape_of(contract, endpoint)
        phase = _PHASE[shape.role]
        depth = endpoint.path.count("/")
        tail = endpoint.path.rsplit("/", 1)[-1]
        rank = 0
        if endpoint.path in _READ_AFTER:
            after = contract.endpoint(_READ_AFTER[endpoint.path], "POST")
            phase = _PHASE[shapes.shape_of(contract, after).role]
        elif endpoint.path in _ACTION_RANK:
            rank = _ACTION_RANK[endpoint.path]
        if _guest_creation(endpoint):
            phase = 0
        elif "/agent/" in endpoint.path and tail in _AGENT_POWER:
            phase, rank = 4.4, _AGENT_POWER.index(tail)
        elif phase == 1 and endpoint.method == "POST" and endpoint.path in _REFERENCED_FIRST:
            phase = 0.5
        elif "/status/" in endpoint.path and tail in _POWER_ORDER and phase == 4:
            phase, rank = 4.5, _POWER_ORDER.index(tail)
        elif endpoint.path.endswith(_LAST_GUEST_ACTIONS):
            phase = 5.5
        if _guest_destroy(endpoint):
            phase = 6
        elif (endpoint.method, endpoint.path) in _DELETED_FIRST:
            phase = 4.9
        return (phase, rank, -depth if phase >= 5 else depth, endpoint.path)

    chosen = [e for e in contract.endpoints if e.path.startswith(PREFIX) or _setup(e)]
    return sorted(chosen, key=order)


def _guest_creation(endpoint: Endpoint) -> bool:
    return endpoint.method == "POST" and endpoint.path in (
        "/nodes/{node}/qemu",
        "/nodes/{node}/lxc",
    )


def _setup(endpoint: Endpoint) -> bool:
    """Methods the probe needs even when narrowed to a prefix: parents of the rest."""
    return _guest_creation(endpoint)


@dataclass
class Outcome:
    failures: list[str] = field(default_factory=list)
    failed: dict[tuple[str, str], str] = field(default_factory=dict)
    called: set[tuple[str, str]] = field(default_factory=set)
    calls: int = 0

    def fail(self, endpoint: Endpoint, message: str) -> None:
        self.failures.append(message)
        self.failed.setdefault((endpoint.method, endpoint.path), message)


def _url(endpoint: Endpoint) -> str:
    def fill(match: re.Match) -> str:
        name = match.group(1)
        param = next((p for p in endpoint.parameters if p.name == name), Parameter(name))
        return str(value_for(param, endpoint, body=False))

    return re.sub(r"\{([^}]+)\}", fill, endpoint.path)


# The probe guests: running, QEMU with its agent, LXC on a rootdir storage.
_GUEST_EXTRAS = {
    "/nodes/{node}/qemu": {"agent": "1", "start": 1, "scsi0": "local-lvm:1"},
    "/nodes/{node}/lxc": {"rootfs": "local-lvm:1", "start": 1},
}


def _probe_certificate() -> dict:
    """A self-signed certificate and its key for the custom certificate upload."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "probe.example.test")])
    start = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(start)
        .not_valid_after(start + datetime.timedelta(days=30))
        .sign(key, hashes.SHA256())
    )
    return {
        "certificates": cert.public_bytes(serialization.Encoding.PEM).decode(),
        "key": key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode(),
    }


# Methods whose required parameters do not say everything PVE requires.
_EXTRAS = {
    ("PUT", "/access/acl"): {"users": "probe@pve"},
    # A standard repository's handle; a batch of one read.
    ("PUT", "/nodes/{node}/apt/repositories"): {"handle": "no-subscription"},
    ("POST", "/nodes/{node}/execute"): {"commands": '[{"method": "GET", "path": "version"}]'},
    # A TOTP entry needs a live code from an authenticator; recovery keys need nothing.
    ("POST", "/access/tfa/{userid}"): {"type": "recovery"},
    # A storage's RRD holds only "total" and "used".
    ("GET", "/nodes/{node}/storage/{storage}/rrd"): {"ds": "used"},
    ("POST", "/nodes/{node}/qemu/{vmid}/agent/exec"): {"command": "true"},
    # ``command`` would be its enum's first value, fsfreeze-freeze.
    ("POST", "/nodes/{node}/qemu/{vmid}/agent"): {"command": "ping"},
    ("GET", "/nodes/{node}/qemu/{vmid}/agent/file-read"): {"file": "/etc/hostname"},
    ("POST", "/nodes/{node}/qemu/{vmid}/agent/file-write"): {"file": "/tmp/probe"},
    ("POST", "/nodes/{node}/qemu/{vmid}/agent/set-user-password"): {"username": "root"},
    # Only the probe guest: every guest of the node does not fit on ``local``.
    ("POST", "/nodes/{node}/vzdump"): {"vmid": "990100", "storage": "local"},
    # Disks move to a zfspool storage (see _BEFORE), which replication needs.
    ("POST", "/nodes/{node}/qemu/{vmid}/move_disk"): {"storage": "probezfs", "delete": 1},
    ("POST", "/nodes/{node}/lxc/{vmid}/move_volume"): {
        "volume": "rootfs",
        "storage": "probezfs",
        "delete": 1,
    },
    ("DELETE", "/pools"): {"poolid": "probepool2"},
    ("POST", "/nodes/{node}/storage/{storage}/content"): {
        # Not the probe guest's VMID: replication would have to copy it too.
        "vmid": 990109,
        "filename": "vm-990109-disk-0",
        "size": "1G",
    },
    ("POST", "/nodes/{node}/storage/{storage}/content/{volume}"): {"target": "iso/probe-copy.iso"},
    ("POST", "/nodes/{node}/network"): {"iface": "vmbr9", "type": "bridge"},
    ("GET", "/nodes/{node}/apt/changelog"): {"name": "pve-manager"},
    # The three empty disks of each node: pve1 for these, pve2 (_PATH_VALUES) for the rest.
    ("POST", "/nodes/{node}/disks/directory"): {"device": "/dev/sdb", "name": "probedir"},
    ("POST", "/nodes/{node}/disks/lvm"): {"device": "/dev/sdc", "name": "probevg"},
    ("POST", "/nodes/{node}/disks/lvmthin"): {"device": "/dev/sdd", "name": "probethin"},
    ("POST", "/nodes/{node}/disks/zfs"): {"devices": "/dev/sdb", "name": "probezfs"},
    ("PUT", "/nodes/{node}/disks/wipedisk"): {"disk": "/dev/sdc"},
    ("POST", "/nodes/{node}/disks/initgpt"): {"disk": "/dev/sdd"},
    ("POST", "/cluster/config/nodes/{node}"): {"link0": "192.0.2.99"},
    ("POST", "/cluster/ha/resources/{sid}/migrate"): {"node": "pve2"},
    ("POST", "/cluster/ha/resources/{sid}/relocate"): {"node": "pve1"},
    **{
        (method, path): {"map": value}
        for kind, value in (
            ("pci", "node=pve1,path=0000:00:02.0"),
            ("usb", "node=pve1,id=1234:5678"),
            ("dir", "node=pve1,path=/srv/probe"),
        )
        for method, path in (
            ("POST", f"/cluster/mapping/{kind}"),
            ("PUT", f"/cluster/mapping/{kind}/{{id}}"),
        )
    },
    ("POST", "/cluster/notifications/endpoints/sendmail"): {
        "name": "probesendmail",
        "mailto": "probe@example.com",
    },
    ("POST", "/cluster/notifications/endpoints/smtp"): {
        "name": "probesmtp",
        "mailto": "probe@example.com",
        "server": "smtp.example.com",
        "from-address": "probe@example.com",
    },
    ("POST", "/cluster/notifications/endpoints/webhook"): {
        "name": "probewebhook",
        "url": "https://example.com/hook",
    },
    ("POST", "/cluster/backup"): {"all": 1},
    # A fresh storage ID (the seeded ones exist) of a type that needs only a path.
    ("POST", "/storage"): {"storage": "probestore", "type": "dir", "path": "/srv/probe"},
    ("POST", "/cluster/sdn/zones"): {"type": "simple"},
    ("POST", "/cluster/sdn/ipams"): {"type": "pve"},
    ("POST", "/cluster/sdn/controllers"): {"type": "evpn", "asn": 65000, "peers": "192.0.2.1"},
    ("POST", "/cluster/acme/plugins"): {"api": "cf"},
    # Notification endpoints and matchers share one name space.
    **{
        ("POST", f"/cluster/notifications/endpoints/{kind}"): {"name": f"probe{kind}"}
        for kind in ("gotify",)
    },
    ("POST", "/cluster/sdn/vnets/{vnet}/subnets"): {"subnet": "192.0.2.0/24"},
    # The probe's own creates are pending changes when it takes the lock.
    ("POST", "/cluster/sdn/lock"): {"allow-pending": 1},
    ("POST", "/cluster/sdn/prefix-lists/{id}/entries"): {"prefix": "192.0.2.0/24"},
    # An OpenFabric fabric needs a prefix, and its nodes an address in it.
    ("POST", "/cluster/sdn/fabrics/fabric"): {"ip_prefix": "198.51.100.0/24"},
    ("POST", "/cluster/sdn/fabrics/node/{fabric_id}"): {"ip": "198.51.100.1"},
    ("DELETE", "/nodes/{node}/storage/{storage}/prunebackups"): {"prune-backups": "keep-last=1"},
    # A certificate with its key (PVE checks both); force replaces an earlier upload.
    ("POST", "/nodes/{node}/certificates/custom"): {**_probe_certificate(), "force": 1},
    # Bulk actions act on their own guests (every guest would include ones other
    # methods need, and skip the ones in the wrong state with a warning).
    **{
        ("POST", f"/cluster/bulk-action/guest/{action}"): {"vms": [BULK_VMID]}
        for action in ("start", "shutdown", "suspend")
    },
    ("POST", "/cluster/bulk-action/guest/migrate"): {"vms": [BULK_VMID], "target": "pve1"},
    ("POST", "/nodes/{node}/migrateall"): {
        "vms": str(BULK_VMID + 1),
        "target": "pve1",
        "maxworkers": 1,
    },
}


# Context a method needs that no other probed method leaves behind, made through
# the API right before it (tasks waited for): (method, path, body) calls.
_QEMU, _LXC = "/nodes/pve1/qemu/990100", "/nodes/pve1/lxc/990200"
_ZFSPOOL = ("POST", "/storage", {"storage": "probezfs", "type": "zfspool", "pool": "rpool/probe"})
# An applied EVPN zone with a vnet (creates a second time are refused, harmlessly).
_SDN_APPLIED = [
    (
        "POST",
        "/cluster/sdn/controllers",
        _EXTRAS[("POST", "/cluster/sdn/controllers")] | {"controller": "probeevc"},
    ),
    ("POST", "/cluster/sdn/zones", {"zone": "probeev", "type": "evpn", "controller": "probeevc"}),
    ("POST", "/cluster/sdn/vnets", {"vnet": "probeevv", "zone": "probeev", "tag": 4000}),
    ("PUT", "/cluster/sdn", {}),
]
# An applied OpenFabric fabric of two nodes wired on ens19.
_FABRIC_APPLIED = [
    (
        "POST",
        "/cluster/sdn/fabrics/fabric",
        {"id": "probef", "protocol": "openfabric", "ip_prefix": "203.0.113.0/24"},
    ),
    *(
        (
            "POST",
            "/cluster/sdn/fabrics/node/probef",
            {"node_id": node, "protocol": "openfabric", "ip": ip, "interfaces": "name=ens19"},
        )
        for node, ip in (("pve1", "203.0.113.1"), ("pve2", "203.0.113.2"))
    ),
    ("PUT", "/cluster/sdn", {}),
]
_BEFORE = {
    ("DELETE", "/pools"): [("POST", "/pools", {"poolid": "probepool2"})],
    **{
        ("GET", f"/nodes/{{node}}/sdn/fabrics/{{fabric}}/{tail}"): _FABRIC_APPLIED
        for tail in _FABRIC_VIEWS
    },
    # Wake-on-LAN needs the node's MAC address in its config.
    ("POST", "/nodes/{node}/wakeonlan"): [
        ("PUT", "/nodes/pve2/config", {"wakeonlan": "aa:bb:cc:00:11:22"})
    ],
    **{("GET", f"/nodes/{{node}}/sdn/zones/{{zone}}/{tail}"): _SDN_APPLIED for tail in _SDN_VIEWS},
    ("GET", "/nodes/{node}/sdn/vnets/{vnet}/mac-vrf"): _SDN_APPLIED,
    # The update before it mapped the probe's address: PVE refuses to map it twice.
    ("POST", "/cluster/sdn/vnets/{vnet}/ips"): [
        ("DELETE", "/cluster/sdn/vnets/probev/ips", {"zone": "probez", "ip": "192.0.2.10"})
    ],
    ("POST", "/nodes/{node}/lxc/{vmid}/move_volume"): [
        _ZFSPOOL,
        ("POST", f"{_LXC}/status/stop", {}),  # PVE moves volumes of stopped containers only
    ],
    ("POST", "/nodes/{node}/qemu/{vmid}/move_disk"): [_ZFSPOOL],
    # The snapshot rollback before these stopped the guest.
    ("POST", "/nodes/{node}/qemu/{vmid}/agent/suspend-ram"): [
        ("POST", f"{_QEMU}/status/start", {})
    ],
    ("POST", "/nodes/{node}/qemu/{vmid}/agent/suspend-hybrid"): [
        ("POST", f"{_QEMU}/status/resume", {})
    ],
    ("POST", "/nodes/{node}/qemu/{vmid}/agent/suspend-disk"): [
        ("POST", f"{_QEMU}/status/resume", {})
    ],
    ("POST", "/nodes/{node}/qemu/{vmid}/agent/shutdown"): [("POST", f"{_QEMU}/status/start", {})],
}
# The bulk guest: created where missing (an error answer is fine), then put into the
# state the action changes; migrated back after the bulk migration.
_BULK = "/nodes/pve2/qemu/990300"
_BULK_GUEST = ("POST", "/nodes/pve2/qemu", {"vmid": 990300, "scsi0": "local-lvm:1"})
_BEFORE.update(
    {
        ("POST", "/cluster/bulk-action/guest/start"): [
            _BULK_GUEST,
            ("POST", f"{_BULK}/status/stop", {}),
        ],
        **{
            ("POST", f"/cluster/bulk-action/guest/{action}"): [
                _BULK_GUEST,
                ("POST", f"{_BULK}/status/stop", {}),
                ("POST", f"{_BULK}/status/start", {}),
            ]
            for action in ("shutdown", "suspend")
        },
        ("POST", "/cluster/bulk-action/guest/migrate"): [
            _BULK_GUEST,
            ("POST", f"{_BULK}/status/stop", {}),
        ],
        ("POST", "/nodes/{node}/migrateall"): [
            ("POST", "/nodes/pve3/qemu", {"vmid": 990301, "scsi0": "local-lvm:1"})
        ],
    }
)
_AFTER = {
    ("POST", "/cluster/bulk-action/guest/migrate"): [
        ("POST", "/nodes/pve1/qemu/990300/migrate", {"target": "pve2"})
    ],
    # The global SDN lock would refuse every later SDN write of the probe.
    ("POST", "/cluster/sdn/lock"): [("DELETE", "/cluster/sdn/lock", {"force": 1})],
    ("POST", "/nodes/{node}/lxc/{vmid}/move_volume"): [("POST", f"{_LXC}/status/start", {})],
}
# Methods after which the probe waits for every node's running tasks (the HA
# manager migrates in tasks of its own, not returned to the caller).
_SETTLE = {
    ("POST", "/cluster/ha/resources/{sid}/migrate"),
    ("POST", "/cluster/ha/resources/{sid}/relocate"),
}
# pve3 reboots: its stopall and startall run as tasks of their own.
_SETTLE_NODES = ("pve1", "pve2", "pve3")


def _run_calls(caller: Caller, calls) -> None:
    for method, url, body in calls:
        answer = caller.call(method, url, body)
        data = answer.json().get("data") if answer.status_code == 200 else None
        if isinstance(data, str) and data.startswith("UPID:"):
            caller.wait(data)


def _settle(caller: Caller) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        active = [
            t
            for node in _SETTLE_NODES
            for t in caller.call("GET", f"/nodes/{node}/tasks", {"source": "active"}).json()["data"]
            or []
        ]
        if not active:
            return
        time.sleep(0.02)


def _learn(caller: Caller, endpoint: Endpoint, data) -> None:
    """Values later methods address: an exec's PID, the archive vzdump wrote."""
    if isinstance(data, dict) and isinstance(data.get("pid"), int):
        WORLD["pid"] = data["pid"]
    if endpoint.path == "/nodes/{node}/vzdump":
        archives = caller.call(
            "GET", "/nodes/pve1/storage/local/content", {"content": "backup", "vmid": 990100}
        ).json()["data"]
        if archives:
            WORLD["backup"] = archives[-1]["volid"]


def _console_ticket(caller: Caller, endpoint: Endpoint) -> dict:
    """A websocket accepts only a ticket its own proxy issued seconds ago (PVE: under 40 s)."""
    proxy = "/vncproxy" if "{vmid}" in endpoint.path else "/vncshell"
    opener = Endpoint(endpoint.path.removesuffix("/vncwebsocket") + proxy, "POST")
    console = caller.call("POST", _url(opener), {}).json()["data"]
    return {"vncticket": console["ticket"], "port": console["port"]}


def _tunnel_ticket(caller: Caller, kind: str) -> dict:
    """A tunnel websocket accepts only the ticket and socket an ``mtunnel`` call issued."""
    vmid = 990151 if kind == "qemu" else 990153
    tunnel = caller.call("POST", f"/nodes/pve1/{kind}/{vmid}/mtunnel", {}).json()["data"]
    return {"socket": tunnel["socket"], "ticket": tunnel["ticket"]}


def _body(endpoint: Endpoint) -> dict:
    path_params = set(endpoint.path_params)
    body = {
        p.name: value_for(p, endpoint, body=True)
        for p in endpoint.parameters
        if not p.optional and not p.indexed_stem and p.name not in path_params
    }
    if endpoint.method == "POST":
        body.update(_GUEST_EXTRAS.get(endpoint.path, {}))
    body.update(_EXTRAS.get((endpoint.method, endpoint.path), {}))
    variants = endpoint.variants
    if variants is not None and variants.type_property in body:
        # What the chosen type (HA rule type, ...) requires on top of the common set.
        for param in variants.for_type(str(body[variants.type_property])) or ():
            if not param.optional and param.name not in body:
                body[param.name] = value_for(param, endpoint, body=True)
    return body


def _loopback_download(caller) -> dict:
    origin = str(caller.client.base_url).split("/api2/", 1)[0]
    return {
        "url": f"{origin}/healthz",
        "content": "iso",
        "filename": "probe-download.iso",
        "verify-certificates": 0,
    }


class Caller:
    def __init__(self, client: httpx.Client):
        self.client = client
        login = client.post(
            "/access/ticket", data={"username": "root@pam", "password": ROOT_PASSWORD}
        )
        data = login.json()["data"]
        self.headers = {
            "Cookie": f"PVEAuthCookie={data['ticket']}",
            "CSRFPreventionToken": data["CSRFPreventionToken"],
        }

    def call(self, method: str, url: str, body: dict) -> httpx.Response:
        if method in ("GET", "DELETE"):
            return self.client.request(method, url, params=body, headers=self.headers)
        return self.client.request(method, url, data=body, headers=self.headers)

    def wait(self, upid: str, timeout: float = 30) -> dict:
        node = upid.split(":")[1]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.client.get(f"/nodes/{node}/tasks/{upid}/status", headers=self.headers)
            data = status.json()["data"]
            if data and data["status"] == "stopped":
                return data
            time.sleep(0.01)
        return {"exitstatus": "timeout"}


def _written_back(contract: Contract, endpoint: Endpoint, data, written: dict) -> list[str]:
    """Fields a store create wrote that its item read leaves out or changes."""
    if handling(contract, endpoint) != "resource-store" or not isinstance(data, dict):
        return []
    shape = shapes.shape_of(contract, endpoint)
    if shape.role != shapes.READ or shape.collection not in written:
        return []
    declared = endpoint.returns.get("properties")
    closed = endpoint.returns.get("additionalProperties") in (0, "0", False)
    lost = []
    for name, value in written[shape.collection].items():
        if closed and name not in (declared or {}):
            continue
        got = data.get(name)
        if isinstance(got, list) and str(value) in map(str, got):
            continue
        if name not in data or str(got) != str(value):
            lost.append(f"{name}={value!r} read back as {data.get(name)!r}")
    return lost


def probe(caller: Caller, contract: Contract, database_url: str) -> Outcome:
    outcome = Outcome()
    written: dict[str, dict] = {}
    for endpoint in plan(contract):
        shape = shapes.shape_of(contract, endpoint)
        if shape.role == shapes.CREATE:
            response = _create(caller, contract, endpoint, database_url)
            body = _body(endpoint)
            if response.status_code == 200 and shape.key_param:
                written[shape.collection] = {
                    k: v
                    for k, v in body.items()
                    if k != shape.key_param and k not in shape.scope_params
                }
        else:
            _run_calls(caller, _BEFORE.get((endpoint.method, endpoint.path), []))
            body = _body(endpoint)
            if endpoint.path == "/nodes/{node}/vzdump/extractconfig" and "backup" in WORLD:
                body["volume"] = WORLD["backup"]
            if endpoint.path.endswith("/vncwebsocket"):
                body.update(_console_ticket(caller, endpoint))
            if endpoint.path.endswith("/{vmid}/mtunnelwebsocket"):
                body.update(_tunnel_ticket(caller, endpoint.path.split("/")[3]))
            if endpoint.path.endswith("/{vmid}/remote_migrate"):
                body["target-endpoint"] = "host=192.0.2.10,apitoken=PVEAPIToken=root@pam!p=s"
                body["online"] = 1
            if endpoint.path == "/nodes/{node}/apt/repositories" and endpoint.method == "POST":
                # A repository the node has: a file's path and index from the listing.
                listed = caller.call("GET", _url(endpoint), {}).json()["data"]
                body.update(path=listed["files"][0]["path"], index=0, digest=listed["digest"])
            if endpoint.path.endswith("/query-url-metadata"):
                loopback = _loopback_download(caller)
                body.update({k: loopback[k] for k in ("url", "verify-certificates")})
            if endpoint.path.endswith("/download-url"):
                # The simulator fetches loopback URLs only: its own health check.
                body.update(_loopback_download(caller))
            response = caller.call(endpoint.method, _url(endpoint), body)
        outcome.calls += 1
        outcome.called.add((endpoint.method, endpoint.path))
        try:
            _check(caller, contract, endpoint, response, written, outcome)
        finally:
            if (endpoint.method, endpoint.path) in _SETTLE:
                _settle(caller)
            _run_calls(caller, _AFTER.get((endpoint.method, endpoint.path), []))
    return outcome


def _check(caller, contract, endpoint, response, written, outcome) -> None:
    """Judge one answer: status, read-back, ``returns``, and the task it started."""
    label = f"{endpoint.method} {endpoint.path}"
    if not _judge(contract.major, endpoint, response, outcome):
        return
    data = response.json().get("data")
    lost = _written_back(contract, endpoint, data, written)
    if lost:
        outcome.fail(endpoint, f"{label}: created item reads back wrong: {lost[:3]}")
    # Types and enums, then the field set: a key a closed object of this major's
    # ``returns`` does not declare (test_major_fields.py checks the reads under a hot-swap).
    errors = shapes.schema_errors(endpoint.returns, data) + [
        e for e in field_set_errors(endpoint.returns, data) if "undeclared" in e
    ]
    mismatch = f"{label}: returns mismatch {errors[:3]}"
    if errors and not _expected(contract.major, endpoint, mismatch):
        outcome.fail(endpoint, mismatch)
    if isinstance(data, str) and data.startswith("UPID:"):
        WORLD["upid"] = data
        exitstatus = caller.wait(data)["exitstatus"]
        ended = f"{label}: task ended {exitstatus!r}"
        if exitstatus != "OK" and not _expected(contract.major, endpoint, ended):
            outcome.fail(endpoint, ended)
    _learn(caller, endpoint, data)


def _judge(major: int, endpoint: Endpoint, response: httpx.Response, outcome: Outcome) -> bool:
    """Record what is wrong with a non-200 answer; True when the answer is to be checked."""
    label = f"{endpoint.method} {endpoint.path}"
    if response.status_code == 200:
        return True
    failure = f"{label}: {response.status_code} {response.reason_phrase} {response.text[:200]}"
    if not _expected(major, endpoint, failure):
        outcome.fail(endpoint, failure)
    return False


def _keys(caller: Caller, listing: Endpoint, key_param: str) -> list:
    answer = caller.call("GET", _url(listing), {}).json().get("data")
    if not isinstance(answer, list):
        return []
    return [item.get(key_param) for item in answer if isinstance(item, dict)]


def _store_keys(database_url: str, collection: str) -> list:
    async def fetch():
        conn = await asyncpg.connect(database_url)
        try:
            rows = await conn.fetch(
                "SELECT key FROM resource_store WHERE collection = $1 ORDER BY position",
                collection,
            )
            return [r["key"] for r in rows]
        finally:
            await conn.close()

    return run(fetch())


def _create(caller: Caller, contract: Contract, endpoint: Endpoint, database_url: str):
    """Call a create and remember the new item's key (PVE numbers rules, names TFA entries)."""
    shape = shapes.shape_of(contract, endpoint)
    listing = contract.endpoint(shape.collection.rsplit("/", 1)[0], "GET")
    before = set()
    if shape.key_param and listing is not None:
        before = set(map(str, _keys(caller, listing, shape.key_param)))
    response = caller.call(endpoint.method, _url(endpoint), _body(endpoint))
    answer = response.json().get("data") if response.status_code == 200 else None
    if isinstance(answer, str) and answer.startswith("UPID:"):
        caller.wait(answer)  # the item exists once its task completed
    if response.status_code == 200 and shape.key_param:
        after = _keys(caller, listing, shape.key_param) if listing is not None else []
        new = [k for k in after if k is not None and str(k) not in before]
        if not new:
            new = _store_keys(database_url, shape.collection)[-1:]
        # A key that its own path parameter would refuse (a generated token for
        # a userid) is not an addressable item.
        item = contract.endpoint(shape.collection, "GET") or endpoint
        param = next((p for p in item.parameters if p.name == shape.key_param), None)
        valid = [k for k in new if param is None or coerce(param, k)[1] is None and str(k)]
        if valid:
            WORLD["keys"][shape.collection] = valid[-1]
    return response


@pytest.mark.parametrize("version", [m for m in MAJORS if not SELECTED or m in SELECTED])
def test_every_declared_method_answers_semantically(version, tmp_path):
    from proxmox_simulator.cli import seed_database
    from proxmox_simulator.server import SimulatorServer

    contract = _contract(version)
    WORLD.clear()
    WORLD["keys"] = {}
    url = create_database(f"probe{version.split('.')[0].split('-')[0]}")
    try:
        settings = Settings(
            database_url=url,
            data_dir=tmp_path,
            contract="fakepve" if version.startswith("9.") else str(official_apidoc(version)),
            clock="instant",
            task_workers=2,
            lease_seconds=10,
            pool_max_size=4,
        )
        run(seed_database(settings, "small", 11, ROOT_PASSWORD))
        with (
            SimulatorServer(settings) as server,
            httpx.Client(base_url=server.base_url + "/api2/json", timeout=30) as client,
        ):
            outcome = probe(Caller(client), contract, url)
    finally:
        drop_database(url)
    assert outcome.calls > 0
    if PREFIX == "/":
        declared = {(e.method, e.path) for e in contract.endpoints}
        assert outcome.called == declared, sorted(declared - outcome.called)[:10]
    dump = os.environ.get("PROXMOX_SIMULATOR_PROBE_DUMP")
    if dump:
        with open(dump, "a") as out:
            for (method, path), message in sorted(outcome.failed.items()):
                out.write(json.dumps([contract.major, method, path, message]) + "\n")
    failures = [message for _key, message in sorted(outcome.failed.items())]
    assert failures == [], f"{len(failures)} of {outcome.calls} methods fail:\n" + "\n".join(
        failures
    )
