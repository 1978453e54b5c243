"""Shared fixtures for the plugin's tests: inventory, users, tokens and object permissions."""

from __future__ import annotations

from dcim.models import Site
from django.contrib.contenttypes.models import ContentType
from django.urls import reverse
from tenancy.models import Tenant
from users.constants import TOKEN_PREFIX
from users.models import ObjectPermission, Token, User
from virtualization.models import ClusterType

from netbox_proxbox.models import ProxmoxEndpoint

# Everything a caller needs to create a native cluster through the claim.
CLAIM_CREATE_PERMS = (
    "netbox_proxbox.view_proxmoxendpoint",
    "netbox_proxbox.change_proxmoxendpoint",
    "virtualization.add_cluster",
    "virtualization.view_cluster",
    "virtualization.view_clustertype",
    "dcim.view_site",
    "tenancy.view_tenant",
)
# ...and to reconcile one the endpoint already owns.
CLAIM_UPDATE_PERMS = (*CLAIM_CREATE_PERMS, "virtualization.change_cluster")


def compliance_form_fields() -> dict:
    """The data-protection thresholds of the endpoint form as a new endpoint shows them
    (a form post without its required ones is refused, as in NetBox's own forms)."""
    return {
        name: ProxmoxEndpoint._meta.get_field(name).default
        for name in ("backup_max_age_hours", "replication_max_failures", "snapshot_max_age_days")
    }


def auth_header(token: Token) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {TOKEN_PREFIX}{token.key}.{token.token}"}


def bearer(token: Token) -> str:
    return f"Bearer {TOKEN_PREFIX}{token.key}.{token.token}"


def grant(user: User, name: str, constraints=None, actions=None) -> ObjectPermission:
    """Grant `app.action_model` to `user`, optionally constrained (NetBox object permission)."""
    app_label, codename = name.split(".")
    action, model = codename.split("_", 1)
    permission = ObjectPermission.objects.create(
        name=f"{name} {constraints or ''}"[:100],
        actions=actions or [action],
        constraints=constraints,
    )
    permission.users.add(user)
    permission.object_types.add(ContentType.objects.get(app_label=app_label, model=model))
    return permission


def make_user(username: str, perms=(), *, write_enabled: bool = True) -> tuple[User, Token]:
    user = User.objects.create_user(username=username)
    for name in perms:
        grant(user, name)
    token = Token.objects.create(user=user, write_enabled=write_enabled)
    return user, token


def make_endpoint(name: str = "pve-a", **fields) -> ProxmoxEndpoint:
    fields.setdefault("host", f"{name}.example.net")
    fields.setdefault("token_id", "proxbox@pve!sync")
    endpoint = ProxmoxEndpoint(name=name, **fields)
    endpoint.token_secret = "s3cret-" + name
    endpoint.save()
    return endpoint


def make_references(suffix: str = "") -> tuple[ClusterType, Site, Tenant]:
    cluster_type = ClusterType.objects.create(name=f"Proxmox{suffix}", slug=f"proxmox{suffix}")
    site = Site.objects.create(name=f"Site{suffix}", slug=f"site{suffix}")
    tenant = Tenant.objects.create(name=f"Tenant{suffix}", slug=f"tenant{suffix}")
    return cluster_type, site, tenant


def claim_url(endpoint_or_pk) -> str:
    pk = getattr(endpoint_or_pk, "pk", endpoint_or_pk)
    return reverse("plugins-api:netbox_proxbox-api:proxmoxendpoint-sync-cluster", kwargs={"pk": pk})


def api_url(model_name: str, pk=None) -> str:
    if pk is None:
        return reverse(f"plugins-api:netbox_proxbox-api:{model_name}-list")
    return reverse(f"plugins-api:netbox_proxbox-api:{model_name}-detail", kwargs={"pk": pk})
