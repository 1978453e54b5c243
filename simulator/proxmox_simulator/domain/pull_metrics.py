"""``GET /cluster/metrics/export``: the metrics pvestatd caches for pulling (PVE::PullMetric).

Every node's pvestatd stores one generation of metrics each 10 seconds and keeps
the last 180 older ones: its own figures (``node/<name>``), each guest's
(``qemu/<vmid>``, ``lxc/<vmid>``) and each active storage's
(``storage/<node>/<storage>``).  The export answers the newest generation, or with
``history`` the kept ones (those after ``start-time``); without ``local-only`` the
answering node adds every other online member's, and the list is sorted by time.

The simulator keeps no samples: each generation is derived, like the RRD
statistics, from the present state at that generation's time (memory and disks as
configured, uptimes from boot and start times, a guest started later counts as
stopped then) and counters (``derive``) grow with uptime at the RRD's mean rates.
"""

from __future__ import annotations

from proxmox_simulator.domain import guests as rules
from proxmox_simulator.domain.corosync_service import local_node
from proxmox_simulator.domain.guest_service import GIB
from proxmox_simulator.repositories import guests as guest_repo
from proxmox_simulator.repositories import inventory

STEP = 10  # pvestatd's update loop
KEPT_GENERATIONS = 180 + 1  # the old generations plus the newest
# Mean rates (bytes per second) of the RRD statistics' load waves.
NODE_NET_IN, NODE_NET_OUT, NODE_NET_PER_GUEST = 150, 100, (600, 400)
GUEST_RATES = {"net_in": 600, "net_out": 400, "disk_read": 2048, "disk_write": 4096}


def _gauge(metric_id: str, t: int, metric: str, value) -> dict:
    return {"metric": metric, "id": metric_id, "value": value, "timestamp": t, "type": "gauge"}


def _derive(metric_id: str, t: int, metric: str, value) -> dict:
    return {"metric": metric, "id": metric_id, "value": value, "timestamp": t, "type": "derive"}


def _node_metrics(node, running: int, guest_mem: int, t: int) -> list[dict]:
    metric_id = f"node/{node['node']}"
    up = max(0, t - node["boot_epoch"])
    busy = min(1.0, 0.01 + 0.02 * running)
    net_in = (NODE_NET_IN + NODE_NET_PER_GUEST[0] * running) * up
    net_out = (NODE_NET_OUT + NODE_NET_PER_GUEST[1] * running) * up
    return [
        _gauge(metric_id, t, "uptime", up),
        _derive(metric_id, t, "net_in", net_in),
        _derive(metric_id, t, "net_out", net_out),
        _gauge(metric_id, t, "cpu_avg1", round(busy * node["cpus"], 2)),
        _gauge(metric_id, t, "cpu_avg5", round(busy * node["cpus"], 2)),
        _gauge(metric_id, t, "cpu_avg15", round(busy * node["cpus"], 2)),
        _gauge(metric_id, t, "cpu_max", node["cpus"]),
        _gauge(metric_id, t, "cpu_current", round(busy, 6)),
        _gauge(metric_id, t, "cpu_iowait", round(busy / 20, 6)),
        _gauge(metric_id, t, "mem_total", node["maxmem"]),
        _gauge(metric_id, t, "mem_used", min(node["maxmem"], 2 * GIB + guest_mem)),
        _gauge(metric_id, t, "swap_total", 8 * GIB),
        _gauge(metric_id, t, "swap_used", 0),
        _gauge(metric_id, t, "disk_total", node["maxdisk"]),
        _gauge(metric_id, t, "disk_used", node["maxdisk"] // 10),
    ]


def _running_at(guest, t: int) -> bool:
    started = guest["started_at"]
    return guest["status"] != rules.STOPPED and (started is None or t >= int(started))


def _guest_metrics(guest, t: int) -> list[dict]:
    metric_id = f"{guest['type']}/{guest['vmid']}"
    running = _running_at(guest, t)
    up = t - int(guest["started_at"]) if running and guest["started_at"] is not None else 0
    metrics = []
    if running:
        metrics += [
            _gauge(metric_id, t, "cpu_current", 0.0125),
            _gauge(metric_id, t, "mem_used", guest["maxmem"] * 2 // 5),
            *(_derive(metric_id, t, name, rate * up) for name, rate in GUEST_RATES.items()),
        ]
        if guest["type"] == rules.LXC:
            metrics.append(_gauge(metric_id, t, "disk_used", 0))
    return metrics + [
        _gauge(metric_id, t, "uptime", up),
        _gauge(metric_id, t, "cpu_max", guest["cpus"]),
        _gauge(metric_id, t, "mem_total", guest["maxmem"]),
        _gauge(metric_id, t, "disk_total", guest["maxdisk"]),
    ]


def _storage_metrics(node: str, storage, used: int, t: int) -> list[dict]:
    metric_id = f"storage/{node}/{storage['storage']}"
    return [
        _gauge(metric_id, t, "disk_total", storage["total"]),
        _gauge(metric_id, t, "disk_used", used),
    ]


def _generations(now: int, params: dict) -> list[int]:
    """The generation times the request covers (newest last)."""
    newest = now // STEP * STEP
    start = params.get("start-time")
    if not params.get("history"):
        count = 1
    elif start is not None:
        count = max(1, (now - int(start)) // STEP)
    else:
        count = KEPT_GENERATIONS
    count = min(count, KEPT_GENERATIONS)
    times = [newest - STEP * k for k in reversed(range(count))]
    if start is not None:
        times = [t for t in times if t > int(start)]
    return times


async def export(rt, params: dict) -> dict:
    now = int(rt.clock.now())
    async with rt.pool.acquire() as conn:
        nodes = await inventory.nodes(conn)
        guests = await guest_repo.resource_rows(conn)
        storages = await inventory.storages(conn)
        used = await inventory.storage_used(conn)
    offline = rt.faults.offline_nodes()
    here = local_node(nodes)
    members = [
        n
        for n in nodes
        if n["node"] == here
        or (not params.get("local-only") and n["online"] and n["node"] not in offline)
    ]
    metrics: list[dict] = []
    for t in _generations(now, params):
        for node in members:
            name = node["node"]
            on_node = [g for g in guests if g["node"] == name]
            running = [g for g in on_node if _running_at(g, t)]
            guest_mem = sum(g["maxmem"] for g in running)
            metrics += _node_metrics(node, len(running), guest_mem, t)
            for guest in on_node:
                metrics += _guest_metrics(guest, t)
            for storage in storages:
                if not storage["enabled"] or (storage["nodes"] and name not in storage["nodes"]):
                    continue
                disk = used.get((storage["storage"], "" if storage["shared"] else name), 0)
                metrics += _storage_metrics(name, storage, disk, t)
    metrics.sort(key=lambda m: m["timestamp"])
    return {"data": metrics}
