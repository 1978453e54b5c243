"""QEMU and LXC guest operations (application service).

Synchronous checks happen before a task is created so callers get PVE's
immediate errors; the state change itself happens in the task's finishing
transaction (see tasks/executors.py), like a PVE worker.
"""

from __future__ import annotations

import asyncio
import math

from proxmox_simulator.domain import cloudinit
from proxmox_simulator.domain import guests as rules
from proxmox_simulator.domain.access import AccessState, Principal
from proxmox_simulator.domain.config_permissions import check_qemu_options
from proxmox_simulator.domain.errors import ParameterError, PermissionDenied, PveError, StaleWrite
from proxmox_simulator.repositories import guest_agent as agent_repo
from proxmox_simulator.repositories import guests as guest_repo
from proxmox_simulator.repositories import ha as ha_repo
from proxmox_simulator.repositories import inventory
from proxmox_simulator.tasks.service import enqueue

CONFIG_WRITE_ATTEMPTS = 5
GIB = 1024**3
MIB = 1024**2

# Request parameters that steer an operation but are not stored in the config.
_NOT_CONFIG = {
    "node",
    "vmid",
    "start",
    "pool",
    "storage",
    "password",
    "ssh-public-keys",
    "unique",
    "archive",
    "force",
    "restore",
    "live-restore",
    "ostemplate",
    "ignore-unpack-errors",
    "digest",
    "delete",
    "revert",
    "skiplock",
    "background_delay",
    "bwlimit",
    "unprivileged-dummy",
}


def conf_path(kind: str, node: str, vmid: int) -> str:
    folder = "qemu-server" if kind == rules.QEMU else "lxc"
    return f"nodes/{node}/{folder}/{vmid}.conf"


def lock_name(kind: str, vmid: int) -> str:
    return f"qemu-server/lock-{vmid}" if kind == rules.QEMU else f"lxc/pve-config-{vmid}"


async def require_node(conn, node: str):
    row = await inventory.node(conn, node)
    if row is None:
        raise PveError(
            f"hostname lookup '{node}' failed - failed to get address info for: {node}: Name or service not known"
        )
    return row


async def require_pool(conn, poolid: str):
    row = await inventory.pool(conn, poolid)
    if row is None:
        raise PveError(f"pool '{poolid}' does not exist")
    return row


async def insert_creating_guest(
    conn,
    *,
    kind: str,
    vmid: int,
    node: str,
    name: str,
    pool,
    config: dict,
    maxmem,
    cpus,
    template: bool = False,
) -> None:
    """The row of a guest whose create/clone task is queued: locked `create` until it runs."""
    config["lock"] = "create"
    await guest_repo.insert(
        conn,
        vmid=vmid,
        kind=kind,
        node=node,
        name=name,
        template=template,
        pool=pool,
        config=config,
        interfaces=rules.guest_interfaces(kind, config),
        maxmem=maxmem,
        maxdisk=0,
        cpus=cpus,
    )


async def load_guest(conn, kind: str, node: str, vmid: int, *, for_update: bool = False):
    """The guest as seen from ``node``; PVE reports a missing config file otherwise."""
    row = await guest_repo.get(conn, vmid, for_update=for_update)
    if row is None or row["type"] != kind or row["node"] != node:
        raise PveError(f"Configuration file '{conf_path(kind, node, vmid)}' does not exist")
    return row


def guest_sizing(kind: str, config: dict, defaults: dict | None = None) -> tuple[int, int, int]:
    """(maxmem, maxdisk, cpus) a guest's config implies; lists and status show them."""
    defaults = defaults or {}
    # QEMU 8+/9 declare memory as a property string: "[current=]<MiB>[,...]".
    raw_memory = config.get("memory", defaults.get("memory", 512))
    memory_props = rules.parse_property_string(str(raw_memory), "current")
    memory = int(memory_props.get("current") or 512)
    cores = int(config.get("cores", defaults.get("cores", 1)))
    sockets = int(config.get("sockets", 1)) if kind == rules.QEMU else 1
    disk = 0
    for key, value in config.items():
        if rules.is_disk_key(kind, key):
            props = rules.parse_property_string(value, "file")
            size = props.get("size", "")
            if size.endswith("G"):
                disk += int(float(size[:-1]) * GIB)
            elif size.endswith("M"):
                disk += int(float(size[:-1]) * MIB)
    return memory * MIB, disk, cores * sockets


