"""Proxmox endpoints: where the backend connects, and which native cluster each one owns."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models, transaction
from django.urls import reverse
from django.utils.text import format_lazy
from django.utils.translation import gettext_lazy as _
from netbox.models import NetBoxModel
from netbox.models.features import JobsMixin

from ..choices import EndpointModeChoices
from ..constants import (
    MAX_SYNC_INTERVAL,
    MAX_WATCH_INTERVAL,
    MIN_SYNC_INTERVAL,
    MIN_TOKEN_SECRET_LENGTH,
    MIN_WATCH_INTERVAL,
    REVEAL_CREDENTIALS_ACTION,
)
from ..encryption import decrypt_secret, encrypt_secret
from ..ownership.errors import ConcurrentInventoryChange, concurrency_conflicts_as_retry
from .compliance import CompliancePolicyFields
from .policy import SyncPolicyFields

__all__ = ("CONNECTION_TARGET_FIELDS", "ProxmoxEndpoint", "validate_token_secret")

# Never part of change records, exports or logs: only ciphertext is stored, and even that stays home.
SECRET_FIELDS = ("token_secret_ciphertext",)

# Where the backend sends the token secret. Pointing them elsewhere hands the stored secret
# to the new target, so changing them is as sensitive as reading the secret (see clean()).
CONNECTION_TARGET_FIELDS = ("host", "port", "verify_tls")

# What change records show of the secret: whether one is stored, and whether this change
# wrote a new one; never the secret, its ciphertext or anything derived from them.
SECRET_NOT_SET, SECRET_SET, SECRET_NEW = "not set", "set", "set (new secret)"


def validate_token_secret(value: str) -> None:
    """A plaintext secret as entered (REST, forms, import); the empty string is handled by
    the callers (it removes the stored secret)."""
    if any(char.isspace() or not char.isprintable() for char in value):
        raise ValidationError(
            _("The token secret must not contain spaces, line breaks or control characters."),
            code="invalid_token_secret",
        )
    if len(value) < MIN_TOKEN_SECRET_LENGTH:
        raise ValidationError(
            _(
                "The token secret must be at least %(minimum)d characters long (Proxmox "
                "generates 36); a shorter one cannot be kept out of logs reliably."
            ),
            code="token_secret_too_short",
            params={"minimum": MIN_TOKEN_SECRET_LENGTH},
        )


# PVE's token identifier: `<userid>!<tokenid>`, userid being `<user>@<realm>`, and the
# token name as PVE's pve-tokenid format allows. Checked here so that a malformed value is
# refused when the endpoint is saved, not when the backend first uses it.
TOKEN_ID_VALIDATOR = RegexValidator(
    regex=r"^[^\s@!:]+@[A-Za-z][A-Za-z0-9.\-_]*![A-Za-z][A-Za-z0-9.\-_]*$",
    message=_("Enter a Proxmox API token ID of the form user@realm!tokenid."),
    code="invalid_token_id",
)


# JobsMixin first: its delete() batches the "Sync now" Jobs before NetBoxModel's delete runs.
class ProxmoxEndpoint(JobsMixin, SyncPolicyFields, CompliancePolicyFields, NetBoxModel):
    """A Proxmox VE API endpoint (a cluster or a standalone node) that Proxbox synchronizes."""

    name = models.CharField(verbose_name=_("name"), max_length=100, unique=True)
    host = models.CharField(
        verbose_name=_("host"), max_length=255, help_text=_("DNS name or IP address")
    )
    port = models.PositiveIntegerField(
        verbose_name=_("port"),
        default=8006,
        validators=[MinValueValidator(1), MaxValueValidator(65535)],
    )
    verify_tls = models.BooleanField(verbose_name=_("verify TLS"), default=True)
    token_id = models.CharField(
        verbose_name=_("API token ID"),
        max_length=255,
        validators=[TOKEN_ID_VALIDATOR],
        help_text=_("Proxmox API token identifier, e.g. proxbox@pve!sync"),
    )
    # Fernet ciphertext of the API token secret. Use `token_secret` (property) to read or write.
    token_secret_ciphertext = models.TextField(blank=True, default="", editable=False)
    enabled = models.BooleanField(verbose_name=_("enabled"), default=True)
    mode = models.CharField(
        verbose_name=_("mode"),
        max_length=20,
        choices=EndpointModeChoices,
        default=EndpointModeChoices.MODE_CLUSTER,
    )
    site = models.ForeignKey(
        to="dcim.Site",
        on_delete=models.SET_NULL,
        related_name="proxmox_endpoints",
        blank=True,
        null=True,
    )
    tenant = models.ForeignKey(
        to="tenancy.Tenant",
        on_delete=models.SET_NULL,
        related_name="proxmox_endpoints",
        blank=True,
        null=True,
    )
    # Server-owned: written only by the sync-cluster claim (and cleared when the cluster is
    # deleted). Ordinary saves reload it under the row lock instead of writing it back.
    netbox_cluster = models.OneToOneField(
        to="virtualization.Cluster",
        on_delete=models.SET_NULL,
        related_name="proxmox_endpoint",
        verbose_name=_("native cluster"),
        blank=True,
        null=True,
        editable=False,
    )
    # Sync policy of this endpoint (read by the backend at the start of each run).
    vrf = models.ForeignKey(
        to="ipam.VRF",
        on_delete=models.PROTECT,
        related_name="proxmox_endpoints",
        verbose_name=_("VRF"),
        blank=True,
        null=True,
        help_text=_("VRF of the IP addresses synced from this endpoint (none: global)"),
    )
    vm_role = models.ForeignKey(
        to="dcim.DeviceRole",
        on_delete=models.PROTECT,
        related_name="proxmox_endpoints",
        verbose_name=_("default VM role"),
        blank=True,
        null=True,
        help_text=_("Role given to virtual machines the sync creates (a role allowed for VMs)"),
    )
    # The nodes' hardware: their devices get this type (a node's override wins); empty:
    # the sync's generic "Proxmox VE node" type at creation, left alone afterwards.
    node_device_type = models.ForeignKey(
        to="dcim.DeviceType",
        on_delete=models.PROTECT,
        related_name="proxmox_endpoints",
        verbose_name=_("node device type"),
        blank=True,
        null=True,
        help_text=_(
            "Device type of every node's device (a node type override wins); empty: the "
            "generic Proxmox VE node type when a device is created, never changed afterwards"
        ),
    )
    sync_descriptions = models.BooleanField(
        verbose_name=_("sync descriptions"),
        default=False,
        # Rows written outside Django (restores, other tools) get the safe value too.
        db_default=False,
        help_text=_(
            "Copy each guest's Proxmox description: its first line to the VM's description, "
            "the whole text to its comments"
        ),
    )
    sync_interval = models.PositiveIntegerField(
        verbose_name=_("sync interval"),
        blank=True,
        null=True,
        validators=[MinValueValidator(MIN_SYNC_INTERVAL), MaxValueValidator(MAX_SYNC_INTERVAL)],
        help_text=format_lazy(
            _("Minutes between scheduled syncs (at least {minimum}); empty: no schedule"),
            minimum=MIN_SYNC_INTERVAL,
        ),
    )
    watch_interval = models.PositiveSmallIntegerField(
        verbose_name=_("live sync poll interval"),
        blank=True,
        null=True,
        validators=[MinValueValidator(MIN_WATCH_INTERVAL), MaxValueValidator(MAX_WATCH_INTERVAL)],
        help_text=format_lazy(
            _(
                "Live sync: seconds between the backend's polls of Proxmox for changes "
                "({minimum}-{maximum}); a change starts a sync of what changed. Empty: off"
            ),
            minimum=MIN_WATCH_INTERVAL,
            maximum=MAX_WATCH_INTERVAL,
        ),
    )
    description = models.CharField(verbose_name=_("description"), max_length=200, blank=True)
    comments = models.TextField(verbose_name=_("comments"), blank=True)

    clone_fields = (
        "host",
        "port",
        "verify_tls",
        "mode",
        "site",
        "tenant",
        "enabled",
        "vrf",
        "vm_role",
        "node_device_type",
        "sync_descriptions",
        "sync_interval",
        "watch_interval",
    )

    class Meta:
        ordering = ("name",)
        verbose_name = _("Proxmox endpoint")
        verbose_name_plural = _("Proxmox endpoints")
        # A custom object-permission action (NetBox lists it in the ObjectPermission form).
        # Only its explicit holders may read the decrypted token through the credentials API.
        permissions = (
            (REVEAL_CREDENTIALS_ACTION, "Read the decrypted API token (sync backend only)"),
        )

    def __str__(self):
        return self.name

    def __repr__(self):
        # Deliberately free of credentials: instances end up in logs and tracebacks.
        return f"<ProxmoxEndpoint {self.pk}: {self.name}>"

    def get_absolute_url(self):
        return reverse("plugins:netbox_proxbox:proxmoxendpoint", args=[self.pk])

    def get_mode_color(self):
        return EndpointModeChoices.colors.get(self.mode)

    def node_device_types(self) -> dict[str, int]:
        """Node name → device type id of the node type overrides (the backend reads them
        with the endpoint)."""
        # .all(): the REST view prefetches them, one query for a whole page of endpoints.
        overrides = sorted(self.node_type_overrides.all(), key=lambda o: o.node)
        return {o.node: o.device_type_id for o in overrides}

    def clean(self):
        super().clean()
        if self.vm_role_id is not None and not self.vm_role.vm_role:
            raise ValidationError(
                {"vm_role": _("This role may not be assigned to virtual machines.")}
            )
        self._refuse_secret_redirect()

    def _refuse_secret_redirect(self) -> None:
        """Changing where the backend connects needs the secret re-entered or reveal_credentials.

        Otherwise a user allowed only to edit the endpoint could point it at a listener of
        their own and have the backend deliver the stored secret there (or, without one, the
        backend's fallback token). Checked here so REST (single and bulk), the edit form,
        bulk edit and import all apply the same rule. Without a request (shell, management
        commands) nobody is acting through NetBox's permissions, and nothing is refused.
        """
        if self._state.adding or self.pk is None or self._writes_new_secret():
            return
        stored = type(self).objects.filter(pk=self.pk).values(*CONNECTION_TARGET_FIELDS).first()
        if stored is None:
            return
        changed = [name for name in CONNECTION_TARGET_FIELDS if getattr(self, name) != stored[name]]
        if not changed:
            return
        from netbox.context import current_request

        from ..credentials import may_reveal_credentials

        request = current_request.get()
        if request is None or may_reveal_credentials(request.user, self):
            return
        raise ValidationError(
            {
                name: _(
                    "Changing %(field)s sends the stored API token to a new target: enter "
                    "the token secret again in the same change, or hold the "
                    "'reveal_credentials' permission on this endpoint."
                )
                % {"field": self._meta.get_field(name).verbose_name}
                for name in changed
            }
        )

    def _writes_new_secret(self) -> bool:
        return getattr(self, "_token_secret_written", False) and bool(self.token_secret_ciphertext)

    # --- the token secret: encrypted at rest, write-only everywhere outside this model ---

    @property
    def token_secret(self):
        # Write-only: templates (export templates, custom links) and serializers must not be
        # able to read it by attribute access. The backend calls reveal_token_secret().
        raise AttributeError("token_secret is write-only; use reveal_token_secret()")

    @token_secret.setter
    def token_secret(self, plaintext: str) -> None:
        self.token_secret_ciphertext = encrypt_secret(plaintext) if plaintext else ""
        # For the change record and the connection-target rule (clean()); kept for the
        # instance's life, since NetBox snapshots it again after saving tags.
        self._token_secret_written = True

    def reveal_token_secret(self) -> str:
        """The decrypted secret, for the designated sync backend only (never serialized)."""
        if not self.token_secret_ciphertext:
            return ""
        return decrypt_secret(self.token_secret_ciphertext)

    # Neither Django templates nor NetBox's sandboxed Jinja2 may call it.
    reveal_token_secret.alters_data = True
    reveal_token_secret.unsafe_callable = True

    @property
    def has_token_secret(self) -> bool:
        return bool(self.token_secret_ciphertext)

    def serialize_object(self, exclude=None):
        data = super().serialize_object(exclude=[*(exclude or []), *SECRET_FIELDS])
        # Without it a rotation would be an empty change, and NetBox records none.
        if not self.token_secret_ciphertext:
            data["token_secret"] = SECRET_NOT_SET
        elif getattr(self, "_token_secret_written", False):
            data["token_secret"] = SECRET_NEW
        else:
            data["token_secret"] = SECRET_SET
        return data

    # --- the server-owned native cluster relation ---

    def save(self, *args, assign_native_cluster=False, **kwargs):
        """Save without ever writing back a stale native-cluster relation.

        Only the claim service passes ``assign_native_cluster=True``. Every other
        save (UI, REST, bulk edit, objects loaded before a claim or before the
        cluster was deleted) takes the row lock, reloads the current relation into
        this instance and leaves the column out of the UPDATE.
        """
        if assign_native_cluster:
            return super().save(*args, **kwargs)
        with concurrency_conflicts_as_retry(_("Saving the endpoint")):
            return self._save_ordinary(*args, **kwargs)

    def _save_ordinary(self, *args, **kwargs):
        if self._state.adding:
            # A new endpoint owns nothing until a claim says so.
            self.netbox_cluster = None
            return super().save(*args, **kwargs)
        with transaction.atomic(using=kwargs.get("using")):
            current = (
                type(self)
                .objects.select_for_update(of=("self",))
                .filter(pk=self.pk)
                .values("netbox_cluster_id")
                .first()
            )
            if current is None:
                raise ConcurrentInventoryChange(
                    _("This endpoint was deleted meanwhile; nothing was saved.")
                )
            if self.netbox_cluster_id != current["netbox_cluster_id"]:
                self.netbox_cluster_id = current["netbox_cluster_id"]
            update_fields = kwargs.pop("update_fields", None)
            if update_fields is None:
                update_fields = [
                    f.name
                    for f in self._meta.concrete_fields
                    if not f.primary_key and f.name != "netbox_cluster"
                ]
            else:
                update_fields = [
                    f for f in update_fields if f not in ("netbox_cluster", "netbox_cluster_id")
                ]
            return super().save(*args, update_fields=update_fields, **kwargs)
