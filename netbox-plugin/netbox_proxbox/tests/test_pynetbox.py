"""A real client (pynetbox) against a live NetBox: endpoint CRUD and the sync-cluster action."""

from __future__ import annotations

import pynetbox
import pytest
from pynetbox.core.endpoint import DetailEndpoint

from netbox_proxbox.models import ProxmoxEndpoint

from .base import CLAIM_UPDATE_PERMS

ENDPOINT_CRUD = (
    *(f"netbox_proxbox.{a}_proxmoxendpoint" for a in ("add", "delete")),
    "netbox_proxbox.view_proxmoxcluster",
    "netbox_proxbox.view_proxboxclustersyncstate",
)


def client(url, token):
    return pynetbox.api(url, token=f"nbt_{token.key}.{token.token}")


def endpoints_of(nb):
    """pynetbox's endpoint for the two-segment path endpoints/proxmox/."""
    return nb.plugins.proxbox.endpoint("endpoints/proxmox")


def bind(record, endpoint):
    # pynetbox re-derives a record's endpoint from its URL assuming a one-segment
    # path; records of endpoints/proxmox/ must be bound to the right one explicitly.
    record.endpoint = endpoint
    return record


def test_endpoint_crud_and_claim(live_netbox, committed_inventory):
    inv = committed_inventory
    _, token = inv.user((*CLAIM_UPDATE_PERMS, *ENDPOINT_CRUD))
    nb = client(live_netbox, token)
    endpoints = endpoints_of(nb)

    created = endpoints.create(
        name=f"pynb-{inv.tag}",
        host="pve.example.net",
        port=8006,
        token_id="proxbox@pve!sync",
        token_secret="pynetbox-secret-value",
        mode="cluster",
        site=inv.site.pk,
    )
    assert created.name == f"pynb-{inv.tag}"
    assert created.has_token_secret is True
    assert "token_secret" not in dict(created)
    assert created.netbox_cluster is None
    assert (
        ProxmoxEndpoint.objects.get(pk=created.id).reveal_token_secret() == "pynetbox-secret-value"
    )

    fetched = bind(endpoints.get(created.id), endpoints)
    fetched.description = "edited through pynetbox"
    assert fetched.save()
    assert endpoints.get(created.id).description == "edited through pynetbox"
    assert [e.id for e in endpoints.filter(name=f"pynb-{inv.tag}")] == [created.id]

    sync = DetailEndpoint(fetched, "sync-cluster")
    first = sync.create(
        {"name": f"pynb-cluster-{inv.tag}", "mode": "cluster", "cluster_type": inv.cluster_type.pk}
    )
    assert (first["created"], first["changed"]) == (True, False)
    repeat = sync.create(
        {"name": f"pynb-cluster-{inv.tag}", "mode": "cluster", "cluster_type": inv.cluster_type.pk}
    )
    assert (repeat["created"], repeat["changed"]) == (False, False)
    assert repeat["cluster"]["id"] == first["cluster"]["id"]
    assert repeat["proxmox_cluster"] == first["proxmox_cluster"]
    assert endpoints.get(created.id).netbox_cluster.id == first["cluster"]["id"]
    assert (
        nb.plugins.proxbox.clusters.get(first["proxmox_cluster"]).netbox_cluster.id
        == first["cluster"]["id"]
    )
    states = list(
        nb.plugins.proxbox.endpoint("cluster-sync-states").filter(cluster_id=first["cluster"]["id"])
    )
    assert [s.proxmox_cluster.id for s in states] == [first["proxmox_cluster"]]

    with pytest.raises(pynetbox.RequestError) as refused:
        sync.create({"mode": "cluster", "cluster_type": inv.cluster_type.pk})
    assert refused.value.req.status_code == 400
    assert "name" in refused.value.req.json()

    assert bind(endpoints.get(created.id), endpoints).delete()
    assert endpoints.get(created.id) is None
    assert inv.clusters().filter(pk=first["cluster"]["id"]).exists()  # the native cluster survives


def test_read_only_token_cannot_claim(live_netbox, committed_inventory):
    inv = committed_inventory
    endpoint = inv.endpoint("ro")
    _, token = inv.user(write_enabled=False)
    nb = client(live_netbox, token)
    record = bind(endpoints_of(nb).get(endpoint.pk), endpoints_of(nb))
    with pytest.raises(pynetbox.RequestError) as refused:
        DetailEndpoint(record, "sync-cluster").create(inv.body("ro"))
    assert refused.value.req.status_code == 403
    assert not inv.clusters().exists()
