"""The tracking record of a discovered Proxmox cluster and the typed sidecar on a native cluster."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import models, transaction
from django.urls import reverse
from django.utils.translation import gettext_lazy as _
from netbox.models import NetBoxModel
from utilities.exceptions import AbortRequest

from ..choices import EndpointModeChoices, SyncStatusChoices
from ..ownership.errors import ConcurrentInventoryChange, concurrency_conflicts_as_retry
from ..ownership.locks import InventoryLocks

__all__ = ("ProxboxClusterSyncState", "ProxmoxCluster")

CLAIM_HINT = _("native clusters are claimed only through the endpoint's sync-cluster action")


class LoadedValuesMixin:
    """Remember the server-owned values an instance was loaded with.

    A stale object still carries what it was loaded with; comparing against that
    tells "the caller changed this field" apart from "someone else changed the row
    since this object was read", so stale full saves keep the current value.
    """

    tracked_fields: tuple[str, ...] = ()

    @classmethod
    def from_db(cls, db, field_names, values, *args, **kwargs):
        instance = super().from_db(db, field_names, values, *args, **kwargs)
        instance._remember_loaded()
        return instance

    def save_base(self, *args, **kwargs):
        super().save_base(*args, **kwargs)
        # What is stored now is what this instance was "loaded" with from here on.
        self._remember_loaded()

    def _remember_loaded(self):
        # Only values actually present: touching a deferred field would query (and recurse).
        self._loaded = {f: self.__dict__[f] for f in self.tracked_fields if f in self.__dict__}

    def caller_changed(self, attname) -> bool:
        loaded = getattr(self, "_loaded", {})
        if self._state.adding or attname not in loaded:
            return False
        return getattr(self, attname) != loaded[attname]


class ProxmoxCluster(LoadedValuesMixin, NetBoxModel):
    """What Proxbox last discovered behind an endpoint, and its link to a native cluster.

    The link is evidence, not authority: the endpoint's `netbox_cluster` relation is
    authoritative. Ordinary edits may refresh metadata or clear an obsolete link; only
    the sync-cluster claim may set one.
    """

    tracked_fields = ("endpoint_id", "netbox_cluster_id")

    endpoint = models.ForeignKey(
        to="netbox_proxbox.ProxmoxEndpoint",
        on_delete=models.CASCADE,
        related_name="tracked_clusters",
        verbose_name=_("endpoint"),
    )
    name = models.CharField(
        verbose_name=_("source name"),
        max_length=100,
        help_text=_("Cluster name as reported by Proxmox"),
    )
    cluster_id = models.CharField(
        verbose_name=_("source identity"),
        max_length=100,
        blank=True,
        help_text=_("Identity reported by Proxmox, when it reports one"),
    )
    mode = models.CharField(
        verbose_name=_("mode"),
        max_length=20,
        choices=EndpointModeChoices,
        default=EndpointModeChoices.MODE_CLUSTER,
    )
    netbox_cluster = models.ForeignKey(
        to="virtualization.Cluster",
        on_delete=models.SET_NULL,
        related_name="proxmox_tracking_records",
        verbose_name=_("native cluster"),
        blank=True,
        null=True,
    )
    version = models.CharField(verbose_name=_("version"), max_length=50, blank=True)
    quorate = models.BooleanField(verbose_name=_("quorate"), blank=True, null=True)
    node_count = models.PositiveIntegerField(verbose_name=_("node count"), blank=True, null=True)
    last_seen = models.DateTimeField(verbose_name=_("last seen"), blank=True, null=True)

    class Meta:
        ordering = ("endpoint", "name", "pk")
        verbose_name = _("Proxmox cluster (tracking)")
        verbose_name_plural = _("Proxmox clusters (tracking)")
        indexes = (models.Index(fields=("endpoint", "cluster_id")),)

    def __str__(self):
        # Not the endpoint's name: viewers of the tracking record may not be allowed to view it.
        return self.name

    def get_absolute_url(self):
        return reverse("plugins:netbox_proxbox:proxmoxcluster", args=[self.pk])

    def get_mode_color(self):
        return EndpointModeChoices.colors.get(self.mode)

    def clean(self):
        super().clean()
        if self._state.adding:
            if self.netbox_cluster_id is not None:
                raise ValidationError(
                    {
                        "netbox_cluster": _("A new tracking record cannot link a native cluster: ")
                        + CLAIM_HINT
                    }
                )
            return
        current = (
            type(self).objects.filter(pk=self.pk).values("endpoint_id", "netbox_cluster_id").first()
        )
        if current is None:
            return
        if self.caller_changed("endpoint_id") and self.endpoint_id != current["endpoint_id"]:
            raise ValidationError(
                {"endpoint": _("A tracking record cannot move to another endpoint.")}
            )
        if (
            self.caller_changed("netbox_cluster_id")
            and self.netbox_cluster_id is not None
            and self.netbox_cluster_id != current["netbox_cluster_id"]
        ):
            raise ValidationError(
                {"netbox_cluster": _("The link can only be kept or cleared: ") + CLAIM_HINT}
            )

    def save(self, *args, claim=False, **kwargs):
        """Ordinary saves never move the record or establish a link.

        Under the endpoint → native cluster → tracking lock order the current row is
        reloaded: the endpoint is always kept; the link is kept unless the caller
        cleared it (clearing obsolete evidence is allowed), so a stale save can
        neither resurrect a cleared link nor erase one a claim made meanwhile.
        Only the claim service passes ``claim=True``.
        """
        if claim:
            return super().save(*args, **kwargs)
        with concurrency_conflicts_as_retry(_("Saving the tracking record")):
            return self._save_ordinary(*args, **kwargs)

    def _save_ordinary(self, *args, **kwargs):
        if self._state.adding:
            self.netbox_cluster = None
            with transaction.atomic(using=kwargs.get("using")):
                # The endpoint lock waits out a claim in flight, so a row created now cannot
                # slip between the claim's name-clash check and its own write.
                locks = InventoryLocks().acquire(endpoint_id=self.endpoint_id)
                if locks.endpoint is None:
                    raise ConcurrentInventoryChange(_("The endpoint was deleted meanwhile."))
                return super().save(*args, **kwargs)
        with transaction.atomic(using=kwargs.get("using")):
            current = (
                type(self)
                .objects.filter(pk=self.pk)
                .values("endpoint_id", "netbox_cluster_id")
                .first()
            )
            if current is None:
                raise ConcurrentInventoryChange(_("This tracking record was deleted meanwhile."))
            # The endpoint lock waits out any claim in flight; the row is re-read afterwards.
            locks = InventoryLocks().acquire(
                endpoint_id=current["endpoint_id"],
                cluster_id=current["netbox_cluster_id"],
                tracking_ids=[self.pk],
            )
            if not locks.tracking:
                raise ConcurrentInventoryChange(_("This tracking record was deleted meanwhile."))
            row = locks.tracking[0]
            self.endpoint_id = row.endpoint_id
            cleared = self.caller_changed("netbox_cluster_id") and self.netbox_cluster_id is None
            self.netbox_cluster_id = None if cleared else row.netbox_cluster_id
            return super().save(*args, **kwargs)


class ProxboxClusterSyncState(LoadedValuesMixin, NetBoxModel):
    """Typed sidecar on a native cluster: Proxbox's reflection metadata for it.

    It lives and dies with the native cluster. Its link to the tracking record is
    server-owned: the claim sets it; ordinary writes may repeat it, never replace
    or clear it.
    """

    tracked_fields = ("cluster_id", "proxmox_cluster_id")

    cluster = models.OneToOneField(
        to="virtualization.Cluster",
        on_delete=models.CASCADE,
        related_name="proxbox_sync_state",
        verbose_name=_("native cluster"),
    )
    proxmox_cluster = models.OneToOneField(
        to="netbox_proxbox.ProxmoxCluster",
        on_delete=models.SET_NULL,
        related_name="sync_state",
        verbose_name=_("tracking record"),
        blank=True,
        null=True,
    )
    last_sync = models.DateTimeField(verbose_name=_("last sync"), blank=True, null=True)
    status = models.CharField(
        verbose_name=_("status"),
        max_length=20,
        choices=SyncStatusChoices,
        default=SyncStatusChoices.STATUS_NEVER,
    )
    objects_created = models.PositiveIntegerField(verbose_name=_("objects created"), default=0)
    objects_updated = models.PositiveIntegerField(verbose_name=_("objects updated"), default=0)
    objects_deleted = models.PositiveIntegerField(verbose_name=_("objects deleted"), default=0)
    errors = models.PositiveIntegerField(verbose_name=_("errors"), default=0)
    message = models.TextField(verbose_name=_("message"), blank=True)

    class Meta:
        ordering = ("cluster", "pk")
        verbose_name = _("cluster sync state")
        verbose_name_plural = _("cluster sync states")

    def __str__(self):
        # Not the cluster's name: viewers of the sidecar may not be allowed to view the cluster.
        return f"Sync state #{self.pk}"

    def get_absolute_url(self):
        return reverse("plugins:netbox_proxbox:proxboxclustersyncstate", args=[self.pk])

    def get_status_color(self):
        return SyncStatusChoices.colors.get(self.status)

    @property
    def problem(self) -> str:
        """What went wrong, in one line (the message's first); empty for a clean outcome."""
        if self.status not in SyncStatusChoices.PROBLEMS:
            return ""
        return next((line for line in self.message.splitlines() if line.strip()), "")

    def clean(self):
        super().clean()
        if self._state.adding:
            if self.proxmox_cluster_id is not None:
                raise ValidationError(
                    {"proxmox_cluster": _("The ownership link is set by the sync-cluster action.")}
                )
            return
        current = (
            type(self).objects.filter(pk=self.pk).values("cluster_id", "proxmox_cluster_id").first()
        )
        if current is None:
            return
        if self.caller_changed("cluster_id") and self.cluster_id != current["cluster_id"]:
            raise ValidationError(
                {"cluster": _("A sync state cannot move to another native cluster.")}
            )
        if (
            self.caller_changed("proxmox_cluster_id")
            and self.proxmox_cluster_id != current["proxmox_cluster_id"]
        ):
            raise ValidationError(
                {
                    "proxmox_cluster": _(
                        "The ownership link is server-owned: repeat the current value or omit it."
                    )
                }
            )

    def save(self, *args, claim=False, **kwargs):
        """Metadata writers take native cluster → sidecar locks and keep the server-owned link."""
        if claim:
            return super().save(*args, **kwargs)
        with concurrency_conflicts_as_retry(_("Saving the sync state")):
            return self._save_ordinary(*args, **kwargs)

    def _save_ordinary(self, *args, **kwargs):
        if self._state.adding:
            self.proxmox_cluster = None
            with transaction.atomic(using=kwargs.get("using")):
                # Serialize with a claim creating this cluster's sidecar (cluster → sidecar).
                locks = InventoryLocks().acquire(
                    cluster_id=self.cluster_id, sidecar_cluster_id=self.cluster_id
                )
                if locks.cluster is None:
                    raise ConcurrentInventoryChange(_("The native cluster was deleted meanwhile."))
                if locks.sidecar is not None:
                    raise AbortRequest(_("This native cluster already has a sync state."))
                return super().save(*args, **kwargs)
        with transaction.atomic(using=kwargs.get("using")):
            current_cluster = (
                type(self).objects.filter(pk=self.pk).values_list("cluster_id", flat=True).first()
            )
            if current_cluster is None:
                raise ConcurrentInventoryChange(_("This sync state was deleted meanwhile."))
            locks = InventoryLocks().acquire(
                cluster_id=current_cluster, sidecar_cluster_id=current_cluster
            )
            if locks.sidecar is None:
                raise ConcurrentInventoryChange(_("This sync state was deleted meanwhile."))
            self.cluster_id = locks.sidecar.cluster_id
            self.proxmox_cluster_id = locks.sidecar.proxmox_cluster_id
            return super().save(*args, **kwargs)