def visible_vmids(state: AccessState, principal: Principal, guests) -> list[int] | None:
    """VMIDs of the guest rows the caller may audit; None means "all" (root)."""
    if principal.is_root:
        return None
    return [
        g["vmid"]
        for g in guests
        if state.has(principal, f"/vms/{g['vmid']}", ["VM.Audit"], pool=g["pool"])
    ]


class RenderedListCache:
    """Recently rendered guest lists, valid for one guest generation and second.

    Rendering 1,000 guests costs PostgreSQL several milliseconds; a sync loop
    asks for the same list over and over.  An entry is reused only while the
    committed ``guest_generation`` is unchanged and within the same clock
    second (uptime has one-second resolution), so no caller ever sees a list
    older than the last committed change.  Concurrent misses for the same key
    share one rendering instead of all asking PostgreSQL.
    """

    def __init__(self, max_entries: int = 64) -> None:
        self.max_entries = max_entries
        self._entries: dict[tuple, str] = {}
        self._inflight: dict[tuple, asyncio.Future] = {}

    def get(self, key: tuple) -> str | None:
        return self._entries.get(key)

    def put(self, key: tuple, text: str) -> None:
        if self.max_entries <= 0:
            return  # caching disabled (PROXMOX_SIMULATOR_LIST_CACHE=0)
        if len(self._entries) >= self.max_entries:
            self._entries.clear()
        self._entries[key] = text

    async def get_or_render(self, key: tuple, render) -> str:
        cached = self._entries.get(key)
        if cached is not None:
            return cached
        if self.max_entries > 0:
            pending = self._inflight.get(key)
            if pending is not None:
                return await asyncio.shield(pending)
        future = asyncio.get_running_loop().create_future()
        if self.max_entries > 0:
            self._inflight[key] = future
        try:
            text = await render()
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # mark retrieved: waiters re-raise it, nobody else must
            raise
        finally:
            self._inflight.pop(key, None)
        future.set_result(text)
        self.put(key, text)
        return text


async def list_json(rt, state: AccessState, principal: Principal, kind: str, node: str) -> str:
    now = int(rt.clock.now())
    async with rt.pool.acquire() as conn:
        generation = await guest_repo.generation(conn)
        vmids = None
        if not principal.is_root:
            rows = await guest_repo.list_all(conn, node)
            vmids = visible_vmids(state, principal, [r for r in rows if r["type"] == kind])

        async def render() -> str:
            await require_node(conn, node)
            return await guest_repo.list_json(conn, node, kind, now, vmids)

        key = (node, kind, generation, now, tuple(vmids) if vmids is not None else None)
        return await rt.list_cache.get_or_render(key, render)


async def _check_disks(conn, kind: str, config: dict) -> None:
    """PVE's storage checks of a config write: every volume a disk names is on a
    configured storage, and a new volume's storage takes guest disks."""
    for _key, volume in rules.disk_volumes(kind, config):
        storage_id = rules.volume_storage(volume)
        if storage_id is not None and await inventory.storage(conn, storage_id) is None:
            raise PveError(f"storage '{storage_id}' does not exist")
    for request in rules.new_disk_requests(kind, config):
        storage = await inventory.storage(conn, request.storage)
        if storage is None:
            raise PveError(f"storage '{request.storage}' does not exist")
        if "import-from" in request.options:
            await _check_import_source(conn, request)
        wanted = "images" if kind == rules.QEMU else "rootdir"
        if wanted not in storage["content"].split(","):
            what = "vm images" if kind == rules.QEMU else "container directories"
            raise ParameterError(
                {"storage": f"storage '{request.storage}' does not support {what}"}
            )


async def _check_cpu(conn, rt, kind: str, config: dict) -> None:
    """A QEMU ``cpu`` must name a model that exists (built-in or custom)."""
    if kind == rules.QEMU and "cpu" in config:
        # qemu_cpu_service reads guests through this module: import at call time.
        from proxmox_simulator.domain import qemu_cpu_service

        await qemu_cpu_service.check_vm_cpu(conn, rt.adapter, config)


