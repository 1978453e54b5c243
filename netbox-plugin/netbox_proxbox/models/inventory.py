"""Typed records of what a Proxmox cluster holds beyond guests: storage, data protection
and high availability.

Each record belongs to the native cluster whose endpoint the sync owns (deleted with it)
and links the native objects it is about (node device, virtual machine) where they exist.
The sync backend writes them through REST, one bulk request per type, and deletes the
records Proxmox no longer lists; the natural key of each type is unique per cluster.
"""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.urls import reverse
from django.utils.translation import gettext_lazy as _
from netbox.models import NetBoxModel

from ..choices import (
    BackupVerificationChoices,
    HARuleAffinityChoices,
    HARuleTypeChoices,
    HAStateChoices,
    ReplicationStateChoices,
)

__all__ = (
    "ProxmoxBackup",
    "ProxmoxBackupJob",
    "ProxmoxHAGroup",
    "ProxmoxHAResource",
    "ProxmoxHARule",
    "ProxmoxReplicationJob",
    "ProxmoxSnapshot",
    "ProxmoxStorage",
)


def _cluster(related_name: str):
    return models.ForeignKey(
        to="virtualization.Cluster",
        on_delete=models.CASCADE,
        related_name=related_name,
        verbose_name=_("cluster"),
    )


def _virtual_machine(related_name: str, *, required: bool = False):
    if required:
        return models.ForeignKey(
            to="virtualization.VirtualMachine",
            on_delete=models.CASCADE,
            related_name=related_name,
            verbose_name=_("virtual machine"),
        )
    return models.ForeignKey(
        to="virtualization.VirtualMachine",
        on_delete=models.SET_NULL,
        related_name=related_name,
        verbose_name=_("virtual machine"),
        blank=True,
        null=True,
    )


def _device(related_name: str, verbose_name):
    return models.ForeignKey(
        to="dcim.Device",
        on_delete=models.SET_NULL,
        related_name=related_name,
        verbose_name=verbose_name,
        blank=True,
        null=True,
    )


class InventoryRecord(NetBoxModel):
    """What every inventory type shares: its cluster and a detail URL named after the model."""

    class Meta:
        abstract = True

    def get_absolute_url(self):
        return reverse(f"plugins:netbox_proxbox:{self._meta.model_name}", args=[self.pk])


class ProxmoxStorage(InventoryRecord):
    """A storage as one node sees it; a shared storage is one record without a node."""

    cluster = _cluster("proxmox_storages")
    name = models.CharField(verbose_name=_("storage"), max_length=100)
    node = models.CharField(
        verbose_name=_("node"),
        max_length=100,
        blank=True,
        help_text=_("The node this local storage belongs to; empty for shared storage"),
    )
    device = _device("proxmox_storages", _("node device"))
    storage_type = models.CharField(verbose_name=_("type"), max_length=50)
    content = models.CharField(
        verbose_name=_("content"),
        max_length=200,
        blank=True,
        help_text=_("Content types Proxmox allows on it, e.g. images,rootdir,backup"),
    )
    shared = models.BooleanField(verbose_name=_("shared"), default=False)
    enabled = models.BooleanField(verbose_name=_("enabled"), default=True)
    capacity = models.PositiveBigIntegerField(
        verbose_name=_("capacity (bytes)"), blank=True, null=True
    )
    used = models.PositiveBigIntegerField(verbose_name=_("used (bytes)"), blank=True, null=True)

    class Meta:
        ordering = ("cluster", "name", "node", "pk")
        verbose_name = _("Proxmox storage")
        verbose_name_plural = _("Proxmox storages")
        constraints = (
            models.UniqueConstraint(
                fields=("cluster", "name", "node"), name="netbox_proxbox_storage_unique"
            ),
        )

    def __str__(self):
        return f"{self.name} ({self.node})" if self.node else self.name


