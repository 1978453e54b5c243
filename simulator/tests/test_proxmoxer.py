"""The real client, proxmoxer, against the simulator over TLS."""

from __future__ import annotations

import pytest
from proxmoxer import ProxmoxAPI
from proxmoxer.core import ResourceException
from proxmoxer.tools import Tasks
from simtest_support import ROOT_PASSWORD, run

from proxmox_simulator.cli import create_token


def _api(server, **auth) -> ProxmoxAPI:
    # Verify TLS against the self-signed certificate the server generated.
    cert = server.settings.data_dir / "tls" / "pve-ssl.pem"
    return ProxmoxAPI("127.0.0.1", port=server.port, verify_ssl=str(cert), timeout=30, **auth)


def test_password_login_ticket_renewal_and_vm_lifecycle(server, unique_vmid):
    prox = _api(server, user="root@pam", password=ROOT_PASSWORD)
    auth = prox._backend.auth
    first_ticket = auth.pve_auth_ticket
    # proxmoxer renews by posting its current ticket as the password.
    auth._get_new_tokens()
    renewed = auth.pve_auth_ticket
    assert renewed.startswith("PVE:root@pam:")
    # The renewed ticket is at least as new as the first, and the writes below
    # (VM create, start, ...) only pass with its matching CSRF token.
    assert int(renewed.split(":")[2], 16) >= int(first_ticket.split(":")[2], 16)
    auth.csrf_prevention_token = "bogus"
    with pytest.raises(ResourceException, match="401"):
        prox.nodes("pve1").qemu(999999).config.put(description="x")
    auth._get_new_tokens()

    nodes = {n["node"] for n in prox.nodes.get()}
    assert nodes == {"pve1", "pve2", "pve3"}
    vmid = unique_vmid
    upid = prox.nodes("pve2").qemu.post(
        vmid=vmid,
        name="proxmoxer-vm",
        memory=1024,
        cores=1,
        scsi0="local-lvm:4",
        net0="virtio,bridge=vmbr0",
        agent=1,
        ipconfig0="ip=10.66.0.10/24,gw=10.66.0.1",
    )
    assert Tasks.decode_upid(upid)["type"] == "qmcreate"
    assert Tasks.blocking_status(prox, upid, polling_interval=0.05)["exitstatus"] == "OK"
    start = prox.nodes("pve2").qemu(vmid).status.start.post()
    assert Tasks.blocking_status(prox, start, polling_interval=0.05)["exitstatus"] == "OK"
    config = prox.nodes("pve2").qemu(vmid).config.get()
    assert config["name"] == "proxmoxer-vm" and config["scsi0"].startswith(
        f"local-lvm:vm-{vmid}-disk-0"
    )
    agent = prox.nodes("pve2").qemu(vmid).agent("network-get-interfaces").get()
    addresses = [a["ip-address"] for nic in agent["result"] for a in nic["ip-addresses"]]
    assert "10.66.0.10" in addresses
    log = Tasks.decode_log(prox.nodes("pve2").tasks(start).log.get())
    assert "TASK OK" in log
    stop = prox.nodes("pve2").qemu(vmid).status.stop.post()
    assert Tasks.blocking_status(prox, stop, polling_interval=0.05)["exitstatus"] == "OK"
    assert prox.nodes("pve2").qemu(vmid).status.current.get()["status"] == "stopped"
    delete = prox.nodes("pve2").qemu(vmid).delete()
    assert Tasks.blocking_status(prox, delete, polling_interval=0.05)["exitstatus"] == "OK"
    with pytest.raises(ResourceException) as missing:
        prox.nodes("pve2").qemu(vmid).config.get()
    assert missing.value.status_code == 500


def test_token_login_and_read_only_token_is_refused_writes(server, settings, unique_vmid):
    sync = run(create_token(settings, "root@pam!pxsync", privsep=False, comment="proxmoxer"))
    prox = _api(server, user="root@pam", token_name="pxsync", token_value=sync["value"])
    assert {n["node"] for n in prox.nodes.get()} == {"pve1", "pve2", "pve3"}
    upid = prox.nodes("pve1").qemu.post(vmid=unique_vmid, name="token-vm", memory=512)
    assert Tasks.blocking_status(prox, upid, polling_interval=0.05)["exitstatus"] == "OK"
    assert upid.split(":")[7] == "root@pam!pxsync"  # the UPID names the token
    Tasks.blocking_status(
        prox, prox.nodes("pve1").qemu(unique_vmid).delete(), polling_interval=0.05
    )

    readonly = run(create_token(settings, "root@pam!pxro", privsep=True, comment="audit only"))
    root = _api(server, user="root@pam", password=ROOT_PASSWORD)
    root.access.acl.put(path="/", tokens="root@pam!pxro", roles="PVEAuditor")
    ro = _api(server, user="root@pam", token_name="pxro", token_value=readonly["value"])
    assert len(ro.nodes("pve1").qemu.get()) >= 1  # auditing is allowed
    with pytest.raises(ResourceException) as denied:
        ro.nodes("pve1").qemu.post(vmid=unique_vmid + 1, name="nope", memory=512)
    assert denied.value.status_code == 403
    guest = ro.nodes("pve1").qemu.get()[0]["vmid"]
    with pytest.raises(ResourceException) as denied_power:
        ro.nodes("pve1").qemu(guest).status.start.post()
    assert denied_power.value.status_code == 403
    assert "VM.PowerMgmt" in str(denied_power.value)