async def _check_import_source(conn, request: rules.DiskRequest) -> None:
    """PVE's checks of ``<storage>:0,import-from=<source>`` before anything is allocated."""
    key, source = request.key, request.options["import-from"]
    if request.size_gib != 0:
        raise ParameterError(
            {key: "'import-from' requires special syntax - use <storage ID>:0,import-from=<source>"}
        )
    if rules.volume_storage(source) is None:
        # An absolute path on the node: the simulated nodes have no such files.
        raise PveError(f"cannot import from '{source}' - could not get file size of {source}")
    volume = await inventory.volume(conn, source)
    if volume is None:
        raise PveError(f"cannot import from '{source}' - could not get size of {source}")
    if volume["content"] not in ("images", "import"):
        raise ParameterError(
            {
                key: f"{source} has wrong type '{volume['content']}' - needs to be 'images' or 'import'"
            }
        )
    if volume["vmid"] is not None and "-cloudinit" in source:
        raise PveError(f"cannot import from '{source}' - cannot import from cloudinit disk")


def check_create_permissions(
    state: AccessState, principal: Principal, kind: str, params: dict, config: dict
) -> None:
    """The checks PVE's create handlers do in code (the schema only says "user: all").

    VM.Allocate on /vms/{vmid} or on the target pool, and Datastore.AllocateSpace
    on every storage that gets a new volume.
    """
    vmid = params["vmid"]
    pool = params.get("pool")
    allowed = state.has(principal, f"/vms/{vmid}", ["VM.Allocate"]) or (
        bool(pool) and state.has(principal, f"/pool/{pool}", ["VM.Allocate"])
    )
    if not allowed:
        raise PermissionDenied(f"Permission check failed (/vms/{vmid}, VM.Allocate)")
    for request in rules.new_disk_requests(kind, config):
        state.require(principal, f"/storage/{request.storage}", ["Datastore.AllocateSpace"])


async def create(
    rt,
    state: AccessState,
    principal: Principal,
    kind: str,
    node: str,
    params: dict,
    defaults: dict,
    *,
    restored: dict | None = None,
) -> str:
    """Create a guest; with ``restored`` (an archive's config) it is a restore task."""
    vmid = int(params["vmid"])
    config = {**(restored or {}), **{k: v for k, v in params.items() if k not in _NOT_CONFIG}}
    check_create_permissions(state, principal, kind, params, config)
    if kind == rules.LXC and restored is None:
        if not params.get("ostemplate"):
            raise ParameterError({"ostemplate": "property is missing and it is not optional"})
        config.setdefault("ostype", "debian")
        config.setdefault("arch", "amd64")
        # PVE puts the root disk on `storage` (default "local"), 4 GiB unless
        # rootfs says otherwise; a bare number is a size on that storage.
        storage = params.get("storage") or "local"
        rootfs = str(config.get("rootfs") or "4")
        if rootfs.replace(".", "", 1).isdigit():
            config["rootfs"] = f"{storage}:{rootfs}"
    config = rules.ensure_macs(kind, vmid, config)
    name = str(config.get("name") or config.get("hostname") or "")
    if kind == rules.LXC and not name:
        name = f"CT{vmid}"
        config["hostname"] = name
    pool = params.get("pool")
    async with rt.pool.acquire() as conn, conn.transaction():
        await require_node(conn, node)
        await _check_disks(conn, kind, config)
        await _check_cpu(conn, rt, kind, config)
        if pool:
            await require_pool(conn, pool)
        maxmem, _disk, cpus = guest_sizing(kind, config, defaults)
        await insert_creating_guest(
            conn,
            kind=kind,
            vmid=vmid,
            node=node,
            name=name,
            pool=pool,
            config=config,
            maxmem=maxmem,
            cpus=cpus,
            # PVE writes ``template: 1`` into the new config and a guest is a
            # template by that flag alone; its disks are not turned into base
            # volumes (only ``POST …/template`` does that).
            template=str(config.get("template")) == "1",
        )
        return await enqueue(
            conn,
            rt.clock,
            node=node,
            task_type=("qm" if kind == rules.QEMU else "vz")
            + ("restore" if restored is not None else "create"),
            task_id=str(vmid),
            principal=principal,
            payload={"vmid": vmid, "kind": kind, "start": bool(params.get("start"))},
            lock=lock_name(kind, vmid),
        )


