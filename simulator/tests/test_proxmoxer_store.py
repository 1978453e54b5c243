"""proxmoxer, with an API token like automation uses, against methods the
resource store answers (the extended contract of test_resource_store)."""

from __future__ import annotations

import pytest
from proxmoxer import ProxmoxAPI
from proxmoxer.core import ResourceException
from proxmoxer.tools import Tasks
from simtest_support import close_proxmoxer, run
from test_resource_store import serve_store_contract

from proxmox_simulator.cli import create_token
from proxmox_simulator.config import Settings


@pytest.fixture(scope="module")
def prox(settings, seeded):
    own = Settings(
        database_url=settings.database_url,
        data_dir=settings.data_dir,
        contract="fakepve",
        clock="instant",
        task_workers=1,
        lease_seconds=10,
        pool_max_size=5,
    )
    secret = run(create_token(settings, "root@pam!automation", privsep=False, comment=""))
    with serve_store_contract(own, tls=True) as server:
        cert = own.data_dir / "tls" / "pve-ssl.pem"
        api = ProxmoxAPI(
            "127.0.0.1",
            port=server.port,
            verify_ssl=str(cert),
            timeout=30,
            user="root@pam",
            token_name="automation",
            token_value=secret["value"],
        )
        yield api
        close_proxmoxer(api)


def test_collection_round_trip(prox):
    groups = prox.cluster.simstore.groups
    groups.post(group="pxgroup", nodes="pve1:2,pve2:1", comment="automation")
    assert groups("pxgroup").get()["nodes"] == "pve1:2,pve2:1"
    assert "pxgroup" in [g["group"] for g in groups.get()]
    groups("pxgroup").put(nofailback=1, delete="comment")
    item = groups("pxgroup").get()
    assert item["nofailback"] == 1 and "comment" not in item
    groups("pxgroup").rules.post(action="DROP", dport="23")
    assert [r["dport"] for r in groups("pxgroup").rules.get()] == ["23"]
    groups("pxgroup").delete()
    with pytest.raises(ResourceException, match="does not exist"):
        groups("pxgroup").get()


def test_config_object(prox):
    prox.cluster.simstore.options.put(keyboard="fr")
    assert prox.cluster.simstore.options.get()["keyboard"] == "fr"


def test_store_write_as_a_task(prox):
    upid = prox.cluster.simstore.jobs.post(name="pxjob", size=2)
    assert Tasks.decode_upid(upid)["type"] == "simstorejobs"
    assert Tasks.blocking_status(prox, upid, polling_interval=0.05)["exitstatus"] == "OK"
    jobs = {j["name"]: j for j in prox.cluster.simstore.jobs.get()}
    assert jobs["pxjob"]["size"] == 2


def test_a_missing_parent_is_reported_like_pve(prox):
    with pytest.raises(ResourceException, match="vnet 'pxnone' does not exist"):
        prox.cluster.sdn.vnets("pxnone").subnets.get()
