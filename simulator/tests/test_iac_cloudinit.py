"""The cloud-init IaC flow through proxmoxer: drive allocation, pending vs
current, dumps, template conversion, linked and full clones."""

from __future__ import annotations

import hashlib
from urllib.parse import quote

import pytest
from proxmoxer.core import ResourceException
from proxmoxer.tools import Tasks
from simtest_support import close_proxmoxer, proxmoxer_client

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDsimulated ops@workstation"


@pytest.fixture(scope="module")
def prox(server):
    api = proxmoxer_client(server)
    yield api
    close_proxmoxer(api)


def _wait(prox, upid) -> dict:
    return Tasks.blocking_status(prox, upid, polling_interval=0.02)


def _ok(prox, upid) -> list[str]:
    status = _wait(prox, upid)
    log = Tasks.decode_log(prox.nodes(status["node"]).tasks(upid).log.get())
    assert status["exitstatus"] == "OK", log
    return log.splitlines()


def _cloud_vm(prox, vmid: int, **extra) -> None:
    _ok(
        prox,
        prox.nodes("pve1").qemu.post(
            vmid=vmid,
            name=f"ci-{vmid}",
            scsi0="local-lvm:2",
            net0="virtio,bridge=vmbr0",
            ide2="local-lvm:cloudinit",
            ciuser="ops",
            sshkeys=quote(KEY, safe=""),
            ipconfig0="ip=10.60.0.5/24,gw=10.60.0.1",
            nameserver="10.60.0.53",
            searchdomain="lab.example",
            **extra,
        ),
    )


def _volumes(prox, storage: str, vmid: int) -> dict[str, dict]:
    return {v["volid"]: v for v in prox.nodes("pve1").storage(storage).content.get(vmid=vmid)}


def test_cloudinit_drive_is_allocated_dumped_and_regenerated(prox, unique_vmid):
    vmid = unique_vmid
    _cloud_vm(prox, vmid)
    vm = prox.nodes("pve1").qemu(vmid)
    config = vm.config.get()
    assert config["ide2"] == f"local-lvm:vm-{vmid}-cloudinit,media=cdrom"
    volume = _volumes(prox, "local-lvm", vmid)[f"local-lvm:vm-{vmid}-cloudinit"]
    assert (volume["size"], volume["format"], volume["content"]) == (4 * 1024**2, "raw", "images")
    # The data disk keeps number 0: the cloud-init volume takes no disk number.
    assert config["scsi0"].startswith(f"local-lvm:vm-{vmid}-disk-0,")
    with pytest.raises(ResourceException, match="cloud-init drive is already attached at 'ide2'"):
        vm.config.put(sata1="local-lvm:cloudinit")

    mac = config["net0"].split(",")[0].split("=")[1].lower()
    user = vm.cloudinit.dump.get(type="user")
    assert user == (
        "#cloud-config\n"
        f"hostname: ci-{vmid}\n"
        "manage_etc_hosts: true\n"
        f"fqdn: ci-{vmid}.lab.example\n"
        "user: ops\n"
        "ssh_authorized_keys:\n"
        f"  - {KEY}\n"
        "chpasswd:\n"
        "  expire: False\n"
        "users:\n"
        "  - default\n"
        "package_upgrade: true\n"
    )
    network = vm.cloudinit.dump.get(type="network")
    assert network == (
        "version: 1\n"
        "config:\n"
        "    - type: physical\n"
        "      name: eth0\n"
        f"      mac_address: '{mac}'\n"
        "      subnets:\n"
        "      - type: static\n"
        "        address: '10.60.0.5'\n"
        "        netmask: '255.255.255.0'\n"
        "        gateway: '10.60.0.1'\n"
        "    - type: nameserver\n"
        "      address:\n"
        "      - '10.60.0.53'\n"
        "      search:\n"
        "      - 'lab.example'\n"
    )
    meta = vm.cloudinit.dump.get(type="meta")
    assert meta == f"instance-id: {hashlib.sha1((user + network).encode()).hexdigest()}\n"

    # ConfigDrive2 (citype, or a Windows ostype) writes ENI-style network data.
    vm.config.put(citype="configdrive2")
    assert vm.cloudinit.dump.get(type="network") == (
        "auto lo\n"
        "iface lo inet loopback\n"
        "\n"
        "        dns_nameservers 10.60.0.53\n"
        "        dns_search lab.example\n"
        "auto eth0\n"
        "iface eth0 inet static\n"
        "        address 10.60.0.5\n"
        "        netmask 255.255.255.0\n"
        "        gateway 10.60.0.1\n"
    )
    assert '"network_config": { "content_path": "/content/0000" }' in vm.cloudinit.dump.get(
        type="meta"
    )
    vm.config.put(delete="citype")
    vm.cloudinit.put()

    # Nothing pending after creation; a config change is pending until the
    # drive is regenerated (PUT …/cloudinit, or a start).
    assert all("pending" not in item for item in vm.cloudinit.get())
    vm.config.put(ciuser="admin", cipassword="s3cret-pw", ipconfig0="ip=dhcp")
    pending = {item["key"]: item for item in vm.cloudinit.get()}
    assert pending["ciuser"] == {"key": "ciuser", "value": "ops", "pending": "admin"}
    assert pending["ipconfig0"]["pending"] == "ip=dhcp"
    assert pending["cipassword"] == {"key": "cipassword", "pending": "**********"}
    assert "user: admin\npassword: s3cret-pw\n" in vm.cloudinit.dump.get(type="user")
    assert "      - type: dhcp4\n" in vm.cloudinit.dump.get(type="network")
    assert vm.cloudinit.dump.get(type="meta") != meta
    vm.cloudinit.put()
    after = {item["key"]: item for item in vm.cloudinit.get()}
    assert all("pending" not in item for item in after.values())
    assert after["ciuser"]["value"] == "admin" and after["cipassword"]["value"] == "**********"
    vm.config.put(delete="searchdomain")
    assert {"key": "searchdomain", "value": "lab.example", "delete": 1} in vm.cloudinit.get()
    _ok(prox, vm.status.start.post())
    assert all("pending" not in i and "delete" not in i for i in vm.cloudinit.get())
    _ok(prox, vm.status.stop.post())

    # Removing the drive frees its volume at once (it never becomes unusedN).
    vm.config.put(delete="ide2")
    assert f"local-lvm:vm-{vmid}-cloudinit" not in _volumes(prox, "local-lvm", vmid)
    assert not any(k.startswith("unused") for k in vm.config.get())
    vm.config.put(scsi5="local-lvm:cloudinit")
    assert vm.config.get()["scsi5"] == f"local-lvm:vm-{vmid}-cloudinit,media=cdrom"
    _ok(prox, vm.delete())
    assert _volumes(prox, "local-lvm", vmid) == {}