def render_config(row, snapshots) -> dict:
    return {**row["config"], "digest": rules.config_digest(row["config"], snapshots)}


async def get_config(rt, kind: str, node: str, vmid: int) -> dict:
    async with rt.pool.acquire() as conn:
        row = await load_guest(conn, kind, node, vmid)
        snapshots = await guest_repo.snapshots(conn, vmid)
    return render_config(row, snapshots)


async def update_config(
    rt,
    state: AccessState | None,
    principal: Principal,
    kind: str,
    node: str,
    vmid: int,
    params: dict,
    defaults: dict,
    *,
    as_task: bool,
) -> str | None:
    changes = {k: v for k, v in params.items() if k not in _NOT_CONFIG}
    deletions = [
        d.strip() for d in str(params.get("delete") or "").replace(";", ",").split(",") if d.strip()
    ]
    digest = params.get("digest")
    # Writers through this path hold the guest's row lock, as PVE's update holds
    # the config-file lock. Without a digest the caller did not ask for
    # compare-and-swap, so a race lost to a writer that does not lock (a task
    # executor) is retried rather than answered.
    attempts = 1 if digest else CONFIG_WRITE_ATTEMPTS
    for attempt in range(1, attempts + 1):
        try:
            return await _write_config(
                rt,
                state,
                principal,
                kind,
                node,
                vmid,
                params,
                defaults,
                changes,
                deletions,
                as_task,
            )
        except StaleWrite:
            if attempt == attempts:
                raise
    raise AssertionError("unreachable")


async def _write_config(
    rt, state, principal, kind, node, vmid, params, defaults, changes, deletions, as_task
) -> str | None:
    digest = params.get("digest")
    async with rt.pool.acquire() as conn, conn.transaction():
        row = await load_guest(conn, kind, node, vmid, for_update=True)
        if state is not None and kind == rules.QEMU:
            check_qemu_options(state, principal, vmid, row["pool"], [*changes, *deletions])
        current = dict(row["config"])
        if current.get("lock") and not params.get("skiplock"):
            raise PveError(f"{rules.noun(kind)} is locked ({current['lock']})")
        if digest and digest != rules.config_digest(
            current, await guest_repo.snapshots(conn, vmid)
        ):
            raise PveError(
                "detected modified configuration - file changed by other user? Try again."
            )
        for key in deletions:
            removed = current.pop(key, None)
            if kind == rules.QEMU and removed and cloudinit.is_drive(vmid, removed):
                # A cloud-init drive is freed at once, never kept as unusedN.
                await inventory.delete_volume(
                    conn, rules.parse_property_string(removed, "file")["file"]
                )
        await _check_disks(conn, kind, changes)
        await _check_cpu(conn, rt, kind, changes)
        current.update(changes)
        current = rules.ensure_macs(kind, vmid, current)
        for request in rules.new_disk_requests(kind, changes):
            current[request.key] = await allocate_disk(conn, rt.clock, kind, node, vmid, request)
        if kind == rules.QEMU and await cloudinit.allocate_requested(
            conn, rt.clock, node, vmid, current
        ):
            await agent_repo.set_cloudinit(conn, vmid, cloudinit.values(current))
        maxmem, maxdisk, cpus = guest_sizing(kind, current, defaults)
        name = str(current.get("name") or current.get("hostname") or "")
        await guest_repo.update_config(
            conn,
            vmid=vmid,
            expected_version=row["version"],
            config=current,
            name=name,
            maxmem=maxmem,
            maxdisk=maxdisk,
            cpus=cpus,
            interfaces=rules.guest_interfaces(kind, current),
            pool=row["pool"],
        )
        if not as_task:
            return None
        # PVE's async config update runs in a worker; the change above commits with it.
        return await enqueue(
            conn,
            rt.clock,
            node=node,
            task_type="qmconfig",
            task_id=str(vmid),
            principal=principal,
            payload={"vmid": vmid, "kind": kind, "changed": sorted(changes), "deleted": deletions},
            lock=lock_name(kind, vmid),
        )


