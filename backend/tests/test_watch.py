"""Live sync's change detection (`domain/watch.py`) and the watcher's coalescing and run
starts (`watch.py`), against scripted Proxmox answers and the in-memory run store."""

from __future__ import annotations

import asyncio

from proxbox_backend.domain.watch import (
    NOTHING,
    ChangeDetector,
    Changes,
    Pending,
    Snapshot,
    resource_changes,
    task_changes,
)
from proxbox_backend.report import RunReport
from proxbox_backend.runs import MemoryRunStore
from proxbox_backend.watch import STARTED, Watcher, WatchSupervisor


def vm(vmid, kind="qemu", **fields):
    entry = {
        "id": f"{kind}/{vmid}", "type": kind, "vmid": vmid, "name": f"g{vmid}", "node": "pve1",
        "status": "running", "maxmem": 2048 * 2**20, "maxdisk": 8 * 2**30, "maxcpu": 2,
        "template": 0, "cpu": 0.01, "mem": 2**29, "uptime": 100, "netin": 1, "diskread": 5,
    }  # fmt: skip
    return {**entry, **fields}


def node(name, status="online", **fields):
    return {"id": f"node/{name}", "type": "node", "node": name, "status": status, **fields}


def task(upid, kind, ident, node="pve1", done=True, **fields):
    entry = {"upid": upid, "type": kind, "id": ident, "node": node, "starttime": 1}
    if done:
        entry.update(status="OK", endtime=2)
    return {**entry, **fields}


BASE = [node("pve1"), node("pve2"), vm(100), vm(101), vm(200, "lxc")]


def changed(after, before=BASE) -> Changes:
    return resource_changes(Snapshot.of(before), Snapshot.of(after))


# ------------------------------------------------------------------ resources


def test_a_guest_that_stops_moves_or_is_resized_changed():
    assert changed([*BASE[:2], vm(100, status="stopped"), *BASE[3:]]).guests == {"qemu/100"}
    assert changed([*BASE[:2], vm(100, node="pve2"), *BASE[3:]]).guests == {"qemu/100"}
    assert changed([*BASE[:2], vm(100, maxmem=4096 * 2**20), *BASE[3:]]).guests == {"qemu/100"}
    assert changed([*BASE[:4], vm(200, "lxc", maxdisk=16 * 2**30)]).guests == {"lxc/200"}
    assert changed([*BASE[:2], vm(100, name="web", tags="prod"), *BASE[3:]]).guests == {"qemu/100"}


def test_a_guest_that_comes_or_goes_changed_and_so_did_a_node_going_offline():
    assert changed([*BASE, vm(300)]).guests == {"qemu/300"}
    assert changed([b for b in BASE if b.get("vmid") != 101]).guests == {"qemu/101"}
    assert changed([node("pve1"), node("pve2", "offline"), *BASE[2:]]) == Changes(
        nodes=frozenset({"pve2"}), reasons=("resources",)
    )


def test_load_figures_are_not_changes():
    busy = [
        vm(100, cpu=0.9, mem=2**30, uptime=200, netin=99, diskread=9),
        node("pve1", cpu=0.5, mem=1, uptime=9),
    ]
    assert changed([busy[1], node("pve2"), busy[0], *BASE[3:]]) == NOTHING


# ------------------------------------------------------------------ tasks


def test_finished_tasks_name_the_guest_or_node_they_changed():
    snapshot = Snapshot.of(BASE)
    assert task_changes(task("u1", "qmconfig", "100"), snapshot).guests == {"qemu/100"}
    assert task_changes(task("u2", "vzshutdown", "200"), snapshot).guests == {"lxc/200"}
    assert task_changes(task("u3", "qmigrate", "101"), snapshot).guests == {"qemu/101"}
    # A backup or resize names a VMID only: the resources say which kind it is.
    assert task_changes(task("u4", "vzdump", "200"), snapshot).guests == {"lxc/200"}
    assert task_changes(task("u5", "resize", "100"), snapshot).guests == {"qemu/100"}
    # A backup job of several guests names none, but its backups are new records.
    assert task_changes(task("u6", "vzdump", ""), snapshot) == Changes(reasons=("vzdump",))
    network = task_changes(task("u7", "srvreload", "networking", node="pve2"), snapshot)
    assert network.nodes == {"pve2"}


