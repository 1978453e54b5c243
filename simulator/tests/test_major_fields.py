"""Per-major field sets: every major answers the fields its own ``returns`` declares.

One simulator serves the session's seeded state and is hot-swapped through majors
6, 7, 8 and 9 by its laboratory API, with no manual import (the official viewer
schemas wait in ``PROXMOX_SIMULATOR_APIDOC_DIR``).  Under each major every read the
seeded state can address, and each console opener, is called over HTTP and its answer's
field set is checked against *that* major's ``returns``: a key a closed object does
not declare fails, and so does a required property that is missing.

PVE's HTTP server does not check or trim answers (its RESTHandler verifies ``returns``
only for ``pvesh``), and its JSONSchema refuses undeclared keys only in objects that say
``additionalProperties: 0``; open objects keep what a major's code put there.
"""

from __future__ import annotations

import re

import httpx
import pytest
from simtest_support import (
    Session,
    all_major_contracts,
    assert_conforms,
    expect_data,
    expect_error,
    lab_simulator,
    make_vm,
    swap_major,
)

from proxmox_simulator.contracts.model import Contract, Endpoint
from proxmox_simulator.contracts.returns import field_set_errors

MAJORS = (6, 7, 8, 9)
# Closed answers of writes that change nothing a later read depends on.
_OPENERS = (
    "/nodes/{node}/vncshell",
    "/nodes/{node}/termproxy",
    "/nodes/{node}/qemu/{vmid}/vncproxy",
    "/nodes/{node}/qemu/{vmid}/termproxy",
    "/nodes/{node}/lxc/{vmid}/vncproxy",
    "/nodes/{node}/lxc/{vmid}/termproxy",
)


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    with lab_simulator(tmp_path_factory.mktemp("majorfields"), "majorfields", "small", 5) as server:
        yield server


def _official(major: int) -> Contract:
    return next(c for c in all_major_contracts() if c.major == major)


class _World:
    """Path values the seeded state offers, read through the API."""

    def __init__(self, api: Session):
        def first(path, key):
            items = api.get(path).json()["data"] or []
            return str(items[0][key]) if items else None

        self.values = {
            "node": "pve1",
            "storage": "local",
            "userid": "root@pam",
            "roleid": "PVEAdmin",
            "qemu": first("/nodes/pve1/qemu", "vmid"),
            "lxc": first("/nodes/pve1/lxc", "vmid"),
            "groupid": first("/access/groups", "groupid"),
            "poolid": first("/pools", "poolid"),
            "realm": "pam",
        }

    def url(self, endpoint: Endpoint) -> str | None:
        def fill(match: re.Match) -> str:
            name = match.group(1)
            if name == "vmid":
                name = "lxc" if "/lxc/" in endpoint.path else "qemu"
            value = self.values.get(name)
            if value is None:
                raise LookupError(name)
            return value

        try:
            return re.sub(r"\{([^}]+)\}", fill, endpoint.path)
        except LookupError:
            return None


def _callable(endpoint: Endpoint) -> bool:
    """A read, or a console opener, whose required input is its path alone."""
    if endpoint.method != "GET" and not (endpoint.method == "POST" and endpoint.path in _OPENERS):
        return False
    path_params = set(endpoint.path_params)
    return all(p.optional or p.name in path_params for p in endpoint.parameters)


# Where a major's own schema is wrong about what PVE answers, and how: 7.x and 8.x declare
# the Ceph metadata's per-daemon and per-node maps with one literal '{id}' / '{node}'
# property; PVE keys them by daemon ('<id>@<host>') and node name (9.x declares
# additionalProperties). test_probe.py lists the same.
SCHEMA_ERRATA = {
    ("GET", "/cluster/ceph/metadata"): ({7, 8}, r"required property '\{(id|node)\}' is missing$"),
}


def _errata(endpoint: Endpoint, major: int, errors: list[str]) -> list[str]:
    majors, wording = SCHEMA_ERRATA.get((endpoint.method, endpoint.path), ((), ""))
    if major not in majors:
        return errors
    return [error for error in errors if not re.search(wording, error)]


def _checked(api: Session, world: _World, contract: Contract) -> tuple[list[str], int]:
    problems, checked = [], 0
    for endpoint in contract.endpoints:
        if not _callable(endpoint):
            continue
        url = world.url(endpoint)
        if url is None:
            continue
        response = api.request(endpoint.method, url)
        if response.status_code != 200:
            continue  # a read the seeded state cannot answer (no such item): not a field set
        checked += 1
        errors = field_set_errors(endpoint.returns, response.json()["data"])
        errors = _errata(endpoint, int(contract.version.split(".")[0]), errors)
        if errors:
            problems.append(f"{endpoint.method} {endpoint.path}: {errors[:3]}")
    return problems, checked