def format_size(size: int) -> str:
    """A drive's ``size=`` as PVE prints it: the largest unit that divides it exactly."""
    text = str(size)
    for unit in ("K", "M", "G", "T"):
        if size == 0 or size % 1024:
            break
        size //= 1024
        text = f"{size}{unit}"
    return text


async def allocate_disk(
    conn, clock, kind: str, node: str, vmid: int, request: rules.DiskRequest
) -> str:
    """Create the volume for a ``STORAGE:SIZE`` request and return the config value."""
    storage = await inventory.storage(conn, request.storage)
    index = await inventory.next_disk_index(conn, vmid)
    volname = f"vm-{vmid}-disk-{index}"
    volid = f"{request.storage}:{volname}"
    if storage["type"] == "dir":
        volid = (
            f"{request.storage}:{vmid}/{volname}.qcow2"
            if kind == rules.QEMU
            else f"{request.storage}:{vmid}/{volname}.raw"
        )
    size = int(request.size_gib * GIB)
    source = request.options.get("import-from")
    if source is not None:
        # The new disk is a full copy of the source volume: as big as the image
        # declares (a qcow2's virtual size), not the 0 asked for.
        imported = await inventory.volume(conn, source)
        if imported is None:
            raise PveError(f"cannot import from '{source}' - could not get size of {source}")
        size = imported["virtual_size"] or imported["size"]
    await inventory.insert_volume(
        conn,
        volid=volid,
        storage_name=request.storage,
        node_name=None if storage["shared"] else node,
        vmid=vmid,
        content="images" if kind == rules.QEMU else "rootdir",
        fmt="qcow2" if volid.endswith(".qcow2") else "raw",
        size=size,
        ctime=int(clock.now()),
    )
    size_text = format_size(size)
    options = {k: v for k, v in request.options.items() if k not in ("size", "import-from")}
    return rules.format_property_string({"file": volid, **options, "size": size_text}, "file")


async def power(
    rt,
    principal: Principal,
    kind: str,
    node: str,
    vmid: int,
    action: str,
    params: dict,
    state: AccessState | None = None,
) -> str:
    """A power action's task.  ``state``: the caller's ACLs where the action needs more
    than the method's own check (suspend to disk: VM.Config.Disk and the state storage)."""
    from proxmox_simulator.domain import hibernation  # it writes guests through this module

    transition = rules.TRANSITIONS[action]
    todisk = kind == rules.QEMU and action == "suspend" and bool(params.get("todisk"))
    payload = {"vmid": vmid, "kind": kind, "action": action}
    async with rt.pool.acquire() as conn, conn.transaction():
        row = await load_guest(conn, kind, node, vmid)
        lock = row["config"].get("lock")
        # A hibernated VM is locked 'suspended'; starting it is how it resumes.
        resumes = action == "start" and hibernation.is_hibernated(row["config"])
        if lock and not params.get("skiplock") and not resumes:
            raise PveError(f"{rules.noun(kind)} is locked ({lock})")
        if todisk:
            if row["status"] == rules.STOPPED:
                raise PveError(f"VM {vmid} not running")
            storage = await hibernation.state_storage(
                conn, row["config"], params.get("statestorage")
            )
            if state is not None:
                state.require(principal, f"/vms/{vmid}", ["VM.Config.Disk"])
                state.require(principal, f"/storage/{storage}", ["Datastore.AllocateSpace"])
            payload.update(todisk=1, statestorage=storage)
        else:
            rules.check_transition(kind, vmid, row["status"], action)
        return await enqueue(
            conn,
            rt.clock,
            node=node,
            task_type=transition.task_type(kind),
            task_id=str(vmid),
            principal=principal,
            payload=payload,
            lock=lock_name(kind, vmid),
        )


async def destroy(rt, principal: Principal, kind: str, node: str, vmid: int, params: dict) -> str:
    async with rt.pool.acquire() as conn, conn.transaction():
        row = await load_guest(conn, kind, node, vmid)
        rules.require_stopped_for_destroy(kind, vmid, row["status"])
        sid = f"{'vm' if kind == rules.QEMU else 'ct'}:{vmid}"
        if await ha_repo.resource(conn, sid) is not None and not params.get("purge"):
            raise PveError(
                f"unable to remove {rules.noun(kind)} {vmid} - used in HA resources and purge parameter not set."
            )
        return await enqueue(
            conn,
            rt.clock,
            node=node,
            task_type="qmdestroy" if kind == rules.QEMU else "vzdestroy",
            task_id=str(vmid),
            principal=principal,
            payload={"vmid": vmid, "kind": kind, "purge": bool(params.get("purge"))},
            lock=lock_name(kind, vmid),
        )