def test_tasks_that_change_nothing_synced_are_ignored():
    snapshot = Snapshot.of(BASE)
    for kind, ident in (("vncproxy", "100"), ("aptupdate", ""), ("srvreload", "pveproxy")):
        assert task_changes(task("u", kind, ident), snapshot) == NOTHING, kind


def test_the_detector_reports_each_finished_task_once_and_nothing_on_its_first_poll():
    detector = ChangeDetector()
    old = task("old", "qmstart", "100")
    assert detector.observe(BASE, [old]) == NOTHING  # before the watch: the catch-up run's
    running = task("new", "qmconfig", "101", done=False)
    assert detector.observe(BASE, [running, old]) == NOTHING  # not finished yet
    ended = task("new", "qmconfig", "101")
    assert detector.observe(BASE, [ended, old]).guests == {"qemu/101"}
    assert detector.observe(BASE, [ended, old]) == NOTHING  # seen already
    destroyed = [b for b in BASE if b.get("vmid") != 100]
    gone = detector.observe(destroyed, [task("d", "qmdestroy", "100"), ended, old])
    assert gone.guests == {"qemu/100"} and "qmdestroy 100" in gone.reasons


def test_pending_changes_merge_and_keep_the_oldest_age():
    pending = Pending()
    pending.add(NOTHING, 1.0)
    assert pending.since is None
    pending.add(Changes(guests=frozenset({"qemu/100"})), 2.0)
    pending.add(Changes(guests=frozenset({"lxc/200"}), nodes=frozenset({"pve1"})), 3.0)
    taken, since = pending.take()
    assert (taken.guests, taken.nodes, since) == ({"qemu/100", "lxc/200"}, {"pve1"}, 2.0)
    assert not pending.changes and pending.since is None
    pending.add(Changes(guests=frozenset({"qemu/101"})), 5.0)
    pending.restore(taken, since)
    assert pending.changes.guests == {"qemu/100", "lxc/200", "qemu/101"}
    assert pending.since == 2.0


# ------------------------------------------------------------------ the watcher


class ScriptedProxmox:
    """Answers the watcher's two reads from `state`, which a test edits between polls."""

    def __init__(self):
        self.resources_now = list(BASE)
        self.tasks_now: list[dict] = []
        self.requests = 0

    async def resources(self):
        self.requests += 1
        return list(self.resources_now)

    async def cluster_tasks(self):
        self.requests += 1
        return list(self.tasks_now)


class Launches:
    """Records what the watcher starts; each run lasts until the test ends it."""

    def __init__(self, busy: int = 0):
        self.started: list[tuple[Changes, float | None]] = []
        self.runs: list[asyncio.Future] = []
        self.busy = busy  # answers "another run holds the endpoint" this many times

    async def __call__(self, changes, found_at):
        if self.busy:
            self.busy -= 1
            return None
        self.started.append((changes, found_at))
        self.runs.append(asyncio.get_running_loop().create_future())
        return self.runs[-1]


def test_changes_found_while_a_run_goes_become_one_run_after_it():
    async def scenario():
        proxmox, launches, clock = ScriptedProxmox(), Launches(), iter(range(100))
        watcher = Watcher(3, 1.0, launches, clock=lambda: float(next(clock)))
        watcher.pending.add(STARTED, 0.0)
        await watcher.step(proxmox)  # the catch-up run
        assert [c for c, _ in launches.started] == [STARTED]
        # A burst over three polls while that run goes: no second run yet.
        proxmox.resources_now = [*BASE[:2], vm(100, status="stopped"), *BASE[3:]]
        await watcher.step(proxmox)
        proxmox.tasks_now = [task("t1", "qmconfig", "101")]
        await watcher.step(proxmox)
        proxmox.resources_now = [*proxmox.resources_now, vm(300)]
        await watcher.step(proxmox)
        assert len(launches.started) == 1
        launches.runs[0].set_result(None)
        await watcher.step(proxmox)  # nothing new, but the burst is pending
        assert len(launches.started) == 2
        burst, found_at = launches.started[1]
        assert burst.guests == {"qemu/100", "qemu/101", "qemu/300"}
        assert found_at == 1.0  # when the burst's first change was found
        assert proxmox.requests == 10  # two reads per poll, nothing else
        await watcher.step(proxmox)
        assert len(launches.started) == 2  # quiet: no run

    asyncio.run(scenario())


