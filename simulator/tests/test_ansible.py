"""Ansible's ``community.proxmox`` modules against a running simulator (TLS).

Playbooks batch the tasks (Ansible costs seconds per start).  The converge
playbook runs twice: the second run must report ``changed: false`` for every
task, which is what users rely on when they re-apply their inventory.
"""

from __future__ import annotations

import uuid

import httpx
import pytest
from simtest_support import Session, ansible_playbook

CONVERGE = """\
- name: vm
  community.proxmox.proxmox_kvm:
    node: pve1
    vmid: "{{ vmid }}"
    name: "ansible-{{ vmid }}"
    memory: 1024
    cores: 1
    scsi:
      scsi0: "local-lvm:4"
    net:
      net0: "virtio,bridge=vmbr0"
    state: present
- name: container
  community.proxmox.proxmox:
    node: pve1
    vmid: "{{ ctid }}"
    hostname: "ct-{{ ctid }}"
    ostemplate: "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"
    disk: "local-lvm:2"
    password: "ct-password-1"
    # The module's update path diffs write-only options (password, cmode)
    # against the config and would always report a change.
    update: false
    state: present
- name: pool
  community.proxmox.proxmox_pool:
    poolid: "{{ pool }}"
    comment: managed by ansible
- name: pool storage
  community.proxmox.proxmox_pool_member:
    poolid: "{{ pool }}"
    members:
      - storage: local
- name: ha resource
  community.proxmox.proxmox_cluster_ha_resources:
    name: "vm:{{ vmid }}"
    state: present
    hastate: started
    comment: ansible
- name: vm firewall
  community.proxmox.proxmox_firewall:
    level: vm
    vmid: "{{ vmid }}"
    state: present
    rules:
      - type: in
        action: ACCEPT
        proto: tcp
        dport: "22"
        pos: 0
        enable: true
      - type: in
        action: DROP
        proto: tcp
        dport: "23"
        pos: 1
        enable: true
- name: bridge
  community.proxmox.proxmox_node_network:
    node: pve2
    state: present
    iface: "{{ bridge }}"
    iface_type: bridge
    cidr: 10.88.0.1/24
    autostart: true
    comments: ansible bridge
- name: group
  community.proxmox.proxmox_group:
    name: "{{ group }}"
    comment: ansible operators
- name: user
  community.proxmox.proxmox_user:
    name: "{{ user }}@pve"
    comment: ansible user
    email: ops@example.invalid
    groups:
      - "{{ group }}"
- name: role
  community.proxmox.proxmox_role:
    roleid: "{{ role }}"
    privs:
      - VM.Audit
      - VM.PowerMgmt
- name: acl
  community.proxmox.proxmox_access_acl:
    path: "/vms/{{ vmid }}"
    type: group
    ugid: "{{ group }}"
    roleid: "{{ role }}"
    state: present
"""

# proxmox_pool_member compares the API's integer vmids with its own string
# vmids, so a rerun with a VM member fails in the module itself (PVE declares
# members' vmid an integer); VM membership is therefore applied once, here.
ACTIONS = """\
- name: pool member
  community.proxmox.proxmox_pool_member:
    poolid: "{{ pool }}"
    members:
      - vm: "{{ vmid }}"
- name: start
  community.proxmox.proxmox_kvm:
    node: pve1
    vmid: "{{ vmid }}"
    state: started
- name: snapshot
  community.proxmox.proxmox_snap:
    vmid: "{{ vmid }}"
    snapname: before-upgrade
    state: present
- name: backup
  community.proxmox.proxmox_backup:
    mode: include
    vmids:
      - "{{ vmid }}"
    storage: local
    compress: zstd
    description: "ansible {{ '{{' }}guestname{{ '}}' }}"
    wait: true
    wait_timeout: 60
- name: archives
  community.proxmox.proxmox_storage_contents_info:
    node: pve1
    storage: local
    content: backup
    vmid: "{{ vmid }}"
- name: stop
  community.proxmox.proxmox_kvm:
    node: pve1
    vmid: "{{ vmid }}"
    state: stopped
    force: true
- name: clone
  community.proxmox.proxmox_kvm:
    node: pve1
    vmid: "{{ vmid }}"
    clone: "ansible-{{ vmid }}"
    newid: "{{ cloneid }}"
    name: "clone-{{ cloneid }}"
    full: true
    timeout: 60
- name: tasks
  community.proxmox.proxmox_tasks_info:
    node: pve1
- name: apply network
  community.proxmox.proxmox_node_network:
    node: pve2
    state: apply
"""

