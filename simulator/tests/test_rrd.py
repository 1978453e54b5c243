"""RRD statistics of nodes and storages through proxmoxer: derived from state and the clock."""

from __future__ import annotations

import math

import pytest
from proxmoxer import ProxmoxAPI
from proxmoxer.core import ResourceException
from proxmoxer.tools import Tasks
from simtest_support import ROOT_PASSWORD

from proxmox_simulator.domain.guest_service import nic_counters, traffic_wave

NODE_FIELDS = {
    "time",
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
}


def _api(server) -> ProxmoxAPI:
    cert = server.settings.data_dir / "tls" / "pve-ssl.pem"
    return ProxmoxAPI(
        "127.0.0.1",
        port=server.port,
        verify_ssl=str(cert),
        timeout=30,
        user="root@pam",
        password=ROOT_PASSWORD,
    )


def _wait(prox, upid) -> None:
    assert Tasks.blocking_status(prox, upid, polling_interval=0.05)["exitstatus"] == "OK"


def test_node_rrddata_follows_the_node_and_its_running_guests(server, unique_vmid):
    prox = _api(server)
    node = prox.nodes("pve3")
    points = node.rrddata.get(timeframe="hour")
    assert len(points) == 70
    times = [p["time"] for p in points]
    assert times == sorted(times) and {b - a for a, b in zip(times, times[1:], strict=False)} == {
        60
    }
    status = node.status.get()
    latest = points[-1]
    assert set(latest) == NODE_FIELDS
    assert latest["maxcpu"] == status["cpuinfo"]["cpus"]
    assert (latest["memtotal"], latest["memused"]) == (
        status["memory"]["total"],
        status["memory"]["used"],
    )
    assert (latest["roottotal"], latest["rootused"]) == (
        status["rootfs"]["total"],
        status["rootfs"]["used"],
    )
    _wait(prox, node.qemu.post(vmid=unique_vmid, name="rrd-vm", memory=1024))
    _wait(prox, node.qemu(unique_vmid).status.start.post())
    try:
        after = node.rrddata.get(timeframe="hour")[-1]
        assert after["memused"] == node.status.get()["memory"]["used"]
        assert after["memused"] > latest["memused"]
        assert after["netin"] > 0 and after["cpu"] > 0
    finally:
        _wait(prox, node.qemu(unique_vmid).status.stop.post())
        _wait(prox, node.qemu(unique_vmid).delete())
    assert node.rrddata.get(timeframe="hour")[-1]["memused"] == latest["memused"]

    graph = node.rrd.get(ds="cpu,memused", timeframe="day")
    assert graph["filename"].endswith(".png")
    with pytest.raises(ResourceException) as unknown:
        node.rrd.get(ds="bogus", timeframe="day")
    assert unknown.value.status_code == 400


def test_storage_rrddata_follows_its_usage(server):
    prox = _api(server)
    storage = prox.nodes("pve1").storage("local-lvm")
    before = storage.rrddata.get(timeframe="hour")
    assert len(before) == 70
    status = storage.status.get()
    assert before[-1] == {
        "time": before[-1]["time"],
        "total": status["total"],
        "used": status["used"],
    }

    volume = storage.content.post(vmid=990777, filename="vm-990777-disk-0", size="1G")
    try:
        after = storage.rrddata.get(timeframe="hour")[-1]
        assert after["used"] == before[-1]["used"] + 1024**3
    finally:
        removed = storage.content(volume).delete()
        if isinstance(removed, str) and removed.startswith("UPID:"):  # a task since PVE 7
            _wait(prox, removed)
    assert storage.rrddata.get(timeframe="hour")[-1]["used"] == before[-1]["used"]

    assert storage.rrd.get(ds="used,total", timeframe="week")["filename"].endswith(".png")
    with pytest.raises(ResourceException):
        prox.nodes("pve1").storage("no-such-storage").rrddata.get(timeframe="hour")


def test_a_running_guests_counters_grow_every_second_even_at_the_traffic_trough():
    """The counters are the rate's integral: at the wave's lowest point, too, one second
    of running moves bytes through each of two NICs (netstat and status sum them)."""
    vmid, step = 139219, 60
    # sin((t / step + vmid) / 7) = -1: the wave's trough.
    trough = int(step * (7 * (-math.pi / 2 + 2 * math.pi * 5000) - vmid))
    assert traffic_wave(trough, step, vmid) > 0
    row = {
        "status": "running",
        "started_at": trough,
        "vmid": vmid,
        "config": {"net0": "virtio,bridge=vmbr0", "net1": "e1000,bridge=vmbr0"},
    }
    for seconds in (1, 2):
        counters = nic_counters(row, trough + seconds)
        assert all(bytes_in > 0 and bytes_out > 0 for _, bytes_in, bytes_out in counters)
    assert nic_counters(row, trough + 2)[0][1] > nic_counters(row, trough + 1)[0][1]
