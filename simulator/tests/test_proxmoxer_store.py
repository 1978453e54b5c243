"""proxmoxer against domains the resource store answers (HA, SDN, firewall,
cluster options, Ceph pools), with an API token like automation uses."""

from __future__ import annotations

import pytest
from proxmoxer import ProxmoxAPI
from proxmoxer.core import ResourceException
from proxmoxer.tools import Tasks
from simtest_support import run

from proxmox_simulator.cli import create_token


@pytest.fixture(scope="module")
def prox(server, settings):
    secret = run(create_token(settings, "root@pam!automation", privsep=False, comment=""))
    cert = server.settings.data_dir / "tls" / "pve-ssl.pem"
    return ProxmoxAPI(
        "127.0.0.1",
        port=server.port,
        verify_ssl=str(cert),
        timeout=30,
        user="root@pam",
        token_name="automation",
        token_value=secret["value"],
    )


def test_ha_group_and_resource_round_trip(prox):
    prox.cluster.ha.groups.post(group="pxgroup", nodes="pve1:2,pve2:1", restricted=1)
    assert prox.cluster.ha.groups("pxgroup").get()["nodes"] == "pve1:2,pve2:1"
    prox.cluster.ha.resources.post(sid="vm:990900", group="pxgroup", state="started")
    sids = [r["sid"] for r in prox.cluster.ha.resources.get()]
    assert "vm:990900" in sids
    prox.cluster.ha.resources("vm:990900").put(state="stopped")
    assert prox.cluster.ha.resources("vm:990900").get()["state"] == "stopped"
    prox.cluster.ha.resources("vm:990900").delete()
    prox.cluster.ha.groups("pxgroup").delete()
    with pytest.raises(ResourceException, match="does not exist"):
        prox.cluster.ha.groups("pxgroup").get()


def test_sdn_zone_vnet_subnet(prox):
    prox.cluster.sdn.zones.post(zone="pxzone", type="simple")
    prox.cluster.sdn.vnets.post(vnet="pxvnet", zone="pxzone")
    prox.cluster.sdn.vnets("pxvnet").subnets.post(subnet="10.99.0.0/24", type="subnet")
    subnets = prox.cluster.sdn.vnets("pxvnet").subnets.get()
    assert [s["subnet"] for s in subnets] == ["10.99.0.0/24"]
    prox.cluster.sdn.vnets("pxvnet").delete()
    with pytest.raises(ResourceException, match="vnet 'pxvnet' does not exist"):
        prox.cluster.sdn.vnets("pxvnet").subnets.get()


def test_cluster_firewall_rules_and_options(prox):
    before = len(prox.cluster.firewall.rules.get())
    prox.cluster.firewall.rules.post(action="ACCEPT", type="in", dport="22", proto="tcp")
    rules = prox.cluster.firewall.rules.get()
    assert len(rules) == before + 1 and rules[-1]["dport"] == "22"
    prox.cluster.options.put(keyboard="fr")
    assert prox.cluster.options.get()["keyboard"] == "fr"


def test_ceph_pool_creation_is_a_task(prox):
    upid = prox.nodes("pve1").ceph.pool.post(name="pxpool", size=2)
    assert Tasks.decode_upid(upid)["type"] == "cephpool"
    assert Tasks.blocking_status(prox, upid, polling_interval=0.05)["exitstatus"] == "OK"
    pools = {p["pool_name"]: p for p in prox.nodes("pve1").ceph.pool.get()}
    assert pools["pxpool"]["size"] == 2
