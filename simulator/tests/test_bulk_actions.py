"""Bulk guest actions through proxmoxer: the cluster's bulk-action/guest/{start,shutdown,
suspend,migrate} and a node's migrateall run as a worker that starts one guest task per
guest, in startup order, and logs like PVE's.

Every request names its guests (``vms``): the session's simulator is shared, and a bulk
action without a filter would act on every other test's guests too.
"""

from __future__ import annotations

import uuid

import pytest
from proxmoxer.core import ResourceException
from proxmoxer.tools import Tasks
from simtest_support import close_proxmoxer, proxmoxer_client

TEMPLATE = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"


@pytest.fixture(scope="module")
def prox(server):
    api = proxmoxer_client(server)
    yield api
    close_proxmoxer(api)


def _ids(count: int) -> list[int]:
    base = 700000 + uuid.uuid4().int % 200000
    return [base + i for i in range(count)]


def _finish(prox, upid) -> tuple[dict, list[str]]:
    status = Tasks.blocking_status(prox, upid, polling_interval=0.02)
    log = Tasks.decode_log(prox.nodes(status["node"]).tasks(upid).log.get(limit=1000))
    return status, log.splitlines()


def _ok(prox, upid) -> list[str]:
    status, log = _finish(prox, upid)
    assert status["exitstatus"] == "OK", log
    return log


def _vm(prox, node: str, vmid: int, **extra) -> int:
    _ok(prox, prox.nodes(node).qemu.post(vmid=vmid, scsi0="local-lvm:1", **extra))
    return vmid


def _ct(prox, node: str, vmid: int) -> int:
    _ok(
        prox,
        prox.nodes(node).lxc.post(
            vmid=vmid, ostemplate=TEMPLATE, hostname=f"ct{vmid}", rootfs="local-lvm:1"
        ),
    )
    return vmid


def _power(prox, node: str, kind: str, vmid: int, action: str) -> None:
    _ok(prox, getattr(prox.nodes(node), kind)(vmid).status(action).post())


def _status(prox, node: str, kind: str, vmid: int) -> str:
    current = getattr(prox.nodes(node), kind)(vmid).status.current.get()
    return "paused" if current.get("qmpstatus") == "paused" else current["status"]


def _subtasks(prox, node: str, vmid: int, kind: str) -> list[dict]:
    return prox.nodes(node).tasks.get(vmid=vmid, typefilter=kind, source="all")


def test_bulk_start_starts_resumes_and_skips_in_startup_order(prox):
    first, plain, running, paused, template = _ids(5)
    _vm(prox, "pve1", plain)
    _vm(prox, "pve2", first, startup="order=1,up=7")
    _vm(prox, "pve1", running, start=1)
    _vm(prox, "pve1", paused, start=1)
    _power(prox, "pve1", "qemu", paused, "suspend")
    _vm(prox, "pve1", template)
    _ok(prox, prox.nodes("pve1").qemu(template).template.post())

    upid = prox.cluster("bulk-action").guest.start.post(
        vms=[plain, first, running, paused, template]
    )
    assert ":bulk-start::root@pam:" in upid
    status, log = _finish(prox, upid)

    assert status["exitstatus"] == "WARNINGS: 1", log
    wanted = sorted([plain, first, running, paused, template])
    assert log[0] == f"Starting guests: {', '.join(map(str, wanted))}"
    # The guest with startup order 1 comes first, and its "up" delay is waited for.
    assert log[1:3] == [f"Starting VM {first}", "Waiting for 7 seconds (startup delay)"]
    assert f"WARN: Skipping VM {running}, already running." in log
    assert f"Starting VM {paused}" in log and f"Starting VM {template}" not in log
    assert _status(prox, "pve2", "qemu", first) == "running"
    assert _status(prox, "pve1", "qemu", plain) == "running"
    assert _status(prox, "pve1", "qemu", paused) == "running"
    assert _status(prox, "pve1", "qemu", template) == "stopped"
    # Each guest changed through a task of its own, owned by the caller.
    [start] = _subtasks(prox, "pve2", first, "qmstart")
    assert start["user"] == "root@pam" and start["status"] == "OK"
    assert [t["type"] for t in _subtasks(prox, "pve1", paused, "qmresume")] == ["qmresume"]


def test_bulk_shutdown_reverse_order_timeouts_and_paused_guests(prox):
    early, late, paused, stopped = _ids(4)
    _vm(prox, "pve1", early, start=1, startup="order=1,down=45")
    _vm(prox, "pve1", late, start=1, startup="order=2")
    _vm(prox, "pve2", paused, start=1)
    _power(prox, "pve2", "qemu", paused, "suspend")
    _vm(prox, "pve2", stopped)
    vms = [early, late, paused, stopped]

    bulk = prox.cluster("bulk-action").guest
    status, log = _finish(prox, bulk.shutdown.post(vms=vms, **{"force-stop": 0}, timeout=60))
    assert status["exitstatus"] == "WARNINGS: 2", log
    assert log[0].startswith("Shutting down guests: ")
    # Reverse startup order: unordered guests first, then order 2, then order 1.
    late_at = log.index(f"Shutting down VM {late} (Timeout = 60 seconds)")
    early_at = log.index(f"Shutting down VM {early} (Timeout = 45 seconds)")
    assert late_at < early_at
    assert f"WARN: Skipping VM {paused}, resume paused VM before shutdown." in log
    assert f"WARN: Skipping VM {stopped}, not running." in log
    assert _status(prox, "pve1", "qemu", early) == "stopped"
    assert _status(prox, "pve1", "qemu", late) == "stopped"
    assert _status(prox, "pve2", "qemu", paused) == "paused"

    # force-stop (the default) takes the paused guest down as well.
    _status_, log = _finish(prox, bulk.shutdown.post(vms=[paused]))
    assert f"Shutting down VM {paused} (Timeout = 180 seconds)" in log
    assert _status(prox, "pve2", "qemu", paused) == "stopped"


