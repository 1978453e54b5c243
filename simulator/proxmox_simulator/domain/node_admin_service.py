"""A node's administration reads and actions: guest network counters, the system
report, wake-on-LAN and the vzdump defaults."""

from __future__ import annotations

from proxmox_simulator.domain import (
    apt_repositories,
    apt_service,
    corosync_service,
    node_power_service,
    node_system_service,
    storage_service,
)
from proxmox_simulator.domain import guests as rules
from proxmox_simulator.domain.access import AccessState, Principal
from proxmox_simulator.domain.errors import PveError
from proxmox_simulator.domain.guest_service import nic_counters, require_node
from proxmox_simulator.repositories import guests as guest_repo
from proxmox_simulator.repositories import inventory
from proxmox_simulator.repositories import node_system as node_repo
from proxmox_simulator.tasks.service import enqueue

# -- netstat ----------------------------------------------------------------------------


async def netstat(rt, node: str) -> list[dict]:
    """PVE reads /proc/net/dev: one entry per tap (QEMU) or veth (LXC) device of a
    running guest, ``in`` being what the device transmitted into the guest."""
    now = int(rt.clock.now())
    async with rt.pool.acquire() as conn:
        await require_node(conn, node)
        guests = await guest_repo.list_all(conn, node)
    out = []
    running = [g for g in guests if g["status"] != rules.STOPPED]
    for guest in sorted(running, key=lambda g: g["vmid"]):
        for index, bytes_in, bytes_out in nic_counters(guest, now):
            # /proc/net/dev's numbers are parsed as text and stay strings in the answer.
            out.append(
                {
                    "vmid": str(guest["vmid"]),
                    "dev": f"net{index}",
                    "in": str(bytes_in),
                    "out": str(bytes_out),
                }
            )
    return out


# -- wake-on-LAN --------------------------------------------------------------------------


async def wakeonlan(rt, node: str) -> str:
    async with rt.pool.acquire() as conn, conn.transaction():
        nodes = await inventory.nodes(conn)
        if node in ("localhost", corosync_service.local_node(nodes)):
            raise PveError(f"'{node}' is local node, cannot wake my self!")
        row = next((n for n in nodes if n["node"] == node), None)
        if row is None:
            raise PveError(f"no such cluster node '{node}'")
        config = (await node_repo.setting(conn, node, "config", {}))["value"]
        wol = rules.parse_property_string(config.get("wakeonlan") or "", "mac")
        mac = wol.get("mac")
        if not mac:
            raise PveError(f"No wake on LAN MAC address defined for '{node}'!")
        if not row["online"]:
            # The magic packet powers the machine on: it boots and starts its onboot guests.
            await inventory.set_node_power(conn, node, online=True, boot_epoch=int(rt.clock.now()))
            await enqueue(
                conn,
                rt.clock,
                node=node,
                task_type="startall",
                task_id="",
                principal=node_power_service.PVE_GUESTS,
                payload={"node": node, "vms": None, "force": 0},
            )
    return mac


# -- vzdump defaults ----------------------------------------------------------------------

VZDUMP_CONF = "vzdump.conf"
# Options a user without Sys.Audit on the node does not see.
_AUDIT_ONLY = ("mailto", "tmpdir", "dumpdir", "script", "ionice")


def _prune_string(value) -> str:
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in value.items())
    return str(value)


async def vzdump_defaults(
    rt, state: AccessState, principal: Principal, node: str, storage: str | None, returns: dict
) -> dict:
    """/etc/vzdump.conf over the schema's defaults, then the backup storage's own
    dump directory and retention, as PVE's ``read_vzdump_defaults`` + ``storage_info``."""
    schema = (returns or {}).get("properties", {})
    res = {k: v["default"] for k, v in schema.items() if "default" in v}
    async with rt.pool.acquire() as conn:
        await require_node(conn, node)
        conf = (await node_repo.setting(conn, node, VZDUMP_CONF, {}))["value"]
        res.update(conf)
        if conf.get("storage") is not None and conf.get("dumpdir") is not None:
            del res["storage"]  # PVE warns and ignores 'storage' when both are set
        if storage is not None:
            res["storage"] = storage
        if res.get("dumpdir") is None and res.get("storage") is None:
            res["storage"] = "local"
        if res.get("storage") is not None:
            name = res["storage"]
            state.require(
                principal,
                f"/storage/{name}",
                ["Datastore.Audit", "Datastore.AllocateSpace"],
                any_of=True,
            )
            row = await inventory.storage(conn, name)
            if row is None:
                raise PveError(f"storage '{name}' does not exist")
            if "backup" not in row["content"].split(","):
                raise PveError(f"can't use storage '{name}' for backups - wrong content type")
            if row["type"] != "pbs" and row["path"]:
                res["dumpdir"] = f"{row['path']}/dump"
            if row["options"].get("prune-backups"):
                res["prune-backups"] = row["options"]["prune-backups"]
    if "prune-backups" in res:
        res["prune-backups"] = _prune_string(res["prune-backups"])
    if isinstance(res.get("maxfiles"), int) and "prune-backups" in schema:
        # Old configurations' maxfiles became a keep-last retention.
        maxfiles = res.pop("maxfiles")
        res.setdefault("prune-backups", f"keep-last={maxfiles}" if maxfiles else "keep-all=1")
    if not state.has(principal, f"/nodes/{node}", ["Sys.Audit"]):
        for key in _AUDIT_ONLY:
            res.pop(key, None)
    if res.get("pool") is not None and not state.has(
        principal, f"/pool/{res['pool']}", ["Pool.Audit"]
    ):
        del res["pool"]
    return {k: v for k, v in res.items() if k in schema}


