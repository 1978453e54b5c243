"""Stage `cluster`: claim the endpoint's native cluster through the plugin's action.

The cluster is never looked up by name: the claim answers with the one native
cluster this endpoint owns (creating or renaming it), and every later stage uses
that cluster's id.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from proxbox_backend.domain import tags
from proxbox_backend.domain.counters import Tally
from proxbox_backend.domain.endpoint import Endpoint
from proxbox_backend.domain.models import ClusterIdentity
from proxbox_backend.gateways.netbox import ClaimRefused, ClaimResult, NetBoxGateway, nested_id

OBJECT_TYPE = "virtualization.cluster"


def claim_body(identity: ClusterIdentity, endpoint: Endpoint, cluster_type_id: int) -> dict:
    """The sync-cluster request: placement always comes from the endpoint record."""
    return {
        "name": identity.name,
        "mode": identity.mode,
        "cluster_type": cluster_type_id,
        "site": endpoint.site_id,
        "tenant": endpoint.tenant_id,
    }


def desired_status(identity: ClusterIdentity) -> str:
    """A cluster without quorum cannot run or change guests: NetBox calls that offline."""
    return "active" if identity.quorate else "offline"


def plan_metadata(identity: ClusterIdentity, cluster: dict) -> dict:
    """Native cluster fields the claim does not own, reconciled after it."""
    current = cluster.get("status")
    current = current.get("value") if isinstance(current, dict) else current
    wanted = desired_status(identity)
    changes = {} if current == wanted else {"status": wanted}
    return tags.with_sync_tags(changes, cluster, {tags.PROXBOX.slug})


def plan_tracking(identity: ClusterIdentity, tracking: dict) -> dict:
    """What the tracking record should know about the Proxmox side that it does not yet."""
    desired = {"quorate": identity.quorate, "node_count": len(identity.nodes)}
    if identity.version:
        desired["version"] = identity.version[:50]
    return {k: v for k, v in desired.items() if tracking.get(k) != v}


@dataclass(frozen=True)
class ClusterOutcome:
    claim: ClaimResult
    cluster_id: int
    metadata_changed: bool


def count(tally: Tally, claim: ClaimResult, metadata_changed: bool) -> None:
    """Creation takes precedence; then an update when the claim or the metadata changed."""
    if claim.created:
        tally.add(OBJECT_TYPE, "created")
    elif claim.changed or metadata_changed:
        tally.add(OBJECT_TYPE, "updated")
    else:
        tally.add(OBJECT_TYPE, "unchanged")


async def claim(
    netbox: NetBoxGateway,
    endpoint: Endpoint,
    identity: ClusterIdentity,
    cluster_type_id: int,
) -> ClusterOutcome:
    """The claim, then the native cluster's status and tags."""
    claim = await netbox.claim(endpoint, claim_body(identity, endpoint, cluster_type_id))
    changed = False
    if changes := plan_metadata(identity, claim.cluster):
        await netbox.update_cluster(claim.cluster_id, changes)
        changed = True
    return ClusterOutcome(claim, nested_id(claim.cluster), changed)


async def refresh_tracking(
    netbox: NetBoxGateway,
    claim: ClaimResult,
    identity: ClusterIdentity,
    seen_at: dt.datetime | None = None,
) -> bool:
    """Bring the tracking record up to date; whether that changed what it knows.

    Nothing the later stages write depends on it: a run does it beside them."""
    if claim.tracking_id is None:
        return False
    tracking = await netbox.tracking_record(claim.tracking_id)
    changes = plan_tracking(identity, tracking)
    # Proxmox just answered: the record says when, on every run. That is reflection
    # metadata like the sidecar's last sync, so it is not counted as an inventory change.
    seen_at = (seen_at or dt.datetime.now(dt.UTC)).isoformat()
    await netbox.update_tracking_record(claim.tracking_id, {**changes, "last_seen": seen_at})
    return bool(changes)


# -- in the run's life cycle (before the stage graph, and beside it) ------------------------


async def claimed(
    netbox: NetBoxGateway,
    endpoint: Endpoint,
    identity: ClusterIdentity,
    cluster_type_id: int,
    report,
    emit,
) -> ClusterOutcome:
    """The claim, reported as the `cluster` stage; SyncFailed when it is refused."""
    from proxbox_backend.report import SyncFailed

    emit({"event": "stage", "stage": "cluster", "state": "started", "total": 1})
    try:
        outcome = await claim(netbox, endpoint, identity, cluster_type_id)
    except ClaimRefused as exc:
        report.tally.fail(OBJECT_TYPE, identity.name, str(exc))
        raise SyncFailed(f"claim refused: {exc}") from exc
    finally:
        emit({"event": "stage", "stage": "cluster", "state": "finished", "done": 1})
    report.cluster = {
        "id": outcome.cluster_id,
        "name": identity.name,
        "mode": identity.mode,
        "tracking_id": outcome.claim.tracking_id,
        "claim_status": outcome.claim.http_status,
        "created": outcome.claim.created,
        "changed": outcome.claim.changed,
        "metadata_changed": outcome.metadata_changed,
    }
    return outcome


async def refreshed(
    netbox: NetBoxGateway, identity: ClusterIdentity, outcome: ClusterOutcome, report
) -> None:
    """The tracking record's refresh; then the cluster is counted."""
    tracking_changed = await refresh_tracking(netbox, outcome.claim, identity)
    changed = outcome.metadata_changed or tracking_changed
    report.cluster["metadata_changed"] = changed
    count(report.tally, outcome.claim, changed)
