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
from proxmox_simulator.domain import resource_shapes as shapes

MAJORS = ("6.4-15", "7.4-16", "8.4.5", "9.2.12")
PREFIX = os.environ.get("PROXMOX_SIMULATOR_PROBE_PREFIX", "/")
SELECTED = [m for m in os.environ.get("PROXMOX_SIMULATOR_PROBE_MAJORS", "").split(",") if m]

# VMIDs of the guests the probe creates (QEMU and LXC), their clones, and the
# node a migration goes to; everything else comes from the parameter schemas.
PROBE_VMID = {"qemu": 990100, "lxc": 990200}
NEW_VMID = {"qemu": 990101, "lxc": 990201}


# Methods the probe currently fails on, by (major or None for all, method, path),
# each with its reason category.  A documented gap list, not a statement that these
# answers are right: the test fails when one of them starts passing (remove it) or
# when a method not listed fails.  PROXMOX_SIMULATOR_PROBE_DUMP=<file> writes the
# failures of a run as JSON lines to regenerate it.
UNIMPLEMENTED = "no handler answers it (501)"
NEEDS_CONTEXT = "needs a referenced object or state the probe does not set up"
INPUT = "generated input is not what PVE accepts"
TASK = "its task fails for the generated input"
SCHEMA = "answer does not validate against returns"
REFUSED = "handler refuses the generated input"
KNOWN_PROBE_GAPS: dict[tuple[int | None, str, str], str] = {
    (7, "DELETE", "/access/tfa/{userid}/{id}"): NEEDS_CONTEXT,
    (7, "GET", "/access/tfa/{userid}/{id}"): NEEDS_CONTEXT,
    (7, "PUT", "/access/tfa/{userid}/{id}"): NEEDS_CONTEXT,
    (None, "POST", "/cluster/config/join"): UNIMPLEMENTED,
    (None, "DELETE", "/cluster/config/nodes/{node}"): UNIMPLEMENTED,
    (None, "POST", "/cluster/config/nodes/{node}"): UNIMPLEMENTED,
    (None, "POST", "/cluster/ha/resources/{sid}/migrate"): NEEDS_CONTEXT,
    (None, "POST", "/cluster/ha/resources/{sid}/relocate"): NEEDS_CONTEXT,
    (9, "POST", "/cluster/ha/status/arm-ha"): REFUSED,
    (8, "POST", "/cluster/mapping/dir"): INPUT,
    (9, "POST", "/cluster/mapping/dir"): INPUT,
    (8, "DELETE", "/cluster/mapping/dir/{id}"): NEEDS_CONTEXT,
    (9, "DELETE", "/cluster/mapping/dir/{id}"): NEEDS_CONTEXT,
    (8, "GET", "/cluster/mapping/dir/{id}"): NEEDS_CONTEXT,
    (9, "GET", "/cluster/mapping/dir/{id}"): NEEDS_CONTEXT,
    (8, "PUT", "/cluster/mapping/dir/{id}"): NEEDS_CONTEXT,
    (9, "PUT", "/cluster/mapping/dir/{id}"): NEEDS_CONTEXT,
    (8, "POST", "/cluster/mapping/pci"): INPUT,
    (9, "POST", "/cluster/mapping/pci"): INPUT,
    (8, "DELETE", "/cluster/mapping/pci/{id}"): NEEDS_CONTEXT,
    (9, "DELETE", "/cluster/mapping/pci/{id}"): NEEDS_CONTEXT,
    (8, "GET", "/cluster/mapping/pci/{id}"): NEEDS_CONTEXT,
    (9, "GET", "/cluster/mapping/pci/{id}"): NEEDS_CONTEXT,
    (8, "PUT", "/cluster/mapping/pci/{id}"): NEEDS_CONTEXT,
    (9, "PUT", "/cluster/mapping/pci/{id}"): NEEDS_CONTEXT,
    (8, "POST", "/cluster/mapping/usb"): INPUT,
    (9, "POST", "/cluster/mapping/usb"): INPUT,
    (8, "DELETE", "/cluster/mapping/usb/{id}"): NEEDS_CONTEXT,
    (9, "DELETE", "/cluster/mapping/usb/{id}"): NEEDS_CONTEXT,
    (8, "GET", "/cluster/mapping/usb/{id}"): NEEDS_CONTEXT,
    (9, "GET", "/cluster/mapping/usb/{id}"): NEEDS_CONTEXT,
    (8, "PUT", "/cluster/mapping/usb/{id}"): NEEDS_CONTEXT,
    (9, "PUT", "/cluster/mapping/usb/{id}"): NEEDS_CONTEXT,
    (8, "POST", "/cluster/notifications/endpoints/sendmail"): INPUT,
    (9, "POST", "/cluster/notifications/endpoints/sendmail"): INPUT,
    (8, "DELETE", "/cluster/notifications/endpoints/sendmail/{name}"): NEEDS_CONTEXT,
    (9, "DELETE", "/cluster/notifications/endpoints/sendmail/{name}"): NEEDS_CONTEXT,
    (8, "GET", "/cluster/notifications/endpoints/sendmail/{name}"): NEEDS_CONTEXT,
    (9, "GET", "/cluster/notifications/endpoints/sendmail/{name}"): NEEDS_CONTEXT,
    (8, "PUT", "/cluster/notifications/endpoints/sendmail/{name}"): NEEDS_CONTEXT,
    (9, "PUT", "/cluster/notifications/endpoints/sendmail/{name}"): NEEDS_CONTEXT,
    (8, "POST", "/cluster/notifications/endpoints/smtp"): INPUT,
    (9, "POST", "/cluster/notifications/endpoints/smtp"): INPUT,
    (8, "DELETE", "/cluster/notifications/endpoints/smtp/{name}"): NEEDS_CONTEXT,
    (9, "DELETE", "/cluster/notifications/endpoints/smtp/{name}"): NEEDS_CONTEXT,
    (8, "GET", "/cluster/notifications/endpoints/smtp/{name}"): NEEDS_CONTEXT,
    (9, "GET", "/cluster/notifications/endpoints/smtp/{name}"): NEEDS_CONTEXT,
    (8, "PUT", "/cluster/notifications/endpoints/smtp/{name}"): NEEDS_CONTEXT,
    (9, "PUT", "/cluster/notifications/endpoints/smtp/{name}"): NEEDS_CONTEXT,
    (8, "POST", "/cluster/notifications/endpoints/webhook"): INPUT,
    (9, "POST", "/cluster/notifications/endpoints/webhook"): INPUT,
    (8, "DELETE", "/cluster/notifications/endpoints/webhook/{name}"): NEEDS_CONTEXT,
    (9, "DELETE", "/cluster/notifications/endpoints/webhook/{name}"): NEEDS_CONTEXT,
    (8, "GET", "/cluster/notifications/endpoints/webhook/{name}"): NEEDS_CONTEXT,
    (9, "GET", "/cluster/notifications/endpoints/webhook/{name}"): NEEDS_CONTEXT,
    (8, "PUT", "/cluster/notifications/endpoints/webhook/{name}"): NEEDS_CONTEXT,
    (9, "PUT", "/cluster/notifications/endpoints/webhook/{name}"): NEEDS_CONTEXT,
    (8, "POST", "/cluster/notifications/targets/{name}/test"): NEEDS_CONTEXT,
    (9, "POST", "/cluster/notifications/targets/{name}/test"): NEEDS_CONTEXT,
    (None, "POST", "/cluster/sdn/controllers"): INPUT,
    (None, "DELETE", "/cluster/sdn/controllers/{controller}"): NEEDS_CONTEXT,
    (None, "GET", "/cluster/sdn/controllers/{controller}"): NEEDS_CONTEXT,
    (None, "PUT", "/cluster/sdn/controllers/{controller}"): NEEDS_CONTEXT,
    (None, "GET", "/nodes/{node}/apt/changelog"): REFUSED,
    (None, "POST", "/nodes/{node}/disks/directory"): NEEDS_CONTEXT,
    (7, "DELETE", "/nodes/{node}/disks/directory/{name}"): NEEDS_CONTEXT,
    (8, "DELETE", "/nodes/{node}/disks/directory/{name}"): NEEDS_CONTEXT,
    (9, "DELETE", "/nodes/{node}/disks/directory/{name}"): NEEDS_CONTEXT,
    (None, "POST", "/nodes/{node}/disks/initgpt"): REFUSED,
    (None, "POST", "/nodes/{node}/disks/lvm"): NEEDS_CONTEXT,
    (7, "DELETE", "/nodes/{node}/disks/lvm/{name}"): NEEDS_CONTEXT,
    (8, "DELETE", "/nodes/{node}/disks/lvm/{name}"): NEEDS_CONTEXT,
    (9, "DELETE", "/nodes/{node}/disks/lvm/{name}"): NEEDS_CONTEXT,
    (None, "POST", "/nodes/{node}/disks/lvmthin"): NEEDS_CONTEXT,
    (7, "DELETE", "/nodes/{node}/disks/lvmthin/{name}"): NEEDS_CONTEXT,
    (8, "DELETE", "/nodes/{node}/disks/lvmthin/{name}"): NEEDS_CONTEXT,
    (9, "DELETE", "/nodes/{node}/disks/lvmthin/{name}"): NEEDS_CONTEXT,
    (7, "PUT", "/nodes/{node}/disks/wipedisk"): REFUSED,
    (8, "PUT", "/nodes/{node}/disks/wipedisk"): REFUSED,
    (9, "PUT", "/nodes/{node}/disks/wipedisk"): REFUSED,
    (None, "POST", "/nodes/{node}/disks/zfs"): NEEDS_CONTEXT,
    (7, "DELETE", "/nodes/{node}/disks/zfs/{name}"): NEEDS_CONTEXT,
    (8, "DELETE", "/nodes/{node}/disks/zfs/{name}"): NEEDS_CONTEXT,
    (9, "DELETE", "/nodes/{node}/disks/zfs/{name}"): NEEDS_CONTEXT,
    (None, "GET", "/nodes/{node}/disks/zfs/{name}"): NEEDS_CONTEXT,
    (6, "POST", "/nodes/{node}/lxc/{vmid}/move_volume"): NEEDS_CONTEXT,
    (7, "POST", "/nodes/{node}/lxc/{vmid}/move_volume"): INPUT,
    (8, "POST", "/nodes/{node}/lxc/{vmid}/move_volume"): INPUT,
    (9, "POST", "/nodes/{node}/lxc/{vmid}/move_volume"): INPUT,
    (None, "POST", "/nodes/{node}/network"): INPUT,
    (None, "PUT", "/nodes/{node}/network"): REFUSED,
    (None, "GET", "/nodes/{node}/qemu/{vmid}/agent/exec-status"): NEEDS_CONTEXT,
    (None, "GET", "/nodes/{node}/qemu/{vmid}/agent/file-read"): REFUSED,
    (None, "POST", "/nodes/{node}/qemu/{vmid}/agent/file-write"): NEEDS_CONTEXT,
    (None, "POST", "/nodes/{node}/qemu/{vmid}/agent/fsfreeze-freeze"): REFUSED,
    (None, "POST", "/nodes/{node}/qemu/{vmid}/agent/set-user-password"): NEEDS_CONTEXT,
    (None, "POST", "/nodes/{node}/qemu/{vmid}/agent/suspend-disk"): NEEDS_CONTEXT,
    (None, "POST", "/nodes/{node}/qemu/{vmid}/agent/suspend-hybrid"): NEEDS_CONTEXT,
    (None, "POST", "/nodes/{node}/qemu/{vmid}/agent/suspend-ram"): NEEDS_CONTEXT,
    (6, "POST", "/nodes/{node}/qemu/{vmid}/move_disk"): NEEDS_CONTEXT,
    (7, "POST", "/nodes/{node}/qemu/{vmid}/move_disk"): INPUT,
    (8, "POST", "/nodes/{node}/qemu/{vmid}/move_disk"): INPUT,
    (9, "POST", "/nodes/{node}/qemu/{vmid}/move_disk"): INPUT,
    (None, "POST", "/nodes/{node}/replication/{id}/schedule_now"): TASK,
    (None, "POST", "/nodes/{node}/status"): UNIMPLEMENTED,
    (None, "POST", "/nodes/{node}/storage/{storage}/content"): INPUT,
    (None, "POST", "/nodes/{node}/storage/{storage}/content/{volume}"): UNIMPLEMENTED,
    (None, "POST", "/nodes/{node}/vzdump"): TASK,
    (None, "GET", "/nodes/{node}/vzdump/extractconfig"): NEEDS_CONTEXT,
    (8, "DELETE", "/pools"): NEEDS_CONTEXT,
    (9, "DELETE", "/pools"): NEEDS_CONTEXT,
}


