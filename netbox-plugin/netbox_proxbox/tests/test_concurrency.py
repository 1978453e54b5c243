"""Real parallel connections: simultaneous claims, claims racing deletion, stale endpoint writes."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import psycopg
import pytest
from django.db import transaction
from proxbox_processes import wait_until

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
    seen, deletions = set(), 0
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
                    assert response.json()["code"] == "retry", response.text
                    assert (
                        "retry after the inventory state has settled"
                        in response.json()["detail"].lower()
                    ), response.text
            deleted = statuses[3] == 204
            assert inv.clusters().filter(pk=cluster_id).exists() is not deleted, statuses
            if deleted:
                deletions += 1
                endpoint.refresh_from_db()
                assert endpoint.netbox_cluster_id != cluster_id
            assert_consistent(endpoint)
    # The race actually exercised deletion, and never left two owned clusters behind.
    assert deletions >= 1, sorted(seen)
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
    # `netbox_cluster` is read-only over REST (a PATCH of it is ignored): the danger is the
    # full save of an endpoint each PATCH loaded before a claim committed the relation.
    for i in range(8):
        requests.append(("POST", claim_url, token, inv.body("busy")))
        requests.append(("PATCH", patch_url, token, {"description": f"edit {i}"}))
    responses = fire_together(requests)
    assert all(r.status_code < 500 for r in responses), [
        r.text[:200] for r in responses if r.status_code >= 500
    ]
    assert sum(r.status_code == 201 for r in responses) == 1
    assert all(r.status_code == 200 for r in responses[1::2]), [r.text for r in responses[1::2]]
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
    with psycopg.connect(**settings, autocommit=True) as probe:
        wait_until(
            lambda: probe.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND wait_event_type = 'Lock'",
                [settings["dbname"]],
            ).fetchone()[0],
            timeout,
            "the claim to wait for the native cluster lock",
            interval=0.05,
        )


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


def count_lock_waiters(settings: dict) -> int:
    with psycopg.connect(**settings, autocommit=True) as probe:
        return probe.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND wait_event_type = 'Lock'",
            [settings["dbname"]],
        ).fetchone()[0]


def wait_for_lock_waiters(settings: dict, count: int, timeout: float = 30.0) -> None:
    wait_until(
        lambda: count_lock_waiters(settings) >= count,
        timeout,
        f"{count} sessions to wait for a lock",
        interval=0.05,
    )


CRUD = (
    "netbox_proxbox.view_proxmoxcluster",
    "netbox_proxbox.add_proxmoxcluster",
    "netbox_proxbox.change_proxmoxcluster",
    "netbox_proxbox.view_proxboxclustersyncstate",
    "netbox_proxbox.change_proxboxclustersyncstate",
    "virtualization.delete_cluster",
)


def test_cluster_deletion_never_locks_a_new_owner_after_the_cluster(
    live_netbox, committed_inventory
):
    """A claim adopts the cluster while its deletion waits for the cluster lock, and the
    endpoint's next claim is already queued. Locking that owner after the cluster (the old
    order) deadlocks with the queued claim; the deletion must answer 409 instead."""
    from virtualization.models import Cluster

    inv = committed_inventory
    endpoint = inv.endpoint("adopter")
    _, token = inv.user((*CLAIM_UPDATE_PERMS, *CRUD))
    cluster = Cluster.objects.create(name=f"contested-{inv.tag}", type=inv.cluster_type)
    settings = connection_settings()
    with psycopg.connect(**settings) as first_claim, ThreadPoolExecutor(max_workers=2) as pool:
        first_claim.execute(
            "SELECT 1 FROM netbox_proxbox_proxmoxendpoint WHERE id = %s FOR UPDATE", [endpoint.pk]
        )
        first_claim.execute(
            "SELECT 1 FROM virtualization_cluster WHERE id = %s FOR UPDATE", [cluster.pk]
        )
        first_claim.execute(
            "UPDATE netbox_proxbox_proxmoxendpoint SET netbox_cluster_id = %s WHERE id = %s",
            [cluster.pk, endpoint.pk],
        )
        deletion = pool.submit(
            httpx.delete,
            live_netbox + CLUSTER.format(cluster.pk),
            headers={"Authorization": bearer(token)},
            timeout=60,
        )
        wait_for_lock_waiters(settings, 1)

        def next_claim():
            with psycopg.connect(**settings) as claim:
                # Let the deletion's side detect any cycle (deadlock_timeout defaults to 1 s).
                claim.execute("SET deadlock_timeout = '20s'")
                claim.execute(
                    "SELECT 1 FROM netbox_proxbox_proxmoxendpoint WHERE id = %s FOR UPDATE",
                    [endpoint.pk],
                )
                claim.execute(
                    "SELECT 1 FROM virtualization_cluster WHERE id = %s FOR UPDATE", [cluster.pk]
                )
                claim.rollback()
            return "locked endpoint then cluster"

        queued = pool.submit(next_claim)
        wait_for_lock_waiters(settings, 2)
        first_claim.commit()
        response = deletion.result()
        assert queued.result(timeout=30) == "locked endpoint then cluster"
    assert response.status_code == 409, response.text
    assert response.json()["code"] == "retry"
    assert "retry after the inventory state has settled" in response.json()["detail"].lower()
    endpoint.refresh_from_db()
    assert endpoint.netbox_cluster_id == cluster.pk  # the deletion rolled back entirely
    # Once settled, the retried deletion succeeds and clears the relation.
    retry = httpx.delete(
        live_netbox + CLUSTER.format(cluster.pk),
        headers={"Authorization": bearer(token)},
        timeout=60,
    )
    assert retry.status_code == 204, retry.text
    endpoint.refresh_from_db()
    assert endpoint.netbox_cluster_id is None


def test_tracking_creation_waits_for_a_claim_holding_the_endpoint(live_netbox, committed_inventory):
    inv = committed_inventory
    endpoint = inv.endpoint("creating")
    _, token = inv.user((*CLAIM_UPDATE_PERMS, *CRUD))
    settings = connection_settings()
    with psycopg.connect(**settings) as claim, ThreadPoolExecutor(max_workers=1) as pool:
        claim.execute(
            "SELECT 1 FROM netbox_proxbox_proxmoxendpoint WHERE id = %s FOR UPDATE", [endpoint.pk]
        )
        pending = pool.submit(
            httpx.post,
            live_netbox + "/api/plugins/proxbox/clusters/",
            json={"endpoint": endpoint.pk, "name": "same-name"},
            headers={"Authorization": bearer(token)},
            timeout=60,
        )
        wait_for_lock_waiters(settings, 1, timeout=15)
        assert not pending.done()
        # It waits before writing anything: the claim's name-clash check cannot be bypassed by a
        # row inserted meanwhile (the deferred foreign key check alone would only wait at commit).
        with psycopg.connect(**settings, autocommit=True) as probe:
            written = probe.execute(
                "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                "WHERE a.datname = %s AND a.wait_event_type = 'Lock' "
                "AND l.mode = 'RowExclusiveLock' "
                "AND l.relation = 'netbox_proxbox_proxmoxcluster'::regclass",
                [settings["dbname"]],
            ).fetchone()[0]
        assert written == 0
        claim.commit()
        response = pending.result()
    assert response.status_code == 201, response.text


def _patch_while_deleted(url, body, token, *, lock, delete):
    """PATCH `url` while another connection holds `lock` (table, id) and has deleted the
    row `delete` (table, id); the deletion commits once the PATCH waits on the lock."""
    settings = connection_settings()
    with psycopg.connect(**settings) as deleter, ThreadPoolExecutor(max_workers=1) as pool:
        deleter.execute(f"SELECT 1 FROM {lock[0]} WHERE id = %s FOR UPDATE", [lock[1]])
        deleter.execute(f"DELETE FROM {delete[0]} WHERE id = %s", [delete[1]])
        pending = pool.submit(
            httpx.patch, url, json=body, headers={"Authorization": bearer(token)}, timeout=60
        )
        wait_for_lock_waiters(settings, 1)
        deleter.commit()
        return pending.result()


def test_tracking_save_hit_by_a_concurrent_deletion_is_a_409(live_netbox, committed_inventory):
    inv = committed_inventory
    endpoint = inv.endpoint("vanishing-row")
    _, token = inv.user((*CLAIM_UPDATE_PERMS, *CRUD))
    row = ProxmoxCluster.objects.create(endpoint=endpoint, name="doomed-row")
    response = _patch_while_deleted(
        live_netbox + f"/api/plugins/proxbox/clusters/{row.pk}/",
        {"version": "9.0"},
        token,
        lock=("netbox_proxbox_proxmoxendpoint", endpoint.pk),
        delete=("netbox_proxbox_proxmoxcluster", row.pk),
    )
    assert response.status_code == 409, response.text
    assert response.json()["code"] == "retry"
    assert "deleted meanwhile" in response.json()["detail"]


def test_sidecar_save_hit_by_a_concurrent_deletion_is_a_409(live_netbox, committed_inventory):
    inv = committed_inventory
    endpoint = inv.endpoint("sidecar")
    _, token = inv.user((*CLAIM_UPDATE_PERMS, *CRUD))
    claimed = httpx.post(
        live_netbox + CLAIM.format(endpoint.pk),
        json=inv.body("sidecar"),
        headers={"Authorization": bearer(token)},
        timeout=60,
    )
    assert claimed.status_code == 201, claimed.text
    cluster_id = claimed.json()["cluster"]["id"]
    sidecar = ProxboxClusterSyncState.objects.get(cluster_id=cluster_id)
    response = _patch_while_deleted(
        live_netbox + f"/api/plugins/proxbox/cluster-sync-states/{sidecar.pk}/",
        {"status": "succeeded"},
        token,
        lock=("virtualization_cluster", cluster_id),
        delete=("netbox_proxbox_proxboxclustersyncstate", sidecar.pk),
    )
    assert response.status_code == 409, response.text
    assert response.json()["code"] == "retry"


def test_ordinary_tracking_save_in_a_deadlock_is_a_409(live_netbox, committed_inventory):
    """Another session holds the tracking row and then wants the endpoint the save holds."""
    inv = committed_inventory
    endpoint = inv.endpoint("deadlocked")
    _, token = inv.user((*CLAIM_UPDATE_PERMS, *CRUD))
    row = ProxmoxCluster.objects.create(endpoint=endpoint, name="contended")
    settings = connection_settings()
    with psycopg.connect(**settings) as other, ThreadPoolExecutor(max_workers=2) as pool:
        other.execute("SET deadlock_timeout = '20s'")  # the save's session detects the cycle
        other.execute(
            "SELECT 1 FROM netbox_proxbox_proxmoxcluster WHERE id = %s FOR UPDATE", [row.pk]
        )
        pending = pool.submit(
            httpx.patch,
            live_netbox + f"/api/plugins/proxbox/clusters/{row.pk}/",
            json={"version": "deadlock"},
            headers={"Authorization": bearer(token)},
            timeout=60,
        )
        wait_for_lock_waiters(settings, 1)  # the save holds the endpoint, waits for the row
        other.execute(
            "SELECT 1 FROM netbox_proxbox_proxmoxendpoint WHERE id = %s FOR UPDATE", [endpoint.pk]
        )
        response = pending.result()
        other.rollback()
    assert response.status_code == 409, response.text
    assert response.json()["code"] == "retry"
    row.refresh_from_db()
    assert row.version == ""


def test_sidecar_save_hit_by_a_serialization_failure_is_a_409(live_netbox, committed_inventory):
    """Under REPEATABLE READ (as a deployment may configure), a sidecar row updated by a
    concurrent transaction after the request's snapshot cannot be locked: SQLSTATE 40001."""
    from django.db import connections
    from psycopg import IsolationLevel

    inv = committed_inventory
    endpoint = inv.endpoint("serialized")
    _, token = inv.user((*CLAIM_UPDATE_PERMS, *CRUD))
    claimed = httpx.post(
        live_netbox + CLAIM.format(endpoint.pk),
        json=inv.body("serialized"),
        headers={"Authorization": bearer(token)},
        timeout=60,
    )
    assert claimed.status_code == 201, claimed.text
    cluster_id = claimed.json()["cluster"]["id"]
    sidecar = ProxboxClusterSyncState.objects.get(cluster_id=cluster_id)
    options = connections.settings["default"].setdefault("OPTIONS", {})
    options["isolation_level"] = IsolationLevel.REPEATABLE_READ  # new request connections
    settings = connection_settings()
    try:
        with psycopg.connect(**settings) as writer, ThreadPoolExecutor(max_workers=1) as pool:
            writer.execute(
                "SELECT 1 FROM virtualization_cluster WHERE id = %s FOR UPDATE", [cluster_id]
            )
            writer.execute(
                "UPDATE netbox_proxbox_proxboxclustersyncstate SET message = 'concurrent' "
                "WHERE id = %s",
                [sidecar.pk],
            )
            pending = pool.submit(
                httpx.patch,
                live_netbox + f"/api/plugins/proxbox/cluster-sync-states/{sidecar.pk}/",
                json={"status": "failed"},
                headers={"Authorization": bearer(token)},
                timeout=60,
            )
            wait_for_lock_waiters(settings, 1)  # its snapshot predates the writer's commit
            writer.commit()
            response = pending.result()
    finally:
        options.pop("isolation_level", None)
    assert response.status_code == 409, response.text
    assert response.json()["code"] == "retry"
    sidecar.refresh_from_db()
    assert (sidecar.message, sidecar.status) == ("concurrent", "never")


