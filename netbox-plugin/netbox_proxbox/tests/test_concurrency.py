"""Real parallel connections: simultaneous claims, claims racing deletion, stale endpoint writes."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import psycopg

from netbox_proxbox.models import ProxboxClusterSyncState, ProxmoxCluster, ProxmoxEndpoint

from .base import CLAIM_UPDATE_PERMS, bearer

CLAIM = "/api/plugins/proxbox/endpoints/proxmox/{}/sync-cluster/"
ENDPOINT = "/api/plugins/proxbox/endpoints/proxmox/{}/"
CLUSTER = "/api/virtualization/clusters/{}/"


def fire_together(requests):
    """Send every (method, url, token, body) at the same instant; return the responses."""
    barrier = threading.Barrier(len(requests))

    def send(request):
        method, url, token, body = request
        with httpx.Client(timeout=120) as client:
            barrier.wait()
            return client.request(method, url, json=body, headers={"Authorization": bearer(token)})

    with ThreadPoolExecutor(max_workers=len(requests)) as pool:
        return list(pool.map(send, requests))


def assert_consistent(endpoint: ProxmoxEndpoint):
    """The ownership graph of one endpoint has no dangling or contradictory links."""
    endpoint.refresh_from_db()
    tracking = list(ProxmoxCluster.objects.filter(endpoint=endpoint))
    assert len(tracking) <= 1
    if endpoint.netbox_cluster_id is None:
        assert all(row.netbox_cluster_id is None for row in tracking)
        return
    sidecar = ProxboxClusterSyncState.objects.get(cluster_id=endpoint.netbox_cluster_id)
    assert [row.netbox_cluster_id for row in tracking] == [endpoint.netbox_cluster_id]
    assert sidecar.proxmox_cluster_id == tracking[0].pk


def test_32_simultaneous_claims_make_exactly_one_native_cluster(live_netbox, committed_inventory):
    inv = committed_inventory
    endpoint = inv.endpoint("race")
    _, token = inv.user()
    url = live_netbox + CLAIM.format(endpoint.pk)
    responses = fire_together([("POST", url, token, inv.body("race"))] * 32)
    statuses = sorted(r.status_code for r in responses)
    assert all(s < 500 for s in statuses), statuses
    assert statuses.count(201) == 1, statuses
    assert set(statuses) <= {200, 201, 409}, statuses
    assert inv.clusters().count() == 1
    created = next(r for r in responses if r.status_code == 201).json()
    assert all(
        r.json()["cluster"]["id"] == created["cluster"]["id"]
        for r in responses
        if r.status_code == 200
    )
    assert_consistent(endpoint)
    assert endpoint.netbox_cluster_id == created["cluster"]["id"]


def test_claims_racing_native_cluster_deletion_end_in_409_or_a_consistent_result(
    live_netbox, committed_inventory
):
    inv = committed_inventory
    endpoint = inv.endpoint("doomed")
    _, token = inv.user((*CLAIM_UPDATE_PERMS, "virtualization.delete_cluster"))
    claim_url = live_netbox + CLAIM.format(endpoint.pk)
    seen = set()
    with httpx.Client(timeout=120) as client:
        for _round in range(4):
            first = client.post(
                claim_url, json=inv.body("doomed"), headers={"Authorization": bearer(token)}
            )
            assert first.status_code in (200, 201), first.text
            cluster_id = first.json()["cluster"]["id"]
            requests = [("POST", claim_url, token, inv.body("doomed"))] * 6
            requests.insert(3, ("DELETE", live_netbox + CLUSTER.format(cluster_id), token, None))
            responses = fire_together(requests)
            statuses = [r.status_code for r in responses]
            seen.update(statuses)
            assert all(s < 500 for s in statuses), [
                (r.status_code, r.text[:300]) for r in responses
            ]
            assert statuses[3] in (204, 404, 409), statuses
            for response in responses:
                if response.status_code == 409:
                    assert (
                        "retry" in response.json()["detail"].lower() or response.json()["code"]
                    ), response.text
            assert_consistent(endpoint)
    print("statuses seen while racing deletion:", sorted(seen))
    assert inv.clusters().filter(proxmox_endpoint__isnull=False).count() <= 1


def test_endpoint_writes_racing_claims_never_overwrite_the_relation(
    live_netbox, committed_inventory
):
    inv = committed_inventory
    endpoint = inv.endpoint("busy")
    _, token = inv.user()
    claim_url = live_netbox + CLAIM.format(endpoint.pk)
    patch_url = live_netbox + ENDPOINT.format(endpoint.pk)
    requests = []
    for i in range(8):
        requests.append(("POST", claim_url, token, inv.body("busy")))
        requests.append(
            ("PATCH", patch_url, token, {"description": f"edit {i}", "netbox_cluster": None})
        )
    responses = fire_together(requests)
    assert all(r.status_code < 500 for r in responses), [
        r.text[:200] for r in responses if r.status_code >= 500
    ]
    assert sum(r.status_code == 201 for r in responses) == 1
    endpoint.refresh_from_db()
    assert endpoint.netbox_cluster_id == inv.clusters().get().pk
    # A full save of an object loaded before all of that keeps the relation too.
    stale = ProxmoxEndpoint.objects.get(pk=endpoint.pk)
    ProxmoxEndpoint.objects.filter(pk=endpoint.pk).update(netbox_cluster=None)
    ProxmoxEndpoint.objects.filter(pk=endpoint.pk).update(netbox_cluster=inv.clusters().get())
    stale.netbox_cluster = None
    stale.save()
    endpoint.refresh_from_db()
    assert endpoint.netbox_cluster_id == inv.clusters().get().pk


def test_candidate_deleted_while_the_claim_waits_for_its_lock_is_a_controlled_409(
    live_netbox, committed_inventory
):
    """Deterministic interleaving: another transaction deletes the adoption candidate
    after the claim read the tracking evidence but before it could lock the cluster."""
    inv = committed_inventory
    endpoint = inv.endpoint("vanishing")
    _, token = inv.user()
    from virtualization.models import Cluster

    candidate = Cluster.objects.create(name=f"vanishing-{inv.tag}", type=inv.cluster_type)
    tracking = ProxmoxCluster(endpoint=endpoint, name=candidate.name, netbox_cluster=candidate)
    tracking.save(claim=True)

    settings = connection_settings()
    with psycopg.connect(**settings) as deleter:
        deleter.execute(
            "UPDATE netbox_proxbox_proxmoxcluster SET netbox_cluster_id = NULL WHERE id = %s",
            [tracking.pk],
        )
        deleter.execute("DELETE FROM virtualization_cluster WHERE id = %s", [candidate.pk])
        with ThreadPoolExecutor(max_workers=1) as pool:
            pending = pool.submit(
                httpx.post,
                live_netbox + CLAIM.format(endpoint.pk),
                json=inv.body("vanishing"),
                headers={"Authorization": bearer(token)},
                timeout=60,
            )
            wait_for_lock_waiter(settings)
            deleter.commit()
            response = pending.result()
    assert response.status_code == 409, response.text
    assert response.json()["code"] == "retry"
    assert "retry after the inventory state has settled" in response.json()["detail"].lower()
    endpoint.refresh_from_db()
    assert endpoint.netbox_cluster_id is None
    # Once the inventory settled, the retry succeeds with a fresh native cluster.
    retry = httpx.post(
        live_netbox + CLAIM.format(endpoint.pk),
        json=inv.body("vanishing"),
        headers={"Authorization": bearer(token)},
    )
    assert retry.status_code == 201, retry.text
    assert_consistent(endpoint)


def connection_settings() -> dict:
    from django.db import connection

    s = connection.settings_dict
    return {
        "dbname": s["NAME"],
        "user": s["USER"] or None,
        "password": s["PASSWORD"] or None,
        "host": s["HOST"] or None,
        "port": s["PORT"] or None,
    }


def wait_for_lock_waiter(settings: dict, timeout: float = 30.0) -> None:
    """Block until some backend of this database waits on a row lock (the claim)."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(**settings, autocommit=True) as probe:
        while time.monotonic() < deadline:
            waiting = probe.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND wait_event_type = 'Lock'",
                [settings["dbname"]],
            ).fetchone()[0]
            if waiting:
                return
            time.sleep(0.05)
    raise AssertionError("the claim never waited for the native cluster lock")