def _gaps(major: int) -> dict[tuple[str, str], str]:
    return {(m, p): r for (maj, m, p), r in KNOWN_PROBE_GAPS.items() if maj in (None, major)}


# Answers that are right although they are not 200 or differ from the schema,
# each with the reason; matched by (major or None, method, path) and a message part.
EXPECTED = {
    # The seeded cluster exists: PVE refuses to create a second one.
    (None, "POST", "/cluster/config"): "already exists",
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


def value_for(param: Parameter, endpoint: Endpoint, *, body: bool):
    name = param.name
    kind = "lxc" if "/lxc" in endpoint.path else "qemu"
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


def plan(contract: Contract) -> list[Endpoint]:
    def order(endpoint: Endpoint):
        shape = shapes.shape_of(contract, endpoint)
        phase = _PHASE[shape.role]
        depth = endpoint.path.count("/")
        tail = endpoint.path.rsplit("/", 1)[-1]
        rank = 0
        if _guest_creation(endpoint):
            phase = 0
        elif phase == 1 and endpoint.method == "POST" and endpoint.path in _REFERENCED_FIRST:
            phase = 0.5
        elif "/status/" in endpoint.path and tail in _POWER_ORDER and phase == 4:
            phase, rank = 4.5, _POWER_ORDER.index(tail)
        elif endpoint.path.endswith(_LAST_GUEST_ACTIONS):
            phase = 5.5
        if _guest_destroy(endpoint):
            phase = 6
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
# Methods whose required parameters do not say everything PVE requires.
_EXTRAS = {
    ("PUT", "/access/acl"): {"users": "probe@pve"},
    ("POST", "/nodes/{node}/qemu/{vmid}/agent/exec"): {"command": "true"},
    ("POST", "/nodes/{node}/vzdump"): {"all": 1},
    ("POST", "/cluster/backup"): {"all": 1},
    # A fresh storage ID (the seeded ones exist) of a type that needs only a path.
    ("POST", "/storage"): {"storage": "probestore", "type": "dir", "path": "/srv/probe"},
    ("POST", "/cluster/sdn/zones"): {"type": "simple"},
    ("POST", "/cluster/sdn/ipams"): {"type": "pve"},
    ("POST", "/cluster/sdn/controllers"): {"asn": 65000, "peers": "192.0.2.1"},
    ("POST", "/cluster/acme/plugins"): {"api": "cf"},
    # Notification endpoints and matchers share one name space.
    **{
        ("POST", f"/cluster/notifications/endpoints/{kind}"): {"name": f"probe{kind}"}
        for kind in ("gotify", "sendmail", "smtp", "webhook")
    },
    ("POST", "/cluster/sdn/vnets/{vnet}/subnets"): {"subnet": "192.0.2.0/24"},
    ("DELETE", "/nodes/{node}/storage/{storage}/prunebackups"): {"prune-backups": "keep-last=1"},
}


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
    return body


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
        label = f"{endpoint.method} {endpoint.path}"
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
            response = caller.call(endpoint.method, _url(endpoint), _body(endpoint))
        outcome.calls += 1
        outcome.called.add((endpoint.method, endpoint.path))
        if not _judge(contract.major, endpoint, response, outcome):
            continue
        data = response.json().get("data")
        lost = _written_back(contract, endpoint, data, written)
        if lost:
            outcome.fail(endpoint, f"{label}: created item reads back wrong: {lost[:3]}")
        errors = shapes.schema_errors(endpoint.returns, data)
        mismatch = f"{label}: returns mismatch {errors[:3]}"
        if errors and not _expected(contract.major, endpoint, mismatch):
            outcome.fail(endpoint, mismatch)
        if isinstance(data, str) and data.startswith("UPID:"):
            WORLD["upid"] = data
            exitstatus = caller.wait(data)["exitstatus"]
            if exitstatus != "OK":
                outcome.fail(endpoint, f"{label}: task ended {exitstatus!r}")
    return outcome


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
    dump = os.environ.get("PROXMOX_SIMULATOR_PROBE_DUMP")
    if dump:
        with open(dump, "a") as out:
            for (method, path), message in sorted(outcome.failed.items()):
                out.write(json.dumps([contract.major, method, path, message]) + "\n")
    known = {key for key in _gaps(contract.major) if key in outcome.called}
    new = [message for key, message in outcome.failed.items() if key not in known]
    passing = sorted(f"{m} {p}" for m, p in known - set(outcome.failed))
    assert new == [], f"{len(new)} of {outcome.calls} fail, not in KNOWN_PROBE_GAPS:\n" + "\n".join(
        new
    )
    assert passing == [], "these pass now, remove them from KNOWN_PROBE_GAPS:\n" + "\n".join(
        passing
    )