def test_template_and_clones_of_a_cloudinit_template(prox, unique_vmid):
    template, linked, full, broken = (unique_vmid + i for i in range(4))
    _cloud_vm(prox, template, description="golden image")
    tpl = prox.nodes("pve1").qemu(template)
    upid = tpl.template.post()
    if upid:
        _ok(prox, upid)
    config = tpl.config.get()
    assert config["template"] == 1
    assert config["scsi0"].startswith(f"local-lvm:base-{template}-disk-0,")
    assert config["ide2"] == f"local-lvm:vm-{template}-cloudinit,media=cdrom"
    assert set(_volumes(prox, "local-lvm", template)) == {
        f"local-lvm:base-{template}-disk-0",
        f"local-lvm:vm-{template}-cloudinit",
    }
    with pytest.raises(ResourceException, match="already a template"):
        tpl.template.post()

    # Linked clone: its disk is a child of the template's base volume; its
    # cloud-init drive is its own; it is not a template.
    log = _ok(prox, tpl.clone.post(newid=linked, name="web-1"))
    assert f"create linked clone of drive(s) from VM {template}" in log[0]
    assert f"ide2: successfully created disk 'local-lvm:vm-{linked}-cloudinit,media=cdrom'" in log
    clone = prox.nodes("pve1").qemu(linked)
    config = clone.config.get()
    assert "template" not in config and "lock" not in config
    assert config["scsi0"].startswith(f"local-lvm:base-{template}-disk-0/vm-{linked}-disk-0,")
    assert config["ide2"] == f"local-lvm:vm-{linked}-cloudinit,media=cdrom"
    assert config["ciuser"] == "ops" and config["description"] == "golden image"
    assert set(_volumes(prox, "local-lvm", linked)) == {
        f"local-lvm:base-{template}-disk-0/vm-{linked}-disk-0",
        f"local-lvm:vm-{linked}-cloudinit",
    }
    resources = {r["vmid"]: r for r in prox.cluster.resources.get(type="vm")}
    assert resources[linked]["template"] == 0 and resources[template]["template"] == 1
    assert clone.status.current.get().get("template", 0) == 0
    assert "hostname: web-1\n" in clone.cloudinit.dump.get(type="user")
    # A clone can be configured and started like any VM.
    clone.config.put(ipconfig0="ip=10.60.0.21/24,gw=10.60.0.1", sshkeys=quote(KEY, safe=""))
    _ok(prox, clone.status.start.post())
    assert all("pending" not in item for item in clone.cloudinit.get())
    _ok(prox, clone.status.stop.post())

    # Full clone onto another storage: every volume, the cloud-init one too, lands there.
    _ok(prox, tpl.clone.post(newid=full, name="db-1", full=1, storage="shared-nfs"))
    config = prox.nodes("pve1").qemu(full).config.get()
    assert "template" not in config
    assert config["scsi0"].startswith("shared-nfs:") and "base-" not in config["scsi0"]
    assert f"vm-{full}-cloudinit" in config["ide2"] and config["ide2"].startswith("shared-nfs:")

    # A clone whose task fails leaves no half-created guest behind.
    prox.nodes("pve1").storage("local-lvm").content.post(
        vmid=broken, filename=f"vm-{broken}-cloudinit", size="4M"
    )
    status = _wait(prox, tpl.clone.post(newid=broken, name="broken"))
    assert status["exitstatus"] == (
        f"clone failed: volume 'local-lvm:vm-{broken}-cloudinit' already exists"
    )
    with pytest.raises(ResourceException, match="does not exist"):
        prox.nodes("pve1").qemu(broken).config.get()
    assert broken not in {r["vmid"] for r in prox.cluster.resources.get(type="vm")}
    assert set(_volumes(prox, "local-lvm", broken)) == {f"local-lvm:vm-{broken}-cloudinit"}
    _ok(prox, prox.nodes("pve1").storage("local-lvm").content(f"vm-{broken}-cloudinit").delete())
    # The template's base volume stays while a linked clone is based on it.
    status = _wait(prox, tpl.delete())
    assert status["exitstatus"] == (
        f"base volume 'base-{template}-disk-0' is still in use by linked cloned"
    )
    for vmid in (linked, full, template):
        _ok(prox, prox.nodes("pve1").qemu(vmid).delete())
    assert _volumes(prox, "local-lvm", template) == {}