TEARDOWN = """\
- name: acl gone
  community.proxmox.proxmox_access_acl:
    path: "/vms/{{ vmid }}"
    type: group
    ugid: "{{ group }}"
    roleid: "{{ role }}"
    state: absent
- name: firewall rule gone
  community.proxmox.proxmox_firewall:
    level: vm
    vmid: "{{ vmid }}"
    state: absent
    pos: 1
- name: ha gone
  community.proxmox.proxmox_cluster_ha_resources:
    name: "vm:{{ vmid }}"
    state: absent
- name: pool storage gone
  community.proxmox.proxmox_pool_member:
    poolid: "{{ pool }}"
    members:
      - storage: local
    state: absent
- name: clone gone
  community.proxmox.proxmox_kvm:
    node: pve1
    vmid: "{{ cloneid }}"
    state: absent
# Destroying a guest also takes it out of its pool (the module cannot remove
# VM members itself, see ACTIONS).
- name: vm gone
  community.proxmox.proxmox_kvm:
    node: pve1
    vmid: "{{ vmid }}"
    state: absent
- name: pool gone
  community.proxmox.proxmox_pool:
    poolid: "{{ pool }}"
    state: absent
- name: container gone
  community.proxmox.proxmox:
    node: pve1
    vmid: "{{ ctid }}"
    state: absent
- name: bridge gone
  community.proxmox.proxmox_node_network:
    node: pve2
    state: absent
    iface: "{{ bridge }}"
- name: user gone
  community.proxmox.proxmox_user:
    name: "{{ user }}@pve"
    state: absent
- name: role gone
  community.proxmox.proxmox_role:
    roleid: "{{ role }}"
    state: absent
- name: group gone
  community.proxmox.proxmox_group:
    name: "{{ group }}"
    state: absent
"""


@pytest.fixture(scope="module")
def api(server):
    with httpx.Client(base_url=server.base_url + "/api2/json", verify=False, timeout=30) as c:
        yield Session(c)


def test_community_proxmox_modules_converge_act_and_tear_down(server, api, tmp_path):
    base = 7000 + uuid.uuid4().int % 90000 * 3
    tag = uuid.uuid4().hex[:6]
    names = {
        "vmid": base,
        "ctid": base + 1,
        "cloneid": base + 2,
        "pool": f"ans{tag}",
        "group": f"ansg{tag}",
        "user": f"ansu{tag}",
        "role": f"AnsRole{tag}",
        "bridge": f"vmbr{uuid.uuid4().int % 9000 + 1000}",
    }

    first = ansible_playbook(server, tmp_path, "converge", CONVERGE, names)
    assert all(r["changed"] for r in first.values()), {k: v["changed"] for k, v in first.items()}
    again = ansible_playbook(server, tmp_path, "converge-again", CONVERGE, names)
    assert not any(r["changed"] for r in again.values()), {
        k: v.get("msg") for k, v in again.items() if v["changed"]
    }
    vmid = names["vmid"]
    [pool] = api.get("/pools", params={"poolid": names["pool"]}).json()["data"]
    assert {m.get("vmid") or m.get("storage") for m in pool["members"]} == {"local"}
    ha = api.get(f"/cluster/ha/resources/vm:{vmid}").json()["data"]
    assert (ha["state"], ha["comment"]) == ("started", "ansible")
    network = api.get("/nodes/pve2/network").json()
    bridge = next(i for i in network["data"] if i["iface"] == names["bridge"])
    assert (bridge["cidr"], "active" in bridge) == ("10.88.0.1/24", False)
    assert names["bridge"] in network["changes"]  # pending until applied
    rules = api.get(f"/nodes/pve1/qemu/{vmid}/firewall/rules").json()["data"]
    assert [(r["pos"], r["dport"], r["action"]) for r in rules] == [
        (0, "22", "ACCEPT"),
        (1, "23", "DROP"),
    ]

    acted = ansible_playbook(server, tmp_path, "actions", ACTIONS, names)
    [pool] = api.get("/pools", params={"poolid": names["pool"]}).json()["data"]
    assert {m.get("vmid") or m.get("storage") for m in pool["members"]} == {vmid, "local"}
    assert acted["backup"]["changed"]
    archives = acted["archives"]["proxmox_storage_content"]
    assert len(archives) == 1 and archives[0]["volid"].startswith(
        f"local:backup/vzdump-qemu-{vmid}-"
    )
    assert archives[0]["notes"] == f"ansible ansible-{vmid}"
    snapshots = api.get(f"/nodes/pve1/qemu/{vmid}/snapshot").json()["data"]
    assert "before-upgrade" in {s["name"] for s in snapshots}
    clone = api.get(f"/nodes/pve1/qemu/{names['cloneid']}/config").json()["data"]
    assert clone["name"] == f"clone-{names['cloneid']}"
    network = api.get("/nodes/pve2/network").json()
    assert "changes" not in network
    assert next(i for i in network["data"] if i["iface"] == names["bridge"])["active"] == 1
    types = {t["type"] for t in acted["tasks"]["proxmox_tasks"]}
    assert {"qmstart", "qmsnapshot", "vzdump", "qmclone"} <= types
    assert types & {"qmstop", "qmshutdown"}

    gone = ansible_playbook(server, tmp_path, "teardown", TEARDOWN, names)
    assert all(r["changed"] for r in gone.values()), {k: v["changed"] for k, v in gone.items()}
    assert api.get(f"/nodes/pve1/qemu/{vmid}/config").status_code == 500
    assert api.get(f"/cluster/ha/resources/vm:{vmid}").status_code != 200
