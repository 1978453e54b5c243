"""Property-string parameters (netN, scsiN, ipconfigN, LXC netN/rootfs/mpN) over real HTTP.

The strings are written by hand the way PVE's documentation and `qm`/`pct`
users write them; the expected errors are PVE's own wording: a parameter
error is HTTP 400 with ``{"errors": {"net1": "invalid format - ..."}, "data": null}``.
"""

from __future__ import annotations

import pytest
from proxmoxer import ProxmoxAPI
from proxmoxer.core import ResourceException
from simtest_support import ROOT_PASSWORD, expect_data, make_vm

from proxmox_simulator.simulation.seeds import PROFILES, plan

TEMPLATE = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"


def _errors(response) -> dict:
    assert response.status_code == 400, (response.status_code, response.text)
    body = response.json()
    assert body["data"] is None
    return body["errors"]


@pytest.fixture
def stopped_vm(root, unique_vmid):
    make_vm(root, "pve1", unique_vmid, net0="virtio,bridge=vmbr0")
    yield unique_vmid
    status = root.get(f"/nodes/pve1/qemu/{unique_vmid}/status/current").json()["data"]
    if status["status"] != "stopped":
        root.wait(root.post(f"/nodes/pve1/qemu/{unique_vmid}/status/stop").json()["data"])
    root.wait(root.delete(f"/nodes/pve1/qemu/{unique_vmid}").json()["data"])


def _config(root, vmid: int) -> dict:
    return root.get(f"/nodes/pve1/qemu/{vmid}/config").json()["data"]


def test_qemu_nic_strings_are_checked_against_pve_qm_net(root, stopped_vm):
    path = f"/nodes/pve1/qemu/{stopped_vm}/config"
    before = _config(root, stopped_vm)
    cases = {
        "virtio,bridge=vmbr0,bogus=1": (
            "invalid format - invalid key in comma-separated list property: bogus\n"
        ),
        "virtio,bridge=vmbr0,tag=99999": (
            "invalid format - format error\nnet1.tag: value must have a maximum value of 4094\n"
        ),
        "virtio,bridge=vmbr0,tag=0": (
            "invalid format - format error\nnet1.tag: value must have a minimum value of 1\n"
        ),
        "e1000,bridge=vmbr0,firewall=maybe": (
            "invalid format - format error\nnet1.firewall: type check ('boolean') failed - got 'maybe'\n"
        ),
        "bridge=vmbr0": (
            "invalid format - format error\nnet1.model: property is missing and it is not optional\n"
        ),
        "virtio=01:00:5E:00:00:01,bridge=vmbr0": (
            "invalid format - format error\nnet1.macaddr: invalid format - "
            "value does not look like a valid unicast MAC address\n\n"
        ),
        "virtio,bridge=vmbr0,bridge=vmbr1": (
            "invalid format - duplicate key in comma-separated list property: bridge\n"
        ),
        "rtl8139,bridge=vmbr0,trunks=10;twenty": (
            "invalid format - format error\nnet1.trunks: value does not match the regex pattern\n"
        ),
    }
    for value, message in cases.items():
        assert _errors(root.put(path, data={"net1": value})) == {"net1": message}, value
    # Nothing of the refused writes reached the config.
    assert _config(root, stopped_vm) == before

    # PVE's own spellings are accepted: model=MAC, the model alone, booleans as words.
    accepted = {
        "net1": "virtio=BC:24:11:AB:CD:EF,bridge=vmbr1,firewall=1,tag=42",
        "net2": "model=e1000,bridge=vmbr0,link_down=yes,rate=12.5,mtu=1500",
        "net3": "vmxnet3,bridge=vmbr1,trunks=10-20;30,queues=4",
    }
    assert root.put(path, data=accepted).status_code == 200
    config = _config(root, stopped_vm)
    assert config["net1"] == accepted["net1"]
    assert config["net2"].endswith("bridge=vmbr0,link_down=yes,rate=12.5,mtu=1500")