def uptime(row, now: float) -> int:
    if row["status"] == rules.STOPPED or row["started_at"] is None:
        return 0
    return max(0, int(now) - int(row["started_at"]))


# A running guest's traffic in bytes/s at the crest of its load wave: what ``rrddata``
# plots as netin/netout, and what the tap counters (netstat, status) add up.
NET_RATES = (1200, 800)
# The RRD's finest resolution (seconds): the counters integrate the rate at this step.
_TRAFFIC_STEP = 60


# A running guest is never silent (ARP, NTP, DNS): the wave's trough keeps this share of
# the rate, so its tap counters grow every second it runs.
_TRAFFIC_FLOOR = 0.1


def traffic_wave(t: float, step: int, vmid: int) -> float:
    return _TRAFFIC_FLOOR + (1 - _TRAFFIC_FLOOR) * (math.sin((t / step + vmid) / 7.0) + 1) / 2


def traffic_bytes(row, now: int) -> tuple[int, int]:
    """Bytes (in, out) through the guest's tap devices since it started: the
    minute-resolution RRD rate integrated in closed form (``∫ wave dt``)."""
    if row["status"] == rules.STOPPED or row["started_at"] is None:
        return 0, 0
    step, vmid = _TRAFFIC_STEP, row["vmid"]

    def integral(t: float) -> float:
        wave = t / 2 - (7 * step / 2) * math.cos((t / step + vmid) / 7.0)
        return _TRAFFIC_FLOOR * t + (1 - _TRAFFIC_FLOOR) * wave

    span = max(0.0, integral(now) - integral(min(now, row["started_at"])))
    return int(NET_RATES[0] * span), int(NET_RATES[1] * span)