def test_cluster_deletion_locks_every_evidence_endpoint_before_the_cluster(
    live_netbox, committed_inventory
):
    """Tracking rows of two endpoints link the cluster. NetBox's own delete path clears each
    link by saving the row, which locks that row's endpoint: the second endpoint would be
    locked after the cluster and deadlock with a claim of that endpoint (endpoint, then
    cluster). The deletion must lock both endpoints first and then wait its turn."""
    inv = committed_inventory
    # NetBox clears the links in tracking order (by endpoint name): the owner's row first.
    owner, other = inv.endpoint("a-owner"), inv.endpoint("z-evidence")
    _, token = inv.user((*CLAIM_UPDATE_PERMS, *CRUD))
    claimed = httpx.post(
        live_netbox + CLAIM.format(owner.pk),
        json=inv.body("a-owner"),
        headers={"Authorization": bearer(token)},
        timeout=60,
    )
    assert claimed.status_code == 201, claimed.text
    cluster_id = claimed.json()["cluster"]["id"]
    ProxmoxCluster(endpoint=other, name=f"old-{inv.tag}", netbox_cluster_id=cluster_id).save(
        claim=True
    )
    settings = connection_settings()
    with psycopg.connect(**settings) as claim, ThreadPoolExecutor(max_workers=1) as pool:
        # The other endpoint's claim has its endpoint locked and is about to lock the cluster.
        claim.execute("SET deadlock_timeout = '20s'")
        claim.execute(
            "SELECT 1 FROM netbox_proxbox_proxmoxendpoint WHERE id = %s FOR UPDATE", [other.pk]
        )
        deletion = pool.submit(
            httpx.delete,
            live_netbox + CLUSTER.format(cluster_id),
            headers={"Authorization": bearer(token)},
            timeout=60,
        )
        wait_for_lock_waiters(settings, 1)
        claim.execute("SELECT 1 FROM virtualization_cluster WHERE id = %s FOR UPDATE", [cluster_id])
        claim.rollback()
        response = deletion.result()
    assert response.status_code == 204, response.text
    owner.refresh_from_db()
    assert owner.netbox_cluster_id is None
    assert not ProxmoxCluster.objects.filter(netbox_cluster_id=cluster_id).exists()
    assert ProxmoxCluster.objects.filter(endpoint__in=[owner, other]).count() == 2