class ProxmoxBackup(InventoryRecord):
    """A vzdump archive on a storage."""

    cluster = _cluster("proxmox_backups")
    storage = models.ForeignKey(
        to="netbox_proxbox.ProxmoxStorage",
        on_delete=models.CASCADE,
        related_name="backups",
        verbose_name=_("storage"),
    )
    volume = models.CharField(verbose_name=_("volume"), max_length=255)
    vmid = models.PositiveIntegerField(verbose_name=_("VMID"), blank=True, null=True)
    virtual_machine = _virtual_machine("proxmox_backups")
    backup_time = models.DateTimeField(verbose_name=_("time"), blank=True, null=True)
    size = models.PositiveBigIntegerField(verbose_name=_("size (bytes)"), blank=True, null=True)
    format = models.CharField(verbose_name=_("format"), max_length=50, blank=True)
    verification = models.CharField(
        verbose_name=_("verification"),
        max_length=20,
        choices=BackupVerificationChoices,
        default=BackupVerificationChoices.STATE_NONE,
    )
    notes = models.TextField(verbose_name=_("notes"), blank=True)

    class Meta:
        ordering = ("cluster", "-backup_time", "volume", "pk")
        verbose_name = _("Proxmox backup")
        verbose_name_plural = _("Proxmox backups")
        constraints = (
            models.UniqueConstraint(
                fields=("storage", "volume"), name="netbox_proxbox_backup_unique"
            ),
        )

    def __str__(self):
        return self.volume

    def get_verification_color(self):
        return BackupVerificationChoices.colors.get(self.verification)


class ProxmoxBackupJob(InventoryRecord):
    """A scheduled vzdump job of the cluster (Datacenter → Backup)."""

    cluster = _cluster("proxmox_backup_jobs")
    job_id = models.CharField(verbose_name=_("job ID"), max_length=100)
    enabled = models.BooleanField(verbose_name=_("enabled"), default=True)
    schedule = models.CharField(verbose_name=_("schedule"), max_length=200, blank=True)
    selection = models.CharField(
        verbose_name=_("selection"),
        max_length=500,
        blank=True,
        help_text=_("all, all except the listed VMIDs, the listed VMIDs, or a pool"),
    )
    # The selection as Proxmox evaluates it (pve-manager's vzdump job selection): a pool
    # first, else a VMID list, else all guests but the excluded ones; `node` restricts
    # any of them to the guests on that node. `pool_vmids` holds the pool's guests as the
    # sync read them (Proxmox resolves a pool's members when the job runs).
    select_all = models.BooleanField(verbose_name=_("all guests"), default=False)
    vmids = ArrayField(
        base_field=models.PositiveIntegerField(),
        verbose_name=_("VMIDs"),
        blank=True,
        default=list,
        help_text=_("The guests the job names"),
    )
    exclude = ArrayField(
        base_field=models.PositiveIntegerField(),
        verbose_name=_("excluded VMIDs"),
        blank=True,
        default=list,
        help_text=_("With all guests: the ones left out"),
    )
    pool = models.CharField(verbose_name=_("pool"), max_length=100, blank=True)
    pool_vmids = ArrayField(
        base_field=models.PositiveIntegerField(),
        verbose_name=_("pool members"),
        blank=True,
        default=list,
        help_text=_("The pool's guests when the sync read the job"),
    )
    storage = models.CharField(verbose_name=_("storage"), max_length=100, blank=True)
    node = models.CharField(
        verbose_name=_("node"),
        max_length=100,
        blank=True,
        help_text=_("Only guests on this node; empty: any node"),
    )
    mode = models.CharField(verbose_name=_("mode"), max_length=20, blank=True)
    retention = models.CharField(
        verbose_name=_("retention"),
        max_length=200,
        blank=True,
        help_text=_("prune-backups, e.g. keep-daily=7,keep-weekly=4"),
    )
    comment = models.CharField(verbose_name=_("comment"), max_length=500, blank=True)

    class Meta:
        ordering = ("cluster", "job_id", "pk")
        verbose_name = _("Proxmox backup job")
        verbose_name_plural = _("Proxmox backup jobs")
        constraints = (
            models.UniqueConstraint(
                fields=("cluster", "job_id"), name="netbox_proxbox_backupjob_unique"
            ),
        )

    def __str__(self):
        return self.job_id