@pytest.mark.parametrize("major", MAJORS)
def test_each_major_answers_its_own_field_set(sim, major):
    official = _official(major)
    with (
        httpx.Client(base_url=sim.base_url, timeout=30) as admin,
        httpx.Client(base_url=sim.base_url + "/api2/json", timeout=30) as client,
    ):
        # A hot-swap to every major works without `contract import`.
        swapped = admin.post("/ui/api/contract/apply", data={"major": major})
        assert swapped.status_code == 200, swapped.text
        assert swapped.json()["data"]["version"] == official.version
        api = Session(client)
        problems, checked = _checked(api, _World(api), official)
    # Most of the major's reads are addressable from the seeded state.
    assert checked > 150, checked
    assert problems == [], f"{len(problems)} of {checked} answers:\n" + "\n".join(problems)


# -- 6.x/7.x old paths, answered from the same state as their successors ------------


@pytest.fixture
def api(sim):
    with httpx.Client(base_url=sim.base_url + "/api2/json", timeout=30) as client:
        yield Session(client)


def _names(data) -> set[str]:
    return {item["name"] for item in data}


def test_old_usb_and_cpu_paths_list_the_nodes_hardware(sim, api):
    swap_major(sim, 9)
    usb = expect_data(api.get("/nodes/pve1/hardware/usb"), "/nodes/{node}/hardware/usb")
    nine = _names(expect_data(api.get("/nodes/pve1/capabilities/qemu/cpu")))
    swap_major(sim, 6)
    assert expect_data(api.get("/nodes/pve1/scan/usb"), "/nodes/{node}/scan/usb") == usb
    assert {d["vendid"] + ":" + d["prodid"] for d in usb} == {"046b:ff10", "0781:5583"}
    six = expect_data(api.get("/nodes/pve1/cpu"), "/nodes/{node}/cpu")
    assert {"kvm64", "host", "EPYC-Rome", "Icelake-Client"} <= _names(six)
    # Models of later QEMU releases, and 8.x's micro-architecture levels, are not 6.4's.
    assert not _names(six) & {"EPYC-Milan", "x86-64-v2-AES", "EPYC-Turin"}
    assert {"x86-64-v2-AES", "EPYC-Genoa", "EPYC-Turin"} <= nine
    assert "Icelake-Client" not in nine
    vendors = {m["name"]: m["vendor"] for m in six}
    assert (vendors["EPYC"], vendors["Skylake-Server"], vendors["kvm64"]) == (
        "AuthenticAMD",
        "GenuineIntel",
        "default",
    )
    swap_major(sim, 7)
    seven = _names(expect_data(api.get("/nodes/pve1/capabilities/qemu/cpu")))
    assert "EPYC-Milan" in seven and "EPYC-Genoa" not in seven
    expect_error(api.get("/nodes/pve9/capabilities/qemu/cpu"), 500, "hostname lookup 'pve9'")


def test_mdev_types_count_the_instances_running_guests_hold(sim, api, unique_vmid):
    swap_major(sim, 6)
    gpu = "/nodes/pve1/hardware/pci/0000:41:00.0/mdev"
    before = {t["type"]: t["available"] for t in expect_data(api.get(gpu))}
    assert before["nvidia-222"] == 16
    pci = expect_data(api.get("/nodes/pve1/hardware/pci"), "/nodes/{node}/hardware/pci")
    assert [d["id"] for d in pci if d.get("mdev")] == ["0000:41:00.0"]
    # Bridges (class 06) are left out unless the caller lifts the blacklist.
    assert not [d for d in pci if d["class"].startswith("0x06")]
    everything = expect_data(
        api.get("/nodes/pve1/hardware/pci", params={"pci-class-blacklist": ""})
    )
    assert "0000:00:00.0" in {d["id"] for d in everything}
    make_vm(api, "pve1", unique_vmid, hostpci0="0000:41:00.0,mdev=nvidia-222")
    assert expect_data(api.get(gpu))[0]["available"] == 16  # a stopped guest holds none
    api.wait(expect_data(api.post(f"/nodes/pve1/qemu/{unique_vmid}/status/start"), method="POST"))
    try:
        held = {t["type"]: t["available"] for t in expect_data(api.get(gpu))}
        assert held == {**before, "nvidia-222": 15}
        # The passed-through device pins the guest: 6.x knows no resource mappings.
        where = f"/nodes/pve1/qemu/{unique_vmid}/migrate"
        precheck = expect_data(api.get(where))
        assert_conforms("/nodes/{node}/qemu/{vmid}/migrate", "GET", precheck, majors=(6,))
        assert precheck["local_resources"] == ["hostpci0"]
        assert "mapped-resources" not in precheck
        swap_major(sim, 8)
        # 8.x also takes a PCI resource mapping's name for the device.
        mapping = f"gpu{unique_vmid}"
        expect_data(
            api.post(
                "/cluster/mapping/pci",
                data={"id": mapping, "map": "node=pve1,path=0000:41:00.0"},
            ),
            method="POST",
        )
        by_mapping = expect_data(api.get(f"/nodes/pve1/hardware/pci/{mapping}/mdev"))
        assert {t["type"]: t["available"] for t in by_mapping} == held
        precheck = expect_data(api.get(where))
        assert_conforms("/nodes/{node}/qemu/{vmid}/migrate", "GET", precheck, majors=(8,))
        assert (precheck["local_resources"], precheck["mapped-resources"]) == (["hostpci0"], [])
        expect_data(api.delete(f"/cluster/mapping/pci/{mapping}"), method="DELETE")
    finally:
        api.wait(api.post(f"/nodes/pve1/qemu/{unique_vmid}/status/stop").json()["data"])
        api.wait(api.delete(f"/nodes/pve1/qemu/{unique_vmid}").json()["data"])
    expect_error(api.get("/nodes/pve1/hardware/pci/0000:21:00.0/mdev"), 500, "mediated devices")


