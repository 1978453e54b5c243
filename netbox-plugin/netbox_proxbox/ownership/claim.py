"""The sync-cluster claim: an endpoint takes (or keeps) ownership of its native cluster.

One transaction, local database writes only (no credentials are resolved and
Proxmox is never called). Locks follow `InventoryLocks`' order. Authority over
the tracking row and the typed sidecar is derived from the caller's endpoint and
native-cluster permissions; the tracking and sidecar permissions (and their
object constraints) deliberately play no part.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.db import DatabaseError, IntegrityError, transaction
from django.db.models import Q
from django.utils.translation import gettext as _
from netbox.api.viewsets.mixins import discard_events_on_rollback
from virtualization.models import Cluster

from ..models import ProxboxClusterSyncState, ProxmoxCluster, ProxmoxEndpoint
from . import permissions
from .errors import (
    ClaimConflict,
    ClaimForbidden,
    ClaimInvalid,
    InventoryInFlux,
    is_retryable,
    sqlstate,
)
from .locks import InventoryLocks

# Sentinel for optional placement fields the caller omitted (omission preserves, null clears).
UNSET: Any = object()

UNIQUE_VIOLATION = "23505"
FOREIGN_KEY_VIOLATION = "23503"


@dataclass(frozen=True)
class ClaimRequest:
    name: str
    mode: str
    cluster_type: Any  # virtualization.ClusterType, visible to the caller
    cluster_id: str = ""
    site: Any = UNSET  # dcim.Site | None | UNSET
    tenant: Any = UNSET  # tenancy.Tenant | None | UNSET


@dataclass(frozen=True)
class ClaimResult:
    cluster: Cluster
    tracking: ProxmoxCluster
    created: bool
    changed: bool


def claim_native_cluster(user, endpoint: ProxmoxEndpoint, request: ClaimRequest) -> ClaimResult:
    """Run the claim for a caller already known to see and change `endpoint` (preflight)."""
    try:
        # NetBox queues an object's events when it is saved; a refused claim rolls back rows
        # it already wrote (a created native cluster), so their webhooks must go with them.
        with transaction.atomic(), discard_events_on_rollback(sender=claim_native_cluster):
            return _Claim(user, endpoint.pk, request).run()
    except IntegrityError as exc:
        state = sqlstate(exc)
        if state == UNIQUE_VIOLATION:
            raise ClaimConflict(
                _(
                    "A concurrent write created a conflicting record (native cluster name or "
                    "ownership). Review the clusters named {name!r}, then retry."
                ).format(name=request.name),
                code="uniqueness",
            ) from exc
        if state == FOREIGN_KEY_VIOLATION:
            raise InventoryInFlux(
                _("A related object was deleted while the claim was running.")
            ) from exc
        raise
    except DatabaseError as exc:
        if is_retryable(exc):
            raise InventoryInFlux(
                _("The claim collided with a concurrent inventory change.")
            ) from exc
        raise


class _Claim:
    def __init__(self, user, endpoint_pk: int, request: ClaimRequest):
        self.user = user
        self.endpoint_pk = endpoint_pk
        self.request = request
        self.locks = InventoryLocks()

    # -- steps, in lock order --

    def run(self) -> ClaimResult:
        endpoint = self._lock_endpoint()
        cluster, adopting = self._lock_native_cluster(endpoint)
        if cluster is not None:
            permissions.require_existing_cluster_access(self.user, cluster)
        tracking = self._lock_tracking(endpoint, cluster)

        created = changed = False
        if cluster is None:
            cluster = self._create_native_cluster()
            created = True
        else:
            changed = self._update_native_cluster(cluster)

        if adopting or created:
            endpoint.snapshot()
            endpoint.netbox_cluster = cluster
            endpoint.save(assign_native_cluster=True, update_fields=["netbox_cluster"])

        tracking = self._write_tracking(endpoint, cluster, tracking)
        self._write_sidecar(cluster, tracking)
        return ClaimResult(cluster=cluster, tracking=tracking, created=created, changed=changed)

    def _lock_endpoint(self) -> ProxmoxEndpoint:
        # Preflight saw the endpoint; reload it under its lock before choosing anything.
        self.locks.acquire(endpoint_id=self.endpoint_pk)
        endpoint = self.locks.endpoint
        if endpoint is None:
            raise InventoryInFlux(_("The endpoint was deleted while the claim was running."))
        # Constrained permissions may depend on fields another writer just changed.
        permissions.require_endpoint_access(self.user, endpoint)
        if not endpoint.enabled:
            raise ClaimConflict(
                _("Endpoint {name!r} is disabled; enable it before synchronizing.").format(
                    name=endpoint.name
                ),
                code="endpoint_disabled",
            )
        return endpoint

    def _lock_native_cluster(self, endpoint) -> tuple[Cluster | None, bool]:
        """The owned cluster, else one adoptable through unambiguous tracking links, else None."""
        if endpoint.netbox_cluster_id is not None:
            self.locks.acquire(cluster_id=endpoint.netbox_cluster_id)
            if self.locks.cluster is None:
                raise InventoryInFlux(
                    _("The endpoint's native cluster was deleted while the claim was running.")
                )
            return self.locks.cluster, False

        evidence = self._linked_clusters(endpoint_id=endpoint.pk)
        if not evidence:
            return None, False
        if len(evidence) > 1:
            seen = [pk for pk in evidence if permissions.visible(self.user, Cluster, pk)]
            hidden = len(evidence) - len(seen)
            listed = ", ".join(map(str, seen)) or "none you may view"
            raise ClaimConflict(
                _(
                    "Tracking records of endpoint {name!r} link several native clusters "
                    "(IDs {ids}{more}); ownership is ambiguous. Review them and clear obsolete "
                    "links through tracking CRUD before retrying. Do not delete native clusters."
                ).format(
                    name=endpoint.name,
                    ids=listed,
                    more=_(" and {n} you may not view").format(n=hidden) if hidden else "",
                ),
                code="ambiguous_tracking",
            )
        candidate = evidence[0]
        self.locks.acquire(cluster_id=candidate)
        cluster = self.locks.cluster
        if cluster is None:
            raise InventoryInFlux(_("The linked native cluster was deleted during the claim."))
        # Re-read the evidence now that the candidate cannot change hands.
        owner = (
            ProxmoxEndpoint.objects.filter(netbox_cluster_id=candidate)
            .exclude(pk=endpoint.pk)
            .values_list("pk", "name")
            .first()
        )
        # Messages name another endpoint or a native cluster only to callers who may view it.
        cluster_label = permissions.shown(
            self.user, Cluster, cluster.pk, cluster.name, _("linked by this endpoint's tracking")
        )
        if owner is not None:
            owner_label = (
                _("endpoint {name!r}").format(name=owner[1])
                if permissions.visible(self.user, ProxmoxEndpoint, owner[0])
                else _("another endpoint")
            )
            raise ClaimConflict(
                _(
                    "Native cluster {cluster} is owned by {owner}; it is never adopted by "
                    "another endpoint. Clear this endpoint's obsolete tracking link before "
                    "retrying."
                ).format(cluster=cluster_label, owner=owner_label),
                code="owned_by_another_endpoint",
            )
        others = (
            ProxmoxCluster.objects.filter(netbox_cluster_id=candidate)
            .exclude(endpoint_id=endpoint.pk)
            .exists()
        )
        if others or self._linked_clusters(endpoint_id=endpoint.pk) != [candidate]:
            raise ClaimConflict(
                _(
                    "Native cluster {cluster} is linked by tracking records of several "
                    "endpoints; ownership is ambiguous. Review and clear obsolete links through "
                    "tracking CRUD before retrying."
                ).format(cluster=cluster_label),
                code="ambiguous_tracking",
            )
        return cluster, True

    @staticmethod
    def _linked_clusters(endpoint_id: int) -> list[int]:
        return sorted(
            ProxmoxCluster.objects.filter(endpoint_id=endpoint_id, netbox_cluster__isnull=False)
            .values_list("netbox_cluster_id", flat=True)
            .distinct()
        )

    def _lock_tracking(self, endpoint, cluster) -> ProxmoxCluster | None:
        """Choose the one tracking row this claim maintains (or None: create one)."""
        req = self.request
        rows = ProxmoxCluster.objects.filter(endpoint_id=endpoint.pk)
        canonical = None
        if cluster is not None:
            linked = list(rows.filter(netbox_cluster_id=cluster.pk).order_by("pk"))
            if len(linked) > 1:
                raise ClaimConflict(
                    _(
                        "Several tracking records (IDs {ids}) link endpoint {name!r} to native "
                        "cluster {cluster!r}; keep the canonical one and clear the link on the "
                        "obsolete duplicates through tracking CRUD before retrying."
                    ).format(
                        ids=", ".join(str(r.pk) for r in linked),
                        name=endpoint.name,
                        cluster=cluster.name,
                    ),
                    code="duplicate_tracking",
                )
            canonical = linked[0] if linked else None
        if canonical is None and cluster is not None:
            # A matching row linked to some other native cluster is obsolete evidence: it is
            # never moved silently; an operator clears it first.
            elsewhere = rows.filter(netbox_cluster__isnull=False).exclude(netbox_cluster=cluster)
            same = Q(name=req.name) | (Q(cluster_id=req.cluster_id) if req.cluster_id else Q())
            stale = list(elsewhere.filter(same).values_list("pk", flat=True))
            if stale:
                raise ClaimConflict(
                    _(
                        "Tracking records {ids} of endpoint {name!r} match {cluster!r} but link "
                        "another native cluster; clear their obsolete link through tracking CRUD "
                        "before retrying."
                    ).format(ids=stale, name=endpoint.name, cluster=req.name),
                    code="stale_tracking_link",
                )
        if canonical is None:
            unlinked = rows.filter(netbox_cluster__isnull=True)
            matches = []
            if req.cluster_id:
                matches = list(unlinked.filter(cluster_id=req.cluster_id))
            if not matches:
                # A name match only counts for rows that never recorded a (different) identity.
                by_name = unlinked.filter(name=req.name)
                matches = list(by_name.filter(cluster_id="") if req.cluster_id else by_name)
            if len(matches) > 1:
                raise ClaimConflict(
                    _(
                        "Several unlinked tracking records (IDs {ids}) of endpoint {name!r} match "
                        "{cluster!r}; remove the obsolete ones before retrying."
                    ).format(
                        ids=", ".join(str(r.pk) for r in matches),
                        name=endpoint.name,
                        cluster=req.name,
                    ),
                    code="duplicate_tracking",
                )
            canonical = matches[0] if matches else None

        if (
            canonical is not None
            and req.cluster_id
            and canonical.cluster_id
            and canonical.cluster_id != req.cluster_id
        ):
            raise ClaimConflict(
                _(
                    "Endpoint {name!r} now reports source identity {new!r} but its tracking "
                    "record {pk} has {old!r}; synchronization never reassigns ownership. "
                    "Review the endpoint before retrying."
                ).format(
                    name=endpoint.name,
                    new=req.cluster_id,
                    old=canonical.cluster_id,
                    pk=canonical.pk,
                ),
                code="identity_changed",
            )
        clash = rows.filter(name=req.name, netbox_cluster__isnull=True)
        if canonical is not None:
            clash = clash.exclude(pk=canonical.pk)
        if clash.exists():
            raise ClaimConflict(
                _(
                    "An unrelated unlinked tracking record of endpoint {name!r} is named {cluster!r}; "
                    "correct or remove it before retrying."
                ).format(name=endpoint.name, cluster=req.name),
                code="tracking_name_clash",
            )

        self.locks.acquire(tracking_ids=[canonical.pk] if canonical else [])
        if canonical is None:
            return None
        locked = self.locks.tracking[0] if self.locks.tracking else None
        expected_link = cluster.pk if cluster is not None else None
        if (
            locked is None
            or locked.endpoint_id != endpoint.pk
            or locked.netbox_cluster_id not in (expected_link, None)
        ):
            raise InventoryInFlux(_("The tracking record changed while the claim was running."))
        return locked

    def _placement(self, cluster: Cluster) -> bool:
        """Apply requested site/tenant to `cluster`; whether anything substantive changed."""
        req, changed = self.request, False
        if req.site is not UNSET:
            if req.site is None:
                if cluster.scope_type_id is not None:
                    cluster.scope = None
                    cluster.scope_type = None
                    cluster.scope_id = None
                    changed = True
            elif cluster._site_id != req.site.pk:
                # A location inside the requested site already satisfies the placement.
                cluster.scope = req.site
                changed = True
        if req.tenant is not UNSET:
            tenant_id = req.tenant.pk if req.tenant is not None else None
            if cluster.tenant_id != tenant_id:
                cluster.tenant = req.tenant
                changed = True
        return changed

    def _validate_native(self, cluster: Cluster) -> None:
        cluster.cache_related_objects()
        try:
            cluster.full_clean()
        except ValidationError as exc:
            errors = (
                exc.message_dict if hasattr(exc, "error_dict") else {NON_FIELD_ERRORS: exc.messages}
            )
            if NON_FIELD_ERRORS in errors:
                raise ClaimConflict(
                    _(
                        "NetBox's uniqueness rules prevent a native cluster named {name!r} here: "
                        "{reason} A name match never establishes ownership; rename or re-scope "
                        "the existing cluster, or report a different placement."
                    ).format(name=cluster.name, reason=" ".join(errors[NON_FIELD_ERRORS])),
                    code="native_name_clash",
                ) from exc
            field, messages = next(iter(errors.items()))
            raise ClaimInvalid(" ".join(messages), field=_REQUEST_FIELD.get(field, field)) from exc

    def _create_native_cluster(self) -> Cluster:
        permissions.require_cluster_add(self.user)
        req = self.request
        cluster = Cluster(name=req.name, type=req.cluster_type)
        self._placement(cluster)
        self._validate_native(cluster)
        cluster.save()
        permissions.require_created_cluster_access(self.user, cluster)
        return cluster

    def _update_native_cluster(self, cluster: Cluster) -> bool:
        req = self.request
        cluster.snapshot()
        changed = self._placement(cluster)
        if cluster.name != req.name:
            cluster.name = req.name
            changed = True
        if cluster.type_id != req.cluster_type.pk:
            cluster.type = req.cluster_type
            changed = True
        if not changed:
            return False
        self._validate_native(cluster)
        cluster.save()
        if not permissions.permitted(self.user, Cluster, "change", cluster.pk):
            raise ClaimForbidden(
                _("Your cluster change permission does not allow these attributes.")
            )
        return True

    def _write_tracking(self, endpoint, cluster, tracking) -> ProxmoxCluster:
        req = self.request
        if tracking is None:
            tracking = ProxmoxCluster(
                endpoint=endpoint,
                name=req.name,
                cluster_id=req.cluster_id,
                mode=req.mode,
            )
            tracking.full_clean()
            # The link is the claim's to set; model validation rejects it from anyone else.
            tracking.netbox_cluster = cluster
            tracking.save(claim=True)
            return tracking
        desired = {
            "name": req.name,
            "mode": req.mode,
            "cluster_id": req.cluster_id or tracking.cluster_id,
            "netbox_cluster_id": cluster.pk,
        }
        if any(getattr(tracking, k) != v for k, v in desired.items()):
            tracking.snapshot()
            for k, v in desired.items():
                setattr(tracking, k, v)
            tracking.save(claim=True)
        return tracking

    def _write_sidecar(self, cluster, tracking) -> None:
        self.locks.acquire(sidecar_cluster_id=cluster.pk)
        sidecar = self.locks.sidecar
        foreign = (
            ProxboxClusterSyncState.objects.filter(proxmox_cluster=tracking)
            .exclude(cluster_id=cluster.pk)
            .exists()
        )
        if foreign:
            raise ClaimConflict(
                _(
                    "Tracking record {pk} is still referenced by the sync state of another native "
                    "cluster; review it before retrying."
                ).format(pk=tracking.pk),
                code="sidecar_conflict",
            )
        if sidecar is None:
            ProxboxClusterSyncState(cluster=cluster, proxmox_cluster=tracking).save(claim=True)
        elif sidecar.proxmox_cluster_id != tracking.pk:
            sidecar.snapshot()
            sidecar.proxmox_cluster = tracking
            sidecar.save(claim=True)


# Native cluster fields as the request names them.
_REQUEST_FIELD = {"type": "cluster_type", "scope": "site", "scope_type": "site", "name": "name"}