def test_claim_queued_behind_a_cluster_deletion_creates_a_fresh_cluster(
    live_netbox, committed_inventory
):
    """Deterministic interleaving in the supported order: the deletion holds the endpoint and
    native-cluster locks (as its pre_delete handler takes them); the claim waits, then sees
    the settled state and creates a new native cluster."""
    inv = committed_inventory
    endpoint = inv.endpoint("requeued")
    _, token = inv.user()
    url = live_netbox + CLAIM.format(endpoint.pk)
    first = httpx.post(
        url, json=inv.body("requeued"), headers={"Authorization": bearer(token)}, timeout=60
    )
    assert first.status_code == 201, first.text
    doomed = first.json()["cluster"]["id"]

    settings = connection_settings()
    with psycopg.connect(**settings) as deleter:
        deleter.execute(
            "SELECT 1 FROM netbox_proxbox_proxmoxendpoint WHERE id = %s FOR UPDATE", [endpoint.pk]
        )
        deleter.execute("SELECT 1 FROM virtualization_cluster WHERE id = %s FOR UPDATE", [doomed])
        deleter.execute(
            "UPDATE netbox_proxbox_proxmoxendpoint SET netbox_cluster_id = NULL WHERE id = %s",
            [endpoint.pk],
        )
        deleter.execute(
            "UPDATE netbox_proxbox_proxmoxcluster SET netbox_cluster_id = NULL "
            "WHERE netbox_cluster_id = %s",
            [doomed],
        )
        deleter.execute(
            "DELETE FROM netbox_proxbox_proxboxclustersyncstate WHERE cluster_id = %s", [doomed]
        )
        deleter.execute("DELETE FROM virtualization_cluster WHERE id = %s", [doomed])
        with ThreadPoolExecutor(max_workers=1) as pool:
            pending = pool.submit(
                httpx.post,
                url,
                json=inv.body("requeued"),
                headers={"Authorization": bearer(token)},
                timeout=60,
            )
            wait_for_lock_waiter(settings)
            deleter.commit()
            response = pending.result()
    assert response.status_code == 201, response.text
    assert response.json()["cluster"]["id"] != doomed
    assert (
        response.json()["proxmox_cluster"] == first.json()["proxmox_cluster"]
    )  # same tracking record
    assert_consistent(endpoint)