def test_old_backupinfo_path_lists_the_guests_no_job_backs_up(sim, api):
    swap_major(sim, 9)
    current = expect_data(api.get("/cluster/backup-info/not-backed-up"))
    guests = {g["vmid"] for g in expect_data(api.get("/cluster/resources", params={"type": "vm"}))}
    assert current and {g["vmid"] for g in current} <= guests
    swap_major(sim, 6)
    old = expect_data(
        api.get("/cluster/backupinfo/not_backed_up"), "/cluster/backupinfo/not_backed_up"
    )
    assert old == current
    assert isinstance(expect_data(api.get("/cluster/backupinfo")), str)


def test_roles_carry_the_privileges_of_the_served_major(sim, api):
    swap_major(sim, 9)
    roles = {r["roleid"]: r for r in expect_data(api.get("/access/roles"))}
    assert "Mapping.Audit" in roles["PVEAuditor"]["privs"] and "PVEMappingUser" in roles
    swap_major(sim, 6)
    roles = {r["roleid"]: r for r in expect_data(api.get("/access/roles"), "/access/roles")}
    six = set(_official(6).endpoint("/access/roles/{roleid}", "GET").returns["properties"])
    for role in roles.values():
        assert set(filter(None, role["privs"].split(","))) <= six, role
    # Roles of later majors' privileges do not exist in 6.4.
    assert "PVEMappingUser" not in roles and "PVEPoolUser" not in roles
    expect_error(api.get("/access/roles/PVEMappingUser"), 500, "does not exist")
    assert "VM.Audit" in roles["PVEAuditor"]["privs"]
    expect_error(
        api.post("/access/roles", data={"roleid": "Later6", "privs": "VM.Audit,Mapping.Use"}),
        400,
        "invalid privilege 'Mapping.Use'",
    )
    swap_major(sim, 8)
    expect_data(
        api.post("/access/roles", data={"roleid": "Later8", "privs": "VM.Audit,Mapping.Use"}),
        method="POST",
    )
    assert expect_data(api.get("/access/roles/Later8")) == {"Mapping.Use": 1, "VM.Audit": 1}
    expect_data(api.delete("/access/roles/Later8"), method="DELETE")


# -- error bodies: libpve-http-server-perl 5.2.0 (PVE 8.4) wrote messages into them ----


@pytest.mark.parametrize("major", MAJORS)
def test_each_major_answers_errors_with_its_own_bodies(sim, api, major):
    swap_major(sim, major)
    says_it_in_the_body = major >= 8  # the bundled 8.x is 8.4
    invalid = api.get("/nodes/pve1/qemu", params={"full": "perhaps"})
    assert (invalid.status_code, invalid.reason_phrase) == (400, "Parameter verification failed.")
    expected = {"data": None, "errors": invalid.json()["errors"]}
    assert set(expected["errors"]) == {"full"}
    if says_it_in_the_body:
        expected["message"] = "Parameter verification failed.\n"
    assert invalid.json() == expected

    with httpx.Client(base_url=sim.base_url + "/api2", timeout=30) as anonymous:
        for fmt in ("json", "extjs"):
            # The authentication step refuses before any formatter runs: a real 401
            # even for the GUI's extjs format, and no JSON envelope.
            refused = anonymous.get(f"/{fmt}/nodes")
            assert (refused.status_code, refused.reason_phrase) == (401, "No ticket"), fmt
            assert refused.content == (b"No ticket\n" if says_it_in_the_body else b""), fmt

    # A method's own refusal in extjs: 200 with the message (newline kept) inside.
    missing = api.client.get(
        "/../extjs/nodes/pve1/qemu/999999/config",
        headers={"Cookie": f"PVEAuthCookie={api.ticket}"},
    )
    assert missing.status_code == 200
    body = missing.json()
    assert (body["success"], body["status"], body["data"]) == (0, 500, None)
    assert body["message"] == (
        "Configuration file 'nodes/pve1/qemu-server/999999.conf' does not exist\n"
    )
