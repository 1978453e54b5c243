"""The cloud-init IaC flow as an Ansible user writes it (``community.proxmox``).

Upload a cloud image, import it into a cloud-init template, linked-clone the
template, give the clone its ``ipconfig0`` and ``sshkeys``, start it, take a
snapshot, change it, roll back, destroy.  The build playbook runs twice: the
second run must report ``changed: false`` for every task whose module checks
state first.  The tasks that always act (``update: true`` of ``proxmox_kvm``
and ``state: rollback`` of ``proxmox_snap`` report a change unconditionally
in the collection) must succeed again, and the rollback must leave the clone
as the first run left it.
"""

from __future__ import annotations

import struct
import uuid
from urllib.parse import unquote

import pytest
from simtest_support import ansible_playbook, close_proxmoxer, proxmoxer_client

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAnsibleIacKeyForTheSimulator ops@ansible"
# A qcow2 header (magic, version 3) declaring a 3 GiB virtual disk; the rest
# of the file is padding, as in a sparse cloud image.  The imported disk is as
# big as the header says, as qemu-server sizes it by `qemu-img info`.
VIRTUAL_SIZE = 3 * 1024**3

BUILD = """\
- name: image storage
  community.proxmox.proxmox_storage:
    name: "{{ store }}"
    type: dir
    dir_options:
      path: "/srv/{{ store }}"
    content:
      - import
      - iso
- name: cloud image
  community.proxmox.proxmox_template:
    node: pve1
    storage: "{{ store }}"
    content_type: import
    src: "{{ image }}"
- name: template vm
  community.proxmox.proxmox_kvm:
    node: pve1
    vmid: "{{ tmplid }}"
    name: "tmpl-{{ tmplid }}"
    memory: 1024
    cores: 1
    scsihw: virtio-scsi-pci
    scsi:
      scsi0: "local-lvm:0,import-from={{ store }}:import/{{ image | basename }}"
    ide:
      ide2: "local-lvm:cloudinit"
    net:
      net0: "virtio,bridge=vmbr0"
    serial:
      serial0: socket
    vga: serial0
    boot: order=scsi0
    ciuser: ops
    state: present
# `template: true` above would only flag the config (PVE keeps vm-N-disk-M and
# refuses a linked clone of it); `state: template` is PVE's template_create.
- name: cloud-init template
  community.proxmox.proxmox_kvm:
    node: pve1
    vmid: "{{ tmplid }}"
    state: template
- name: linked clone
  community.proxmox.proxmox_kvm:
    node: pve1
    vmid: "{{ tmplid }}"
    clone: "tmpl-{{ tmplid }}"
    newid: "{{ vmid }}"
    name: "web-{{ vmid }}"
    full: false
    timeout: 60
- name: cloud-init settings
  community.proxmox.proxmox_kvm:
    node: pve1
    vmid: "{{ vmid }}"
    update: true
    ipconfig:
      ipconfig0: "ip=10.70.0.10/24,gw=10.70.0.1"
    sshkeys: "{{ sshkey }}"
    nameservers:
      - 10.70.0.53
- name: start
  community.proxmox.proxmox_kvm:
    node: pve1
    vmid: "{{ vmid }}"
    state: started
- name: snapshot
  community.proxmox.proxmox_snap:
    vmid: "{{ vmid }}"
    snapname: provisioned
    description: after cloud-init
    vmstate: true
- name: drift
  community.proxmox.proxmox_kvm:
    node: pve1
    vmid: "{{ vmid }}"
    update: true
    memory: 2048
    ipconfig:
      ipconfig0: "ip=10.70.0.99/24,gw=10.70.0.1"
- name: rollback
  community.proxmox.proxmox_snap:
    vmid: "{{ vmid }}"
    snapname: provisioned
    state: rollback
"""

ALWAYS_ACT = {"cloud-init settings", "drift", "rollback"}

TEARDOWN = """\
- name: clone gone
  community.proxmox.proxmox_kvm:
    node: pve1
    vmid: "{{ vmid }}"
    state: absent
    force: true
- name: template gone
  community.proxmox.proxmox_kvm:
    node: pve1
    vmid: "{{ tmplid }}"
    state: absent
- name: image gone
  community.proxmox.proxmox_template:
    node: pve1
    storage: "{{ store }}"
    content_type: import
    template: "{{ image | basename }}"
    state: absent
- name: storage gone
  community.proxmox.proxmox_storage:
    name: "{{ store }}"
    type: dir
    state: absent
"""


@pytest.fixture(scope="module")
def prox(server):
    api = proxmoxer_client(server)
    yield api
    close_proxmoxer(api)


def _cloud_image(path) -> None:
    header = b"QFI\xfb" + struct.pack(">IQIIQ", 3, 0, 0, 16, VIRTUAL_SIZE)
    path.write_bytes(header + b"\0" * (196_608 - len(header)))