def test_qemu_drive_strings_are_checked_and_their_storage_must_exist(root, stopped_vm):
    path = f"/nodes/pve1/qemu/{stopped_vm}/config"
    cases = {
        "scsi1": (
            "local-lvm:1,cache=weird",
            "invalid format - format error\nscsi1.cache: value 'weird' does not have a value "
            "in the enumeration 'none, writethrough, writeback, unsafe, directsync'\n",
        ),
        "virtio1": (
            "local-lvm:1,iothread=1,aio=fast",
            "invalid format - format error\nvirtio1.aio: value 'fast' does not have a value "
            "in the enumeration 'native, threads, io_uring'\n",
        ),
        "sata1": (
            "local-lvm:1,size=lots",
            "invalid format - format error\nsata1.size: invalid format - "
            "value does not look like a valid disk size: lots\n\n",
        ),
        "ide1": (
            "debian-12.iso,media=cdrom",
            "invalid format - format error\nide1.file: invalid format - "
            "unable to parse volume ID 'debian-12.iso'\n\n",
        ),
        "scsi2": (
            "cache=none",
            "invalid format - format error\nscsi2.file: property is missing and it is not optional\n",
        ),
    }
    for key, (value, message) in cases.items():
        assert _errors(root.put(path, data={key: value})) == {key: message}, value

    # A volume on a storage nobody configured: PVE's storage lookup fails (500).
    missing = root.put(path, data={"scsi1": "tank-nvme:vm-123-disk-0,discard=on"})
    assert missing.status_code == 500
    assert missing.reason_phrase == "storage 'tank-nvme' does not exist"
    # A new disk needs a storage that takes VM images ('local' holds ISOs and backups).
    assert _errors(root.put(path, data={"scsi1": "local:4"})) == {
        "storage": "storage 'local' does not support vm images"
    }
    assert "scsi1" not in _config(root, stopped_vm)

    good = {
        "scsi1": "local-lvm:2,cache=writeback,discard=on,ssd=1,iothread=1",
        "ide2": "local:iso/debian-12.7.0-amd64-netinst.iso,media=cdrom",
        "virtio1": "shared-nfs:1,aio=native,backup=0",
        "sata1": "none,media=cdrom",
    }
    upid = expect_data(root.post(path, data=good))
    assert root.wait(upid)["exitstatus"] == "OK"
    config = _config(root, stopped_vm)
    assert config["scsi1"].startswith("local-lvm:vm-") and "cache=writeback" in config["scsi1"]
    assert config["ide2"] == good["ide2"]


def test_cloud_init_ipconfig_follows_pve_qm_ipconfig(root, stopped_vm):
    path = f"/nodes/pve1/qemu/{stopped_vm}/config"
    cases = {
        "ip=10.0.0.300/24,gw=10.0.0.1": (
            "invalid format - format error\nipconfig0.ip: invalid format - "
            "value does not look like a valid ipv4 network configuration\n\n"
        ),
        "gw=10.0.0.1": (
            "invalid format - format error\n"
            "ipconfig0.ip: missing property - 'ipconfig0.gw' requires this property\n"
        ),
        "ip=dhcp,netmask=24": (
            "invalid format - invalid key in comma-separated list property: netmask\n"
        ),
        "10.0.0.5/24": (
            "invalid format - value without key, but schema does not define a default key\n"
        ),
    }
    for value, message in cases.items():
        assert _errors(root.put(path, data={"ipconfig0": value})) == {"ipconfig0": message}
    good = {"ipconfig0": "ip=192.0.2.10/24,gw=192.0.2.1", "ipconfig1": "ip=dhcp,ip6=auto"}
    assert root.put(path, data=good).status_code == 200
    assert _config(root, stopped_vm)["ipconfig0"] == good["ipconfig0"]