class ProxmoxSnapshot(InventoryRecord):
    """A snapshot of a guest (deleted with its virtual machine)."""

    cluster = _cluster("proxmox_snapshots")
    virtual_machine = _virtual_machine("proxmox_snapshots", required=True)
    name = models.CharField(verbose_name=_("name"), max_length=100)
    parent = models.CharField(verbose_name=_("parent"), max_length=100, blank=True)
    snapshot_time = models.DateTimeField(verbose_name=_("time"), blank=True, null=True)
    vmstate = models.BooleanField(
        verbose_name=_("RAM included"),
        default=False,
        help_text=_("Whether the snapshot saved the running guest's memory"),
    )
    description = models.CharField(verbose_name=_("description"), max_length=500, blank=True)

    class Meta:
        ordering = ("cluster", "virtual_machine", "snapshot_time", "name", "pk")
        verbose_name = _("Proxmox snapshot")
        verbose_name_plural = _("Proxmox snapshots")
        constraints = (
            models.UniqueConstraint(
                fields=("virtual_machine", "name"), name="netbox_proxbox_snapshot_unique"
            ),
        )

    def __str__(self):
        return f"{self.virtual_machine} @ {self.name}"


class ProxmoxReplicationJob(InventoryRecord):
    """A storage replication job of a guest to another node."""

    cluster = _cluster("proxmox_replication_jobs")
    job_id = models.CharField(verbose_name=_("job ID"), max_length=100)
    vmid = models.PositiveIntegerField(verbose_name=_("VMID"))
    virtual_machine = _virtual_machine("proxmox_replication_jobs")
    target = models.CharField(verbose_name=_("target node"), max_length=100)
    target_device = _device("proxmox_replication_targets", _("target device"))
    schedule = models.CharField(verbose_name=_("schedule"), max_length=200, blank=True)
    enabled = models.BooleanField(verbose_name=_("enabled"), default=True)
    last_sync = models.DateTimeField(verbose_name=_("last sync"), blank=True, null=True)
    state = models.CharField(
        verbose_name=_("state"),
        max_length=20,
        choices=ReplicationStateChoices,
        default=ReplicationStateChoices.STATE_UNKNOWN,
    )
    fail_count = models.PositiveIntegerField(verbose_name=_("failures"), default=0)
    error = models.CharField(verbose_name=_("error"), max_length=500, blank=True)

    class Meta:
        ordering = ("cluster", "job_id", "pk")
        verbose_name = _("Proxmox replication job")
        verbose_name_plural = _("Proxmox replication jobs")
        constraints = (
            models.UniqueConstraint(
                fields=("cluster", "job_id"), name="netbox_proxbox_replication_unique"
            ),
        )

    def __str__(self):
        return self.job_id

    def get_state_color(self):
        return ReplicationStateChoices.colors.get(self.state)


class ProxmoxHAGroup(InventoryRecord):
    """An HA group: the nodes HA may place its resources on, by priority."""

    cluster = _cluster("proxmox_ha_groups")
    name = models.CharField(verbose_name=_("name"), max_length=100)
    nodes = models.CharField(
        verbose_name=_("node preferences"),
        max_length=500,
        help_text=_("node[:priority] list as Proxmox writes it, e.g. pve1:2,pve2:1"),
    )
    restricted = models.BooleanField(verbose_name=_("restricted"), default=False)
    nofailback = models.BooleanField(verbose_name=_("no failback"), default=False)
    comment = models.CharField(verbose_name=_("comment"), max_length=500, blank=True)

    class Meta:
        ordering = ("cluster", "name", "pk")
        verbose_name = _("Proxmox HA group")
        verbose_name_plural = _("Proxmox HA groups")
        constraints = (
            models.UniqueConstraint(
                fields=("cluster", "name"), name="netbox_proxbox_hagroup_unique"
            ),
        )

    def __str__(self):
        return self.name


