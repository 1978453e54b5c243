"""``GET /cluster/metrics/export``: pvestatd's pull metrics, derived from the cluster's state."""

from __future__ import annotations

import time
from collections import defaultdict

from simtest_support import expect_data, make_vm

TEMPLATE = "/cluster/metrics/export"
NODE_METRICS = {
    "uptime",
    "net_in",
    "net_out",
    "cpu_avg1",
    "cpu_avg5",
    "cpu_avg15",
    "cpu_max",
    "cpu_current",
    "cpu_iowait",
    "mem_total",
    "mem_used",
    "swap_total",
    "swap_used",
    "disk_total",
    "disk_used",
}
STOPPED_GUEST = {"uptime", "cpu_max", "mem_total", "disk_total"}
RUNNING_QEMU = STOPPED_GUEST | {
    "cpu_current",
    "mem_used",
    "disk_read",
    "disk_write",
    "net_in",
    "net_out",
}


def _export(root, **params) -> list[dict]:
    return expect_data(root.get(TEMPLATE, params=params), TEMPLATE)["data"]


def _by_id(metrics: list[dict]) -> dict[str, dict[str, dict]]:
    grouped: dict[str, dict[str, dict]] = defaultdict(dict)
    for m in metrics:
        grouped[m["id"]][m["metric"]] = m
    return grouped


def test_the_newest_generation_covers_every_node_guest_and_storage(root):
    before = time.time()
    metrics = _export(root)
    stamps = {m["timestamp"] for m in metrics}
    assert len(stamps) == 1  # one generation of pvestatd's 10 s loop
    (stamp,) = stamps
    assert stamp % 10 == 0 and before - 20 <= stamp <= time.time()

    grouped = _by_id(metrics)
    resources = root.get("/cluster/resources").json()["data"]
    expected_ids = {r["id"] for r in resources if r["type"] in ("node", "qemu", "lxc", "storage")}
    assert set(grouped) == expected_ids

    for r in resources:
        got = grouped.get(r["id"])
        if r["type"] == "node":
            assert set(got) == NODE_METRICS
            status = root.get(f"/nodes/{r['node']}/status").json()["data"]
            assert got["mem_total"]["value"] == status["memory"]["total"]
            assert got["mem_used"]["value"] == status["memory"]["used"]
            assert got["cpu_max"]["value"] == status["cpuinfo"]["cpus"]
            assert got["net_in"]["type"] == "derive" and got["uptime"]["type"] == "gauge"
        elif r["type"] == "qemu":
            assert set(got) == (RUNNING_QEMU if r["status"] == "running" else STOPPED_GUEST)
            assert got["mem_total"]["value"] == r["maxmem"]
            assert got["disk_total"]["value"] == r["maxdisk"]
        elif r["type"] == "storage":
            assert got["disk_total"]["value"] == r["maxdisk"]
            assert got["disk_used"]["value"] == r["disk"]


def test_history_start_time_and_local_only(root):
    history = _export(root, history=1)
    stamps = sorted({m["timestamp"] for m in history})
    assert len(stamps) == 181 and {b - a for a, b in zip(stamps, stamps[1:], strict=False)} == {10}
    assert [m["timestamp"] for m in history] == sorted(m["timestamp"] for m in history)

    start = stamps[-1] - 35
    recent = {m["timestamp"] for m in _export(root, history=1, **{"start-time": start})}
    # PVE reads int((now - start) / 10) generations (3 or 4 here) and keeps those after start.
    assert min(recent) > start and len(recent) in (3, 4)

    # local-only: the answering node's own figures (pve1, the first member) alone.
    local = set(_by_id(_export(root, **{"local-only": 1})))
    resources = root.get("/cluster/resources").json()["data"]
    on_pve1 = {
        r["id"]
        for r in resources
        if r.get("node") == "pve1" and r["type"] in ("node", "qemu", "lxc", "storage")
    }
    assert local == on_pve1


def test_a_new_guest_appears_and_its_counters_grow(root, unique_vmid):
    make_vm(root, "pve2", unique_vmid)
    metric_id = f"qemu/{unique_vmid}"
    stopped = _by_id(_export(root))[metric_id]
    assert set(stopped) == STOPPED_GUEST and stopped["uptime"]["value"] == 0
    upid = root.post(f"/nodes/pve2/qemu/{unique_vmid}/status/start").json()["data"]
    assert root.wait(upid)["exitstatus"] == "OK"
    time.sleep(10 - time.time() % 10 + 0.2)  # the next generation of pvestatd's loop
    running = _by_id(_export(root))[metric_id]
    assert set(running) == RUNNING_QEMU
    assert running["uptime"]["value"] > 0 and running["net_in"]["value"] > 0
    root.post(f"/nodes/pve2/qemu/{unique_vmid}/status/stop").raise_for_status()
