"""RRD statistics of nodes and storages (``rrddata``) and the graphs PVE would draw (``rrd``).

PVE samples every node and storage into round-robin databases.  The simulator
keeps no history, so each point is derived from the present state (the node's
memory in use by its running guests, its root disk, a storage's usage) and the
simulated clock: points before the node booted are empty, as in a fresh RRD,
and a deterministic load wave varies CPU and network figures over time.
"""

from __future__ import annotations

import math

from proxmox_simulator.domain import inventory_service, storage_service
from proxmox_simulator.domain.errors import ParameterError
from proxmox_simulator.domain.guest_service import require_node
from proxmox_simulator.repositories import inventory

# timeframe -> (seconds per point, points): PVE's RRA resolutions.
RRD_STEPS = {
    "hour": (60, 70),
    "day": (1800, 70),
    "week": (10800, 70),
    "month": (43200, 70),
    "year": (604800, 70),
}
NODE_SOURCES = (
    "loadavg",
    "maxcpu",
    "cpu",
    "iowait",
    "memtotal",
    "memused",
    "swaptotal",
    "swapused",
    "roottotal",
    "rootused",
    "netin",
    "netout",
)
STORAGE_SOURCES = ("total", "used")


def _times(rt, timeframe: str) -> tuple[list[int], int]:
    step, count = RRD_STEPS[timeframe]
    now = int(rt.clock.now()) // step * step
    return [now - (count - 1 - i) * step for i in range(count)], step


def _wave(t: int, step: int, seed: int) -> float:
    return (math.sin((t / step + seed) / 7.0) + 1) / 2


async def node_rrddata(rt, node: str, timeframe: str, cf: str | None) -> list[dict]:
    status = await inventory_service.node_status(rt, node)
    async with rt.pool.acquire() as conn:
        row = await require_node(conn, node)
        running = int((await inventory.node_usage(conn)).get(node, {"running": 0})["running"])
    online = node not in rt.faults.offline_nodes() and row["online"]
    factor = 1.25 if cf == "MAX" else 1.0
    times, step = _times(rt, timeframe)
    points = []
    for t in times:
        point: dict = {"time": t}
        if online and t >= row["boot_epoch"]:
            wave = _wave(t, step, row["nodeid"])
            # Each running guest adds a little CPU, load and traffic.
            busy = min(1.0, (0.01 + 0.02 * running) * (0.5 + wave) * factor)
            point.update(
                {
                    "maxcpu": status["cpuinfo"]["cpus"],
                    "cpu": round(busy, 6),
                    "loadavg": round(busy * status["cpuinfo"]["cpus"], 2),
                    "iowait": round(busy / 20, 6),
                    "memtotal": status["memory"]["total"],
                    "memused": status["memory"]["used"],
                    "swaptotal": status["swap"]["total"],
                    "swapused": status["swap"]["used"],
                    "roottotal": status["rootfs"]["total"],
                    "rootused": status["rootfs"]["used"],
                    "netin": round((300 + 1200 * running) * wave * factor, 3),
                    "netout": round((200 + 800 * running) * wave * factor, 3),
                }
            )
        points.append(point)
    return points


async def storage_rrddata(rt, node: str, storage: str, timeframe: str, cf: str | None) -> list:
    status = await storage_service.status(rt, node, storage)
    times, _step = _times(rt, timeframe)
    if not status["active"]:
        return [{"time": t} for t in times]  # a disabled storage is not sampled
    return [{"time": t, "total": status["total"], "used": status["used"]} for t in times]


def _graph(kind: str, name: str, ds: str, timeframe: str, known: tuple[str, ...]) -> dict:
    """PVE renders a PNG and answers its file name; the simulator names the image it would draw."""
    wanted = [d for d in ds.split(",") if d]
    unknown = [d for d in wanted if d not in known]
    if unknown:
        raise ParameterError({"ds": f"unknown data source '{unknown[0]}'"})
    return {"filename": f"/var/tmp/rrd-{kind}-{name}-{'_'.join(wanted)}-{timeframe}.png"}


async def node_rrd(rt, node: str, ds: str, timeframe: str) -> dict:
    async with rt.pool.acquire() as conn:
        await require_node(conn, node)
    return _graph("node", node, ds, timeframe, NODE_SOURCES)


async def storage_rrd(rt, node: str, storage: str, ds: str, timeframe: str) -> dict:
    await storage_service.status(rt, node, storage)  # the storage exists on that node
    return _graph("storage", f"{node}-{storage}", ds, timeframe, STORAGE_SOURCES)
