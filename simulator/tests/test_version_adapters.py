"""Per-major behaviour: one test per adapter, and the adapters seen through HTTP."""

from __future__ import annotations

import httpx
import pytest
from simtest_support import official_apidoc
from test_api import Session

from proxmox_simulator.config import Settings
from proxmox_simulator.contracts import sources
from proxmox_simulator.domain import resource_shapes as shapes
from proxmox_simulator.domain.version_adapters import ADAPTERS, Pve6, Pve7, Pve8, Pve9, adapter_for

ADDRESSES = [
    {"ip-address": "10.0.0.5", "ip-address-type": "ipv4", "prefix": 24},
    {"ip-address": "fd00::5", "ip-address-type": "ipv6", "prefix": 64},
]


def test_pve6_adapter():
    adapter = adapter_for(6)
    assert isinstance(adapter, Pve6) and type(adapter) is Pve6
    assert adapter.running_qemu() == {"running-qemu": "5.2.0", "running-machine": "pc-i440fx-5.2"}
    assert adapter.node_memory(100, 40) == {"total": 100, "used": 40, "free": 60}
    assert adapter.lxc_interface("eth0", "bc:24:11:00:00:01", ADDRESSES) == {
        "name": "eth0",
        "hwaddr": "bc:24:11:00:00:01",
        "inet": "10.0.0.5/24",
        "inet6": "fd00::5/64",
    }
    assert adapter.qemu_migrate_extras(["hostpci1"]) == {}
    assert adapter.kernel_release == "5.4.203-1-pve"


def test_each_major_runs_its_own_kernel_series():
    releases = [adapter_for(major).kernel_release for major in (6, 7, 8, 9)]
    assert [r.rsplit(".", 1)[0] for r in releases] == ["5.4", "5.15", "6.8", "6.14"]
    assert all(
        adapter_for(m).kversion.startswith(f"Linux {r} #1 SMP")
        for m, r in zip((6, 7, 8, 9), releases, strict=True)
    )


def test_pve7_adapter():
    adapter = adapter_for(7)
    assert type(adapter) is Pve7
    assert adapter.running_qemu()["running-qemu"] == "7.2.0"
    assert "available" not in adapter.node_memory(100, 40)
    assert "ip-addresses" not in adapter.lxc_interface("eth0", "x", ADDRESSES)


def test_pve8_adapter():
    adapter = adapter_for(8)
    assert type(adapter) is Pve8
    assert adapter.running_qemu() == {
        "running-qemu": "9.2.0",
        "running-machine": "pc-i440fx-9.2+pve1",
    }
    entry = adapter.lxc_interface("eth0", "bc:24:11:00:00:01", ADDRESSES)
    assert entry["hardware-address"] == "bc:24:11:00:00:01" and entry["ip-addresses"] == ADDRESSES
    assert entry["inet"] == "10.0.0.5/24"
    assert "available" not in adapter.node_memory(100, 40)
    # Resource mappings are 8.x's: a mapped device is named, 6.x and 7.x have none.
    assert adapter.qemu_migrate_extras(["hostpci1"]) == {
        "mapped-resources": ["hostpci1"],
        "mapped-resource-info": {},
    }
    assert adapter_for(7).qemu_migrate_extras(["hostpci1"]) == {}


def test_pve9_adapter():
    adapter = adapter_for(9)
    assert type(adapter) is Pve9
    assert adapter.running_qemu()["running-qemu"] == "10.0.2"
    assert adapter.node_memory(100, 40) == {"total": 100, "used": 40, "free": 60, "available": 60}
    assert adapter.qemu_migrate_extras([]) == {
        "mapped-resources": [],
        "mapped-resource-info": {},
        "has-dbus-vmstate": 0,
    }
    assert "ip-addresses" in adapter.lxc_interface("eth0", "x", ADDRESSES)


def test_unknown_majors_fall_back_to_the_nearest_adapter():
    assert adapter_for(10) is ADAPTERS[9] and adapter_for(5) is ADAPTERS[6]


@pytest.mark.parametrize(
    ("major", "field"),
    [(6, None), (7, None), (8, None), (9, "available")],
)
def test_node_memory_fields_follow_what_each_major_declares(major, field):
    """The adapter emits exactly the required memory fields each contract declares."""
    version = {6: "6.4-15", 7: "7.4-16", 8: "8.4.5"}.get(major)
    raw = sources.read_fakepve() if version is None else sources.read_file(official_apidoc(version))
    contract = sources.parse_artifact(raw, version or sources.FAKEPVE_SCHEMA_VERSION).contract
    # 6.x and 7.x declare the answer free-form; 8.x and 9.x spell the memory object out.
    declared = contract.endpoint("/nodes/{node}/status", "GET").returns.get("properties", {})
    schema = declared.get("memory", {})
    memory = adapter_for(major).node_memory(100, 40)
    assert shapes.schema_errors(schema, memory) == []
    assert (field in memory) if field else set(memory) == {"total", "used", "free"}


def test_running_qemu_over_http_reflects_the_served_major(settings, seeded, unique_vmid):
    """The session server serves 9.x; a second one serves 7.4 on the same database."""
    from proxmox_simulator.server import SimulatorServer

    legacy = Settings(
        database_url=settings.database_url,
        data_dir=settings.data_dir,
        contract=str(official_apidoc("7.4-16")),
        clock="instant",
        task_workers=1,
        pool_max_size=3,
    )
    with (
        SimulatorServer(legacy) as server,
        httpx.Client(base_url=server.base_url + "/api2/json", timeout=30) as client,
    ):
        root = Session(client)
        upid = root.post(
            "/nodes/pve1/qemu", data={"vmid": unique_vmid, "scsi0": "local-lvm:1", "start": 1}
        ).json()["data"]
        assert root.wait(upid)["exitstatus"] == "OK"
        status = root.get(f"/nodes/pve1/qemu/{unique_vmid}/status/current").json()["data"]
        memory = root.get("/nodes/pve1/status").json()["data"]["memory"]
        # 7.4 declares agent exec's ``command`` optional; PVE still needs it.
        no_command = root.post(f"/nodes/pve1/qemu/{unique_vmid}/agent/exec", data={})
        root.wait(root.post(f"/nodes/pve1/qemu/{unique_vmid}/status/stop").json()["data"])
        root.wait(root.delete(f"/nodes/pve1/qemu/{unique_vmid}").json()["data"])
    assert status["running-qemu"] == "7.2.0"
    assert "available" not in memory
    assert no_command.status_code == 400
    assert no_command.json()["errors"] == {"command": "property is missing and it is not optional"}