def test_bulk_suspend_pauses_vms_only(prox):
    vm, ct, idle = _ids(3)
    _vm(prox, "pve1", vm, start=1)
    _ct(prox, "pve2", ct)
    _power(prox, "pve2", "lxc", ct, "start")
    _vm(prox, "pve1", idle)

    status, log = _finish(prox, prox.cluster("bulk-action").guest.suspend.post(vms=[vm, ct, idle]))
    assert status["exitstatus"] == "WARNINGS: 2", log
    assert f"Suspending VM {vm}" in log
    assert f"WARN: skipping {ct}, only VMs can be suspended" in log
    assert f"WARN: Skipping VM {idle}, not running." in log
    assert _status(prox, "pve1", "qemu", vm) == "paused"
    assert _status(prox, "pve2", "lxc", ct) == "running"
    # To disk, the (paused) VM hibernates: its state on a volume, the VM off and locked.
    status, log = _finish(
        prox, prox.cluster("bulk-action").guest.suspend.post(vms=[vm], **{"to-disk": 1})
    )
    assert status["exitstatus"] == "OK", log
    assert _status(prox, "pve1", "qemu", vm) == "stopped"
    config = prox.nodes("pve1").qemu(vm).config.get()
    assert config["lock"] == "suspended" and config["vmstate"].startswith("local-lvm:")


def test_bulk_migrate_moves_guests_and_reports_the_ones_that_cannot(prox):
    idle, there, live = _ids(3)
    _vm(prox, "pve1", idle)
    _vm(prox, "pve2", there)
    _vm(prox, "pve1", live, start=1)

    upid = prox.cluster("bulk-action").guest.migrate.post(vms=[idle, there, live], target="pve2")
    status, log = _finish(prox, upid)
    assert status["exitstatus"] == f"Some guests failed to migrate {live}", log
    assert log[0] == f"Migrating guests to pve2: {idle}, {there}, {live}"
    assert f"WARN: VM {there} already on pve2, skipping." in log
    assert "WARN: can't migrate running VM without --online" in log
    assert log[-1] == f"TASK ERROR: Some guests failed to migrate {live}"
    assert idle in [g["vmid"] for g in prox.nodes("pve2").qemu.get()]
    assert live in [g["vmid"] for g in prox.nodes("pve1").qemu.get()]
    [migration] = _subtasks(prox, "pve1", idle, "qmigrate")
    assert migration["status"] == "OK"

    # online=1 migrates the running one live.
    _ok(prox, prox.cluster("bulk-action").guest.migrate.post(vms=[live], target="pve2", online=1))
    assert _status(prox, "pve2", "qemu", live) == "running"


def test_node_migrateall_takes_running_guests_live(prox):
    vm, ct = _ids(2)
    _vm(prox, "pve3", vm, start=1)
    _ct(prox, "pve3", ct)
    node = prox.nodes("pve3")

    with pytest.raises(ResourceException, match="target is local node"):
        node.migrateall.post(target="pve3", vms=f"{vm}", maxworkers=1)
    with pytest.raises(ResourceException, match="maxworkers' parameter or max_workers"):
        node.migrateall.post(target="pve1", vms=f"{vm}")

    upid = node.migrateall.post(target="pve1", vms=f"{vm},{ct}", maxworkers=2)
    assert ":migrateall::root@pam:" in upid
    log = _ok(prox, upid)
    assert f"Migrating VM {vm}" in log and f"Migrating CT {ct}" in log
    assert log[-2:] == ["All jobs finished, used 2 workers in total.", "TASK OK"]
    assert _status(prox, "pve1", "qemu", vm) == "running"
    assert ct in [g["vmid"] for g in prox.nodes("pve1").lxc.get()]

    # Nothing left to move: PVE says so and ends well.
    log = _ok(prox, node.migrateall.post(target="pve1", vms="999999", maxworkers=1))
    assert log[0] == "no virtual guests matched, nothing to do.."


def test_bulk_actions_need_the_privilege_on_root_or_every_listed_guest(prox, server):
    user = f"bulk{uuid.uuid4().hex[:6]}@pve"
    prox.access.users.post(userid=user, password="bulk-password-1")
    [vmid] = _ids(1)
    prox.access.acl.put(path=f"/vms/{vmid}", roles="PVEVMUser", users=user)
    api = proxmoxer_client(server, user, "bulk-password-1")
    try:
        with pytest.raises(ResourceException, match=r"Permission check failed \(/, VM.PowerMgmt\)"):
            api.cluster("bulk-action").guest.start.post()
        with pytest.raises(ResourceException, match=r"/vms/1, VM.PowerMgmt"):
            api.cluster("bulk-action").guest.shutdown.post(vms=[vmid, 1])
        with pytest.raises(ResourceException, match=r"Permission check failed \(/, VM.Migrate\)"):
            api.cluster("bulk-action").guest.migrate.post(target="pve2")
        # PVEVMUser may power the guest it was given, not migrate it.
        upid = api.cluster("bulk-action").guest.start.post(vms=[vmid])
        assert ":bulk-start::" + user + ":" in upid
    finally:
        close_proxmoxer(api)
        prox.access.users(user).delete()