def nic_counters(row, now: int) -> list[tuple[int, int, int]]:
    """(net index, bytes in, bytes out) of each configured NIC, the traffic shared evenly."""
    nics = sorted(
        int(key[3:]) for key in row["config"] if key.startswith("net") and key[3:].isdigit()
    )
    total_in, total_out = traffic_bytes(row, now)
    return [(n, total_in // len(nics), total_out // len(nics)) for n in nics]


async def current_status(rt, kind: str, node: str, vmid: int) -> dict:
    async with rt.pool.acquire() as conn:
        row = await load_guest(conn, kind, node, vmid)
    running = row["status"] != rules.STOPPED
    config = row["config"]
    # The tap devices' byte counters, summed over the NICs (as PVE's vmstatus does).
    counters = nic_counters(row, int(rt.clock.now()))
    status = {
        "vmid": vmid,
        "name": row["name"] or None,
        "status": "running" if running else "stopped",
        "cpus": row["cpus"],
        "maxmem": row["maxmem"],
        "mem": row["maxmem"] * 2 // 5 if running else 0,
        "maxdisk": row["maxdisk"],
        "disk": 0,
        "uptime": uptime(row, rt.clock.now()),
        "cpu": 0.0125 if row["status"] == rules.RUNNING else 0,
        "netin": sum(c[1] for c in counters),
        "netout": sum(c[2] for c in counters),
        "diskread": 0,
        "diskwrite": 0,
        "ha": {"managed": 0},
    }
    async with rt.pool.acquire() as conn:
        ha = await ha_repo.resource(conn, f"{'vm' if kind == rules.QEMU else 'ct'}:{vmid}")
    if ha is not None:
        status["ha"] = {"managed": 1, "state": ha["options"].get("state", "started")}
        if ha["options"].get("group"):
            status["ha"]["group"] = ha["options"]["group"]
    if kind == rules.QEMU:
        status["qmpstatus"] = row["status"]
        agent = rules.parse_property_string(config.get("agent", "0"), "enabled")
        if agent.get("enabled") in ("1", "yes", "on", "true"):
            status["agent"] = 1
        if running:
            status["pid"] = 10000 + vmid
            status.update(rt.adapter.running_qemu())
    else:
        status["type"] = "lxc"
        status["maxswap"] = 512 * MIB
        status["swap"] = 0
        if running:
            status["pid"] = 10000 + vmid
    if row["template"]:
        status["template"] = 1
    if config.get("lock"):
        status["lock"] = config["lock"]
    if config.get("tags"):
        status["tags"] = config["tags"]
    return {k: v for k, v in status.items() if v is not None}


async def lxc_interfaces(rt, node: str, vmid: int) -> list[dict]:
    async with rt.pool.acquire() as conn:
        row = await load_guest(conn, rules.LXC, node, vmid)
    if row["status"] != rules.RUNNING:
        raise PveError(f"CT {vmid} not running")
    loopback = [
        {"ip-address": "127.0.0.1", "ip-address-type": "ipv4", "prefix": 8},
        {"ip-address": "::1", "ip-address-type": "ipv6", "prefix": 128},
    ]
    result = [rt.adapter.lxc_interface("lo", "00:00:00:00:00:00", loopback)]
    for nic in row["interfaces"]:
        result.append(
            rt.adapter.lxc_interface(nic["name"], nic["hardware-address"], nic["ip-addresses"])
        )
    return result


# -- snapshots -----------------------------------------------------------------


async def list_snapshots(rt, kind: str, node: str, vmid: int) -> list[dict]:
    async with rt.pool.acquire() as conn:
        row = await load_guest(conn, kind, node, vmid)
        snaps = await guest_repo.snapshots(conn, vmid)
    out = []
    for snap in snaps:
        entry = {
            "name": snap["name"],
            "description": snap["description"],
            "snaptime": snap["snaptime"],
        }
        if snap["parent"]:
            entry["parent"] = snap["parent"]
        if kind == rules.QEMU:
            entry["vmstate"] = 1 if snap["vmstate"] else 0
        out.append(entry)
    current = {
        "name": "current",
        "description": "You are here!",
        "digest": rules.config_digest(row["config"], snaps),
    }
    if row["config"].get("parent"):
        current["parent"] = row["config"]["parent"]
    if kind == rules.QEMU:
        current["running"] = 1 if row["status"] != rules.STOPPED else 0
    out.append(current)
    return out


async def snapshot_task(
    rt, principal: Principal, kind: str, node: str, vmid: int, op: str, params: dict
) -> str:
    """op: snapshot | delsnapshot | rollback."""
    name = params["snapname"]
    async with rt.pool.acquire() as conn, conn.transaction():
        row = await load_guest(conn, kind, node, vmid)
        existing = await guest_repo.snapshot(conn, vmid, name)
        if op == "snapshot":
            if name == "current":
                raise ParameterError(
                    {"snapname": "invalid format - snapshot name 'current' is reserved"}
                )
            if existing is not None:
                raise PveError(f"snapshot name '{name}' already used")
        elif existing is None:
            raise PveError(f"snapshot '{name}' does not exist")
        prefix = "qm" if kind == rules.QEMU else "vz"
        return await enqueue(
            conn,
            rt.clock,
            node=node,
            task_type=f"{prefix}{op}",
            task_id=str(vmid),
            principal=principal,
            payload={
                "vmid": vmid,
                "kind": kind,
                "snapname": name,
                "description": params.get("description", ""),
                "vmstate": bool(params.get("vmstate")) and row["status"] != rules.STOPPED,
            },
            lock=lock_name(kind, vmid),
        )


async def snapshot_config(rt, kind: str, node: str, vmid: int, name: str) -> dict:
    async with rt.pool.acquire() as conn:
        await load_guest(conn, kind, node, vmid)
        snap = await guest_repo.snapshot(conn, vmid, name)
    if snap is None:
        raise PveError(f"snapshot '{name}' does not exist")
    return {**snap["config"], "snaptime": snap["snaptime"], "description": snap["description"]}


async def update_snapshot(rt, kind: str, node: str, vmid: int, name: str, description: str) -> None:
    async with rt.pool.acquire() as conn, conn.transaction():
        await load_guest(conn, kind, node, vmid)
        if await guest_repo.snapshot(conn, vmid, name) is None:
            raise PveError(f"snapshot '{name}' does not exist")
        await guest_repo.update_snapshot_description(conn, vmid, name, description)