def test_a_run_held_by_someone_else_is_retried_at_the_next_poll():
    async def scenario():
        proxmox, launches = ScriptedProxmox(), Launches(busy=2)
        watcher = Watcher(3, 1.0, launches, clock=lambda: 7.0)
        watcher.pending.add(STARTED, 1.0)
        await watcher.step(proxmox)
        await watcher.step(proxmox)
        assert launches.started == []
        await watcher.step(proxmox)
        assert launches.started == [(STARTED, 1.0)]

    asyncio.run(scenario())


class RecordingService:
    """The sync service as the watcher uses it: runs that end when released."""

    def __init__(self):
        self.release = asyncio.Event()
        self.runs: list[int] = []
        self.jobs: list[tuple[str, dict]] = []

    async def run(self, endpoint_id, emit, target=None):
        self.runs.append(endpoint_id)
        await self.release.wait()
        report = RunReport(started_at="2026-12-05T00:00:00+00:00")
        emit({"event": "finished", "report": report.as_dict()})
        return report

    async def record_live_run(self, endpoint_id, run_id, report, trigger):
        self.jobs.append((run_id, trigger))
        return "job 1"


class Settings:
    watch_lease = 1.0
    watch_refresh = 60.0


def test_watcher_runs_share_the_endpoints_lease_with_manual_runs():
    """A run of the endpoint started elsewhere (`POST /sync`, `run`) holds the run store's
    lease: the watcher's run waits for it instead of running beside it."""

    async def scenario():
        store, service = MemoryRunStore(), RecordingService()
        supervisor = WatchSupervisor(Settings(), service, store, holder="replica-a")
        launch = supervisor._launcher(3)
        manual = await store.start("3")
        changes = Changes(guests=frozenset({"qemu/100"}), reasons=("resources",))
        assert await launch(changes, None) is None
        manual.record({"event": "finished", "report": {}})
        task = await launch(changes, None)
        assert task is not None and await launch(changes, None) is None  # its own run
        service.release.set()
        await task
        assert service.runs == [3]
        ((run_id, trigger),) = service.jobs
        assert trigger["watch"]["guests"] == ["qemu/100"]
        run = await store.get(run_id)
        assert run["state"] == "finished" and run["endpoint"] == "3"
        assert await launch(changes, None) is not None  # free again

    asyncio.run(scenario())


def test_the_supervisor_follows_the_watched_endpoints():
    interval = 5

    async def scenario():
        supervisor = WatchSupervisor(Settings(), RecordingService(), MemoryRunStore())
        started = []

        async def watch(endpoint_id):
            started.append(endpoint_id)
            await asyncio.Event().wait()

        supervisor.watch = watch
        supervisor.reconcile({3: interval, 4: 10})
        await asyncio.sleep(0)
        assert sorted(started) == [3, 4] and supervisor.intervals == {3: interval, 4: 10.0}
        watch_3 = supervisor.watches[3]
        supervisor.reconcile({3: 2})
        await asyncio.sleep(0)
        assert supervisor.watches == {3: watch_3} and supervisor.intervals == {3: 2.0}
        assert sorted(started) == [3, 4]  # not restarted for a new interval
        supervisor.reconcile({})
        await asyncio.sleep(0)
        assert watch_3.cancelled() and supervisor.watches == {}

    asyncio.run(scenario())
