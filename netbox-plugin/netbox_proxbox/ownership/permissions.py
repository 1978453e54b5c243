"""Object-permission checks of the claim, in NetBox's own terms (restrict() and has_perm)."""

from __future__ import annotations

from django.utils.translation import gettext as _

from .errors import ClaimForbidden, ClaimNotFound


def visible(user, model, pk) -> bool:
    return model.objects.restrict(user, "view").filter(pk=pk).exists()


def shown(user, model, pk, label: str, hidden: str) -> str:
    """`label` when the caller may view the object, else `hidden` (messages never leak names)."""
    return repr(label) if visible(user, model, pk) else hidden


def permitted(user, model, action: str, pk) -> bool:
    """Whether `user` holds `action` on the exact row `pk`, object constraints included."""
    return model.objects.restrict(user, action).filter(pk=pk).exists()


def require_endpoint_access(user, endpoint) -> None:
    """View and change on the exact endpoint (404 when invisible, so nothing leaks)."""
    from ..models import ProxmoxEndpoint

    if not visible(user, ProxmoxEndpoint, endpoint.pk):
        raise ClaimNotFound(_("No Proxmox endpoint matches the given query."))
    if not permitted(user, ProxmoxEndpoint, "change", endpoint.pk):
        raise ClaimForbidden(_("You may not change this Proxmox endpoint."))


def require_cluster_add(user) -> None:
    if not user.has_perm("virtualization.add_cluster"):
        raise ClaimForbidden(_("Creating the native cluster requires permission to add clusters."))


def require_created_cluster_access(user, cluster) -> None:
    """The new row must satisfy the add constraints and be viewable by its creator."""
    from virtualization.models import Cluster

    if not permitted(user, Cluster, "add", cluster.pk):
        raise ClaimForbidden(
            _("Your cluster add permission does not allow a cluster with these attributes.")
        )
    if not visible(user, Cluster, cluster.pk):
        raise ClaimForbidden(_("You would not be permitted to view the created native cluster."))


def require_existing_cluster_access(user, cluster) -> None:
    from virtualization.models import Cluster

    if not visible(user, Cluster, cluster.pk):
        raise ClaimForbidden(_("You may not view the native cluster this endpoint owns."))
    if not permitted(user, Cluster, "change", cluster.pk):
        raise ClaimForbidden(_("You may not change the native cluster this endpoint owns."))