def test_endpoint_deletion_locks_tracking_rows_before_sidecars(live_netbox, committed_inventory):
    """A writer of the suffix tracking row → sidecar holds the endpoint's tracking row and
    next locks the sidecar. The endpoint deletion must not take the sidecar first (it would
    deadlock); it waits for the tracking row and then deletes the endpoint."""
    inv = committed_inventory
    endpoint = inv.endpoint("leaving")
    _, token = inv.user((*CLAIM_UPDATE_PERMS, *CRUD, "netbox_proxbox.delete_proxmoxendpoint"))
    claimed = httpx.post(
        live_netbox + CLAIM.format(endpoint.pk),
        json=inv.body("leaving"),
        headers={"Authorization": bearer(token)},
        timeout=60,
    )
    assert claimed.status_code == 201, claimed.text
    cluster_id, tracking_id = claimed.json()["cluster"]["id"], claimed.json()["proxmox_cluster"]
    settings = connection_settings()
    with psycopg.connect(**settings) as writer, ThreadPoolExecutor(max_workers=1) as pool:
        writer.execute("SET deadlock_timeout = '20s'")
        writer.execute(
            "SELECT 1 FROM netbox_proxbox_proxmoxcluster WHERE id = %s FOR UPDATE", [tracking_id]
        )
        deletion = pool.submit(
            httpx.delete,
            live_netbox + ENDPOINT.format(endpoint.pk),
            headers={"Authorization": bearer(token)},
            timeout=60,
        )
        wait_for_lock_waiters(settings, 1)
        writer.execute(
            "SELECT 1 FROM netbox_proxbox_proxboxclustersyncstate WHERE cluster_id = %s FOR UPDATE",
            [cluster_id],
        )
        writer.rollback()
        response = deletion.result()
    assert response.status_code == 204, response.text
    assert not ProxmoxEndpoint.objects.filter(pk=endpoint.pk).exists()
    assert inv.clusters().filter(pk=cluster_id).exists()  # the native cluster stays
    assert ProxboxClusterSyncState.objects.get(cluster_id=cluster_id).proxmox_cluster_id is None


@pytest.mark.django_db
def test_a_lock_requested_against_the_order_is_refused():
    from netbox_proxbox.ownership.locks import InventoryLocks, LockOrderError

    with transaction.atomic():
        locks = InventoryLocks().acquire(cluster_ids=[], tracking_ids=[])
        with pytest.raises(LockOrderError, match="rank 1 requested while holding rank 3"):
            locks.acquire(endpoint_ids=[])
        with pytest.raises(LockOrderError, match="rank 3 requested while holding rank 3"):
            locks.acquire(tracking_ids=[])
        locks.acquire(sidecar_cluster_ids=[])  # a later rank is fine