# -- report -------------------------------------------------------------------------------


def _section(title: str, commands: list[tuple[str, str]]) -> str:
    body = "".join(f"# {cmd}\n{output.rstrip()}\n\n" for cmd, output in commands)
    return f"==== {title} ====\n\n{body}"


def _storage_cfg(rows) -> str:
    blocks = []
    for row in rows:
        entry = storage_service.render_config(row)
        lines = [f"{row['type']}: {row['storage']}"]
        for key, value in entry.items():
            if key in ("storage", "type", "digest"):
                continue
            lines.append(f"\t{key} {value}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _guest_table(guests, kind: str) -> str:
    if kind == rules.QEMU:
        head = f"{'VMID':>10} {'NAME':<20} {'STATUS':<10} {'MEM(MB)':>10} {'BOOTDISK(GB)':>10}"
        rows = [
            f"{g['vmid']:>10} {g['name']:<20} {g['status']:<10} "
            f"{g['maxmem'] // 2**20:>10} {g['maxdisk'] / 2**30:>10.2f}"
            for g in guests
        ]
    else:
        head = f"{'VMID':<10} {'Status':<10} {'Lock':<10} Name"
        rows = [f"{g['vmid']:<10} {g['status']:<10} {'':<10} {g['name']}" for g in guests]
    return "\n".join([head, *rows]) if rows else ""


async def report(rt, node: str) -> str:
    """``pvereport``: the node's configuration and state as the commands it runs show them."""
    async with rt.pool.acquire() as conn:
        node_row = await require_node(conn, node)
        nodes = await inventory.nodes(conn)
        storages = await inventory.storages(conn)
        guests = sorted(await guest_repo.list_all(conn, node), key=lambda g: g["vmid"])
    versions = await apt_service.versions(rt, node)
    hosts = (await node_system_service.get_hosts(rt, node))["data"]
    apt = await apt_repositories.repositories(rt, node)
    dns = await node_system_service.get_dns(rt, node)
    interfaces, _changes = await node_system_service.list_network(rt, node, None)
    subscription = await node_system_service.subscription(rt, node)
    release = versions[0]
    pveversion = "\n".join(
        [f"proxmox-ve: {release['Version']} (running kernel: {release['RunningKernel']})"]
        + [f"{p['Package']}: {p['Version']}" for p in versions[1:]]
    )
    general = [
        ("hostname", node),
        ("pveversion --verbose", pveversion),
        ("cat /etc/hosts", hosts),
        (
            "pvesubscription get",
            "\n".join(f"{k}: {v}" for k, v in sorted(subscription.items())),
        ),
        *((f"cat {f['path']}", apt_repositories.render(f)) for f in apt["files"]),
        (
            "cat /etc/resolv.conf",
            "\n".join(
                [f"search {dns['search']}"] * bool(dns.get("search"))
                + [f"nameserver {dns[k]}" for k in ("dns1", "dns2", "dns3") if dns.get(k)]
            ),
        ),
    ]
    usable = [s for s in storages if not s["nodes"] or node in s["nodes"]]
    sections = [
        _section("general system info", general),
        _section(
            "info about storage",
            [
                ("cat /etc/pve/storage.cfg", _storage_cfg(storages)),
                ("pvesm status", "\n".join(f"{s['storage']} {s['type']}" for s in usable)),
            ],
        ),
        _section(
            "info about virtual guests",
            [
                (
                    "qm list",
                    _guest_table([g for g in guests if g["type"] == rules.QEMU], rules.QEMU),
                ),
                ("pct list", _guest_table([g for g in guests if g["type"] != rules.QEMU], "lxc")),
            ],
        ),
        _section(
            "info about network",
            [
                (
                    "cat /etc/network/interfaces",
                    "\n".join(
                        f"iface {i['iface']} inet {i.get('method', 'manual')}" for i in interfaces
                    ),
                ),
            ],
        ),
        _section(
            "info about cluster",
            [
                (
                    "pvecm nodes",
                    "\n".join(
                        f"{n['nodeid']:>10} {1:>10} {n['node']}"
                        + (" (local)" if n["node"] == node else "")
                        for n in nodes
                    ),
                ),
            ],
        ),
        _section(
            "info about hardware",
            [("lscpu", f"CPU(s): {node_row['cpus']}\nModel name: {node_row['cpu_model']}")],
        ),
    ]
    return "".join(sections)
