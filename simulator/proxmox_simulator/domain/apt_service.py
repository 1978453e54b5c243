"""The node's package view: installed Proxmox packages, updates, changelogs.

The simulated node is up to date: ``apt update`` refreshes (a task) and finds
nothing to upgrade.  Versions are the active contract's release and its major's
kernel (``inventory_service.node_release``), so they follow a hot-swap.
"""

from __future__ import annotations

from proxmox_simulator.domain.errors import PveError
from proxmox_simulator.domain.guest_service import require_node
from proxmox_simulator.domain.inventory_service import node_release
from proxmox_simulator.tasks.service import enqueue

# (package, title, section) of what ``pveversion -v`` lists first.
_PACKAGES = (
    ("proxmox-ve", "Proxmox Virtual Environment", "admin"),
    ("pve-manager", "Proxmox Virtual Environment Management Tools", "admin"),
    ("qemu-server", "Qemu Server Tools", "admin"),
    ("pve-container", "Proxmox VE Container management tool", "perl"),
    ("pve-firewall", "Proxmox VE Firewall", "admin"),
    ("pve-ha-manager", "Proxmox VE HA Manager", "perl"),
    ("libpve-storage-perl", "Proxmox VE storage management library", "perl"),
)


async def versions(rt, node: str) -> list[dict]:
    async with rt.pool.acquire() as conn:
        await require_node(conn, node)
    release = node_release(rt.contract.version, rt.adapter)
    version, kernel = release["manager"], release["kernel"]
    out = []
    for package, title, section in _PACKAGES:
        entry = {
            "Package": package,
            "Title": title,
            "Description": title,
            "Version": version,
            "Arch": "amd64" if package != "proxmox-ve" else "all",
            "CurrentState": "Installed",
            "Origin": "Proxmox",
            "Priority": "optional",
            "Section": section,
        }
        if package == "proxmox-ve":
            entry["RunningKernel"] = kernel
            entry["ManagerVersion"] = version
        out.append(entry)
    return out


async def upgradable(rt, node: str) -> list[dict]:
    async with rt.pool.acquire() as conn:
        await require_node(conn, node)
    return []


async def refresh(rt, principal, node: str) -> str:
    async with rt.pool.acquire() as conn, conn.transaction():
        await require_node(conn, node)
        return await enqueue(
            conn,
            rt.clock,
            node=node,
            task_type="aptupdate",
            task_id="",
            principal=principal,
            payload={"node": node},
            lock=f"apt-{node}",
        )


async def changelog(rt, node: str, package: str, version: str | None) -> str:
    installed = {e["Package"]: e for e in await versions(rt, node)}
    if package not in installed:
        raise PveError(f"changelog for package '{package}' not available")
    shown = version or installed[package]["Version"]
    return (
        f"{package} ({shown}) {rt.adapter.debian_suite}; urgency=medium\n\n"
        f"  * simulated release of {installed[package]['Title']}\n\n"
        f" -- Proxmox Support Team <support@proxmox.com>\n"
    )
