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

import os
import re
import time
from dataclasses import dataclass, field

import httpx
import pytest
from simtest_support import ROOT_PASSWORD, create_database, drop_database, official_apidoc, run

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
    "username": "root@pam",
    "type": None,  # from its enum
    "password": ROOT_PASSWORD,
    "ostemplate": "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",
    "cidr": "192.0.2.0/24",
    "sid": "vm:990100",
    "service": "pveproxy",
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
    ":".join(["AB"] * 32),
    "vm:990100",
    "0",
    "1",
    "a",
)


def _matching(pattern: str):
    from proxmox_simulator.api.validation import _compiled

    compiled = _compiled(pattern)
    if compiled is None:
        return "probe"
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
        return spec["enum"][0]
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
    if name in _NAME_VALUES and _NAME_VALUES[name] is not None:
        return _NAME_VALUES[name]
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
        if not body and endpoint.path.endswith(("/migrate", "/remote_migrate")):
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
_POWER_ORDER = ("suspend", "resume", "reboot", "reset", "shutdown", "start", "stop")
# Run after every other method of the guest, just before it is destroyed.
_LAST_GUEST_ACTIONS = ("/template",)


def plan(contract: Contract) -> list[Endpoint]:
    def order(endpoint: Endpoint):
        shape = shapes.shape_of(contract, endpoint)
        phase = _PHASE[shape.role]
        depth = endpoint.path.count("/")
        tail = endpoint.path.rsplit("/", 1)[-1]
        rank = 0
        if _guest_creation(endpoint):
            phase = 0
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
    calls: int = 0


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


def _body(endpoint: Endpoint) -> dict:
    path_params = set(endpoint.path_params)
    body = {
        p.name: value_for(p, endpoint, body=True)
        for p in endpoint.parameters
        if not p.optional and not p.indexed_stem and p.name not in path_params
    }
    if endpoint.method == "POST":
        body.update(_GUEST_EXTRAS.get(endpoint.path, {}))
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


def probe(caller: Caller, contract: Contract) -> Outcome:
    outcome = Outcome()
    for endpoint in plan(contract):
        label = f"{endpoint.method} {endpoint.path}"
        response = caller.call(endpoint.method, _url(endpoint), _body(endpoint))
        outcome.calls += 1
        if response.status_code != 200:
            outcome.failures.append(
                f"{label}: {response.status_code} {response.reason_phrase} {response.text[:200]}"
            )
            continue
        data = response.json().get("data")
        if shapes.shape_of(contract, endpoint).role == shapes.CREATE:
            _learn_key(caller, contract, endpoint)
        errors = shapes.schema_errors(endpoint.returns, data)
        if errors:
            outcome.failures.append(f"{label}: returns mismatch {errors[:3]}")
        if isinstance(data, str) and data.startswith("UPID:"):
            WORLD["upid"] = data
            exitstatus = caller.wait(data)["exitstatus"]
            if exitstatus != "OK":
                outcome.failures.append(f"{label}: task ended {exitstatus!r}")
    return outcome


def _learn_key(caller: Caller, contract: Contract, endpoint: Endpoint) -> None:
    """Remember the key of the item a create made (PVE numbers rules, names TFA entries)."""
    shape = shapes.shape_of(contract, endpoint)
    if shape.key_param is None:
        return
    listing = contract.endpoint(shape.collection.rsplit("/", 1)[0], "GET")
    if listing is None or listing.path == endpoint.path and endpoint.method != "POST":
        return
    url = _url(listing)
    answer = caller.call("GET", url, {}).json().get("data")
    if isinstance(answer, list) and answer and isinstance(answer[-1], dict):
        key = answer[-1].get(shape.key_param)
        if key is not None:
            WORLD["keys"][shape.collection] = key


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
            outcome = probe(Caller(client), contract)
    finally:
        drop_database(url)
    assert outcome.calls > 0
    assert outcome.failures == [], f"{len(outcome.failures)} of {outcome.calls}:\n" + "\n".join(
        outcome.failures
    )