def test_import_from_an_uploaded_image_and_another_guest(prox, tmp_path, unique_vmid):
    source, imported, copied = unique_vmid, unique_vmid + 1, unique_vmid + 2
    store = f"imp{unique_vmid}"
    prox.storage.post(storage=store, type="dir", path=f"/srv/{store}", content="import")
    image = tmp_path / "noble-server-cloudimg-amd64.qcow2"
    image.write_bytes(b"QFI\xfb" + bytes(3 * 1024**2 - 4))
    try:
        with image.open("rb") as handle:
            _ok(
                prox,
                prox.nodes("pve1").storage(store).upload.post(content="import", filename=handle),
            )
        volid = f"{store}:import/{image.name}"
        node = prox.nodes("pve1")
        log = _ok(
            prox,
            node.qemu.post(
                vmid=imported,
                name="from-image",
                scsi0=f"local-lvm:0,import-from={volid},discard=on",
                ide2="local-lvm:cloudinit",
            ),
        )
        config = node.qemu(imported).config.get()
        assert config["scsi0"] == f"local-lvm:vm-{imported}-disk-0,discard=on,size=3M", log
        assert f"  imported {volid} to local-lvm:vm-{imported}-disk-0" in log
        volumes = _volumes(prox, "local-lvm", imported)
        assert volumes[f"local-lvm:vm-{imported}-disk-0"]["size"] == 3 * 1024**2
        # The source stays where it was.
        assert volid in {v["volid"] for v in node.storage(store).content.get()}

        # Another guest's disk can be the source too.
        _ok(prox, node.qemu.post(vmid=source, scsi0="local-lvm:1"))
        _ok(
            prox,
            node.qemu.post(
                vmid=copied, scsi0=f"local-lvm:0,import-from=local-lvm:vm-{source}-disk-0"
            ),
        )
        assert node.qemu(copied).config.get()["scsi0"] == f"local-lvm:vm-{copied}-disk-0,size=1G"

        # PVE's refusals, before anything is allocated.
        refusals = {
            f"local-lvm:2,import-from={volid}": "requires special syntax",
            "local-lvm:0,import-from=local:iso/debian-12.9.0-amd64-netinst.iso": "wrong type 'iso'",
            f"local-lvm:0,import-from={store}:import/absent.qcow2": "could not get size of",
            f"local-lvm:0,import-from=local-lvm:vm-{imported}-cloudinit": "cloudinit disk",
        }
        for value, message in refusals.items():
            with pytest.raises(ResourceException, match=message):
                node.qemu(copied).config.put(scsi1=value)
        for vmid in (imported, source, copied):
            _ok(prox, node.qemu(vmid).delete())
        _ok(prox, node.storage(store).content(volid).delete())
    finally:
        prox.storage(store).delete()