def test_lxc_network_rootfs_and_mount_points_are_checked(root, unique_vmid):
    base = {"vmid": unique_vmid, "ostemplate": TEMPLATE, "hostname": f"ct{unique_vmid}"}
    cases = {
        "net0": (
            "bridge=vmbr0,ip=dhcp",
            "invalid format - format error\nnet0.name: property is missing and it is not optional\n",
        ),
        "net1": (
            "name=eth1,bridge=vmbr0,ip=10.1.2.3",
            "invalid format - format error\nnet1.ip: invalid format - "
            "value does not look like a valid ipv4 network configuration\n\n",
        ),
        "net2": (
            "name=eth2,bridge=vmbr0,tag=5000",
            "invalid format - format error\nnet2.tag: value must have a maximum value of 4094\n",
        ),
        "rootfs": (
            "local-lvm:8,quota=sometimes",
            "invalid format - format error\nrootfs.quota: type check ('boolean') failed - got 'sometimes'\n",
        ),
        "mp0": (
            "local-lvm:4,mp=/srv/../etc",
            "invalid format - format error\nmp0.mp: invalid format - "
            "/srv/../etc contains illegal character sequences\n\n",
        ),
        "mp1": (
            "local-lvm:4",
            "invalid format - format error\nmp1.mp: property is missing and it is not optional\n",
        ),
    }
    for key, (value, message) in cases.items():
        assert _errors(root.post("/nodes/pve2/lxc", data={**base, key: value})) == {key: message}
    assert _errors(root.post("/nodes/pve2/lxc", data={**base, "rootfs": "local:8"})) == {
        "storage": "storage 'local' does not support container directories"
    }
    # Nothing was created by the refused requests.
    assert root.get(f"/nodes/pve2/lxc/{unique_vmid}/config").status_code == 500

    good = {
        **base,
        "net0": "name=eth0,bridge=vmbr0,ip=192.0.2.20/24,gw=192.0.2.1,firewall=1,tag=20",
        "net1": "name=eth1,bridge=vmbr1,ip=dhcp,ip6=auto",
        "rootfs": "local-lvm:8",
        "mp0": "local-lvm:4,mp=/srv/data,backup=1",
    }
    upid = expect_data(root.post("/nodes/pve2/lxc", data=good))
    assert root.wait(upid)["exitstatus"] == "OK"
    config = root.get(f"/nodes/pve2/lxc/{unique_vmid}/config").json()["data"]
    assert config["net1"].startswith("name=eth1,bridge=vmbr1,ip=dhcp,ip6=auto")
    assert config["mp0"].startswith("local-lvm:vm-") and ",mp=/srv/data,backup=1," in config["mp0"]
    root.wait(root.delete(f"/nodes/pve2/lxc/{unique_vmid}").json()["data"])


def test_a_nic_on_a_bridge_the_node_lacks_fails_the_start_like_pve(root, stopped_vm):
    path = f"/nodes/pve1/qemu/{stopped_vm}/config"
    # PVE stores the NIC (the config write does not look at the node's bridges) ...
    assert root.put(path, data={"net1": "virtio,bridge=vmbr77"}).status_code == 200
    # ... and the start fails when the tap device cannot be plugged.
    upid = expect_data(root.post(f"/nodes/pve1/qemu/{stopped_vm}/status/start"))
    assert root.wait(upid)["exitstatus"] == "start failed: QEMU exited with code 1"
    log = root.get(f"/nodes/pve1/tasks/{upid}/log").json()["data"]
    assert "bridge 'vmbr77' does not exist" in [line["t"] for line in log]
    status = root.get(f"/nodes/pve1/qemu/{stopped_vm}/status/current").json()["data"]
    assert status["status"] == "stopped"

    # On an existing bridge the same guest starts.
    assert root.put(path, data={"net1": "virtio,bridge=vmbr1,tag=30"}).status_code == 200
    upid = expect_data(root.post(f"/nodes/pve1/qemu/{stopped_vm}/status/start"))
    assert root.wait(upid)["exitstatus"] == "OK"


def test_proxmoxer_gets_the_parameter_error_for_a_bad_nic(server, unique_vmid):
    cert = server.settings.data_dir / "tls" / "pve-ssl.pem"
    prox = ProxmoxAPI(
        "127.0.0.1",
        port=server.port,
        verify_ssl=str(cert),
        timeout=30,
        user="root@pam",
        password=ROOT_PASSWORD,
    )
    with pytest.raises(ResourceException) as refused:
        prox.nodes("pve3").qemu.post(
            vmid=unique_vmid, name="proxmoxer-bad-nic", net0="virtio,bridge=vmbr0,tag=99999"
        )
    assert refused.value.status_code == 400
    assert refused.value.errors == {
        "net0": "invalid format - format error\nnet0.tag: value must have a maximum value of 4094\n"
    }
    assert unique_vmid not in [g["vmid"] for g in prox.nodes("pve3").qemu.get()]


@pytest.mark.parametrize("profile", ["small", "medium"])
def test_every_seeded_guest_config_passes_its_formats(root, profile):
    """What the seeds write is what a PVE API would take back (a PUT of the same strings)."""
    guests = plan(PROFILES[profile], 7)["guests"]
    checked = 0
    for guest in guests[:40]:
        keys = [
            k for k in guest["config"] if k.startswith(("net", "scsi", "ipconfig", "rootfs", "mp"))
        ]
        kind = guest["type"]
        # Checked through the live contract without touching the seeded guests: a
        # parameter error comes before the guest is even looked up.
        probe = root.put(
            f"/nodes/pve1/{kind}/999999/config",
            data={k: guest["config"][k] for k in keys},
        )
        assert probe.status_code != 400, (guest["vmid"], probe.text)
        checked += len(keys)
    assert checked > 40