def _check_built(prox, names) -> None:
    vmid, tmplid, store = names["vmid"], names["tmplid"], names["store"]
    template = prox.nodes("pve1").qemu(tmplid).config.get()
    assert template["template"] == 1
    assert template["scsi0"] == f"local-lvm:base-{tmplid}-disk-0,size=3G"
    assert template["ide2"] == f"local-lvm:vm-{tmplid}-cloudinit,media=cdrom"
    clone = prox.nodes("pve1").qemu(vmid).config.get()
    assert "template" not in clone
    # A linked clone: its disk is a child of the template's base volume.
    assert clone["scsi0"].startswith(f"local-lvm:base-{tmplid}-disk-0/vm-{vmid}-disk-0,")
    assert clone["ide2"] == f"local-lvm:vm-{vmid}-cloudinit,media=cdrom"
    # The rollback undid the drift: config and derived figures are the snapshot's.
    assert clone["ipconfig0"] == "ip=10.70.0.10/24,gw=10.70.0.1"
    assert int(clone["memory"]) == 1024
    assert unquote(clone["sshkeys"]).strip() == KEY
    assert clone["nameserver"] == "10.70.0.53"
    assert clone["parent"] == "provisioned"
    status = prox.nodes("pve1").qemu(vmid).status.current.get()
    assert (status["status"], status["maxmem"]) == ("running", 1024 * 1024**2)
    user = prox.nodes("pve1").qemu(vmid).cloudinit.dump.get(type="user")
    assert f"  - {KEY}\n" in user
    network = prox.nodes("pve1").qemu(vmid).cloudinit.dump.get(type="network")
    assert "10.70.0.10" in network and "10.70.0.99" not in network
    images = {
        v["volid"]: v for v in prox.nodes("pve1").storage(store).content.get(content="import")
    }
    assert names["volid"] in images
    disks = {v["volid"]: v for v in prox.nodes("pve1").storage("local-lvm").content.get()}
    assert disks[f"local-lvm:base-{tmplid}-disk-0"]["size"] == VIRTUAL_SIZE
    assert disks[f"local-lvm:base-{tmplid}-disk-0/vm-{vmid}-disk-0"]["size"] == VIRTUAL_SIZE
    assert f"local-lvm:vm-{vmid}-cloudinit" in disks
    assert images[names["volid"]]["size"] == 196_608  # the file, listed as uploaded


def test_cloud_init_iac_playbook_converges_and_tears_down(server, prox, tmp_path):
    base = 7000 + uuid.uuid4().int % 90000 * 2
    store = f"img{uuid.uuid4().hex[:6]}"
    image = tmp_path / f"cloud-{base}.qcow2"
    _cloud_image(image)
    names = {
        "tmplid": base,
        "vmid": base + 1,
        "store": store,
        "image": str(image),
        "sshkey": KEY,
        "volid": f"{store}:import/{image.name}",
    }

    first = ansible_playbook(server, tmp_path, "iac", BUILD, names)
    assert all(r["changed"] for r in first.values()), {k: v["changed"] for k, v in first.items()}
    _check_built(prox, names)

    again = ansible_playbook(server, tmp_path, "iac-again", BUILD, names)
    assert {k for k, v in again.items() if v["changed"]} == ALWAYS_ACT, {
        k: v.get("msg") for k, v in again.items()
    }
    _check_built(prox, names)

    gone = ansible_playbook(server, tmp_path, "teardown", TEARDOWN, names)
    assert all(r["changed"] for r in gone.values()), {k: v.get("msg") for k, v in gone.items()}
    vmids = {g["vmid"] for g in prox.nodes("pve1").qemu.get()}
    assert not {names["vmid"], names["tmplid"]} & vmids
    assert store not in {s["storage"] for s in prox.storage.get()}
    left = [
        v
        for v in prox.nodes("pve1").storage("local-lvm").content.get()
        if v.get("vmid") in (names["vmid"], names["tmplid"])
    ]
    assert not left, left


def test_template_flag_at_create_is_a_template_without_base_volumes(prox, unique_vmid):
    """What ``template: true`` of proxmox_kvm does in PVE: the config says template,
    the disks stay ``vm-N-disk-M``, so only a full clone works."""
    from proxmoxer.core import ResourceException
    from proxmoxer.tools import Tasks

    vmid = unique_vmid
    upid = prox.nodes("pve1").qemu.post(
        vmid=vmid, name=f"flagged-{vmid}", scsi0="local-lvm:1", template=1
    )
    assert Tasks.blocking_status(prox, upid, polling_interval=0.02)["exitstatus"] == "OK"
    guest = prox.nodes("pve1").qemu(vmid)
    config = guest.config.get()
    assert config["template"] == 1
    assert config["scsi0"].startswith(f"local-lvm:vm-{vmid}-disk-0,")
    assert guest.status.current.get()["template"] == 1
    listed = {g["vmid"]: g for g in prox.nodes("pve1").qemu.get()}
    assert listed[vmid]["template"] == 1
    with pytest.raises(ResourceException, match="Linked clone feature is not supported"):
        guest.clone.post(newid=vmid + 1, full=0)
    assert vmid + 1 not in {g["vmid"] for g in prox.nodes("pve1").qemu.get()}
    upid = guest.clone.post(newid=vmid + 1, full=1, name=f"full-{vmid}")
    assert Tasks.blocking_status(prox, upid, polling_interval=0.02)["exitstatus"] == "OK"
    copy = prox.nodes("pve1").qemu(vmid + 1).config.get()
    assert "template" not in copy and copy["scsi0"].startswith(f"local-lvm:vm-{vmid + 1}-disk-0,")
    for gone in (vmid + 1, vmid):
        upid = prox.nodes("pve1").qemu(gone).delete()
        assert Tasks.blocking_status(prox, upid, polling_interval=0.02)["exitstatus"] == "OK"