def _wait(prox, upid) -> dict:
    return Tasks.blocking_status(prox, upid, polling_interval=0.05)


def test_backup_ha_firewall_and_pools_through_proxmoxer(server, unique_vmid):
    prox = _api(server, user="root@pam", password=ROOT_PASSWORD)
    vmid = unique_vmid
    node = prox.nodes("pve3")
    assert (
        _wait(prox, node.qemu.post(vmid=vmid, name="px-backup", scsi0="local-lvm:2"))["exitstatus"]
        == "OK"
    )

    # vzdump → archive in the content list → restore-ready volume attributes.
    upid = node.vzdump.post(vmid=vmid, storage="local", compress="zstd")
    assert Tasks.decode_upid(upid)["type"] == "vzdump"
    assert _wait(prox, upid)["exitstatus"] == "OK"
    [archive] = node.storage("local").content.get(content="backup", vmid=vmid)
    assert archive["subtype"] == "qemu" and archive["format"] == "vma.zst"
    job = f"px-{vmid}"
    prox.cluster.backup.post(id=job, vmid=str(vmid), storage="local", schedule="sat 03:00")
    assert prox.cluster.backup(job).get()["schedule"] == "sat 03:00"
    prox.cluster.backup(job).delete()

    # HA: add, read back through the resource and the manager status, remove.
    prox.cluster.ha.resources.post(sid=f"vm:{vmid}", state="stopped", max_restart=3)
    assert prox.cluster.ha.resources(f"vm:{vmid}").get()["max_restart"] == 3
    services = {s["id"] for s in prox.cluster.ha.status.current.get()}
    assert f"service:vm:{vmid}" in services
    prox.cluster.ha.resources(f"vm:{vmid}").delete()

    # Firewall: rules keep PVE's order; a stale digest is refused.
    fw = node.qemu(vmid).firewall
    fw.rules.post(type="in", action="ACCEPT", proto="tcp", dport="22", enable=1)
    fw.rules.post(type="out", action="DROP", dest="198.51.100.0/24")
    rules = fw.rules.get()
    assert [(r["pos"], r["type"]) for r in rules] == [(0, "out"), (1, "in")]
    assert rules[0]["ipversion"] == 4
    fw.rules(1).put(comment="ssh", digest=rules[1]["digest"])
    with pytest.raises(ResourceException) as stale:
        fw.rules(1).put(comment="again", digest=rules[1]["digest"])
    assert "changed by other user" in str(stale.value)

    # 8.x pools: membership through PUT /pools.
    poolid = f"px{vmid}"
    prox.pools.post(poolid=poolid)
    prox.pools.put(poolid=poolid, vms=str(vmid))
    [pool] = prox.pools.get(poolid=poolid)
    assert [m["vmid"] for m in pool["members"]] == [vmid]
    prox.pools.put(poolid=poolid, vms=str(vmid), delete=1)
    prox.pools.delete(poolid=poolid)
    assert _wait(prox, node.qemu(vmid).delete())["exitstatus"] == "OK"


def test_volume_copy_and_corosync_members_through_proxmoxer(server, unique_vmid):
    prox = _api(server, user="root@pam", password=ROOT_PASSWORD)
    storage = prox.nodes("pve1").storage("local-lvm")
    disk = storage.content.post(vmid=unique_vmid, filename=f"vm-{unique_vmid}-disk-0", size="1G")
    upid = storage.content(disk).post(target=f"vm-{unique_vmid}-disk-1")
    assert Tasks.decode_upid(upid)["type"] == "imgcopy"
    assert _wait(prox, upid)["exitstatus"] == "OK"
    sizes = {v["volid"]: v["size"] for v in storage.content.get(vmid=unique_vmid)}
    assert sizes == {disk: 1024**3, f"local-lvm:vm-{unique_vmid}-disk-1": 1024**3}
    for volid in sizes:
        assert _wait(prox, storage.content(volid).delete())["exitstatus"] == "OK"
    members = {m["name"]: m for m in prox.cluster.config.nodes.get()}
    assert set(members) == {"pve1", "pve2", "pve3"}
    with pytest.raises(ResourceException) as myself:
        prox.cluster.config.nodes("pve1").delete()
    assert "Cannot delete myself" in str(myself.value)