class ProxmoxHAResource(InventoryRecord):
    """A guest under HA management: its requested state and group."""

    cluster = _cluster("proxmox_ha_resources")
    sid = models.CharField(verbose_name=_("resource"), max_length=100, help_text=_("e.g. vm:100"))
    vmid = models.PositiveIntegerField(verbose_name=_("VMID"), blank=True, null=True)
    virtual_machine = _virtual_machine("proxmox_ha_resources")
    state = models.CharField(
        verbose_name=_("requested state"),
        max_length=20,
        choices=HAStateChoices,
        default=HAStateChoices.STATE_STARTED,
    )
    group = models.ForeignKey(
        to="netbox_proxbox.ProxmoxHAGroup",
        on_delete=models.SET_NULL,
        related_name="resources",
        verbose_name=_("group"),
        blank=True,
        null=True,
    )
    max_restart = models.PositiveSmallIntegerField(
        verbose_name=_("max restart"), blank=True, null=True
    )
    max_relocate = models.PositiveSmallIntegerField(
        verbose_name=_("max relocate"), blank=True, null=True
    )
    comment = models.CharField(verbose_name=_("comment"), max_length=500, blank=True)

    class Meta:
        ordering = ("cluster", "sid", "pk")
        verbose_name = _("Proxmox HA resource")
        verbose_name_plural = _("Proxmox HA resources")
        constraints = (
            models.UniqueConstraint(
                fields=("cluster", "sid"), name="netbox_proxbox_haresource_unique"
            ),
        )

    def __str__(self):
        return self.sid

    def get_state_color(self):
        return HAStateChoices.colors.get(self.state)


class ProxmoxHARule(InventoryRecord):
    """A PVE 9 HA rule: where HA places the resources it lists (node affinity, what an HA
    group was up to 8.x) or which of them it keeps together or apart (resource affinity).
    """

    cluster = _cluster("proxmox_ha_rules")
    name = models.CharField(verbose_name=_("rule"), max_length=100)
    rule_type = models.CharField(verbose_name=_("type"), max_length=20, choices=HARuleTypeChoices)
    affinity = models.CharField(
        verbose_name=_("affinity"),
        max_length=20,
        choices=HARuleAffinityChoices,
        default=HARuleAffinityChoices.AFFINITY_POSITIVE,
        help_text=_(
            "Node affinity: on its nodes. Resource affinity: its resources on one node "
            "(positive) or on different nodes (negative)"
        ),
    )
    nodes = models.CharField(
        verbose_name=_("node preferences"),
        max_length=500,
        blank=True,
        help_text=_("Node affinity: node[:priority] list as Proxmox writes it, e.g. pve1:2,pve2"),
    )
    strict = models.BooleanField(
        verbose_name=_("strict"),
        default=False,
        help_text=_("Node affinity: its resources run on its nodes only (else they prefer them)"),
    )
    enabled = models.BooleanField(verbose_name=_("enabled"), default=True)
    errors = models.CharField(
        verbose_name=_("errors"),
        max_length=1000,
        blank=True,
        help_text=_("Why HA sets the rule aside (its feasibility check); empty while it applies"),
    )
    comment = models.CharField(verbose_name=_("comment"), max_length=500, blank=True)
    resources = models.ManyToManyField(
        to="netbox_proxbox.ProxmoxHAResource",
        related_name="rules",
        verbose_name=_("resources"),
        blank=True,
    )

    class Meta:
        ordering = ("cluster", "name", "pk")
        verbose_name = _("Proxmox HA rule")
        verbose_name_plural = _("Proxmox HA rules")
        constraints = (
            models.UniqueConstraint(
                fields=("cluster", "name"), name="netbox_proxbox_harule_unique"
            ),
        )

    def __str__(self):
        return self.name

    def get_rule_type_color(self):
        return HARuleTypeChoices.colors.get(self.rule_type)

    def get_affinity_color(self):
        return HARuleAffinityChoices.colors.get(self.affinity)
