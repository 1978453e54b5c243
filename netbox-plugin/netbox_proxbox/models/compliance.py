"""An endpoint's data-protection thresholds: what makes one of its VMs out of policy.

Fields on the endpoint (one row per endpoint); the compliance queries
(`netbox_proxbox.compliance`) join them to each VM through its cluster. Each field's
validators refuse a value outside its range naming the field (form and REST alike).
"""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils.translation import gettext_lazy as _

__all__ = ("COMPLIANCE_FIELDS", "CompliancePolicyFields")

# A daily vzdump job plus two hours for the run itself: a guest backed up by last
# night's job is not flagged while tonight's is still on its way.
DEFAULT_BACKUP_MAX_AGE_HOURS = 26
# Proxmox warns that snapshots are no backups and grow their volumes: a month old is old.
DEFAULT_SNAPSHOT_MAX_AGE_DAYS = 30

COMPLIANCE_FIELDS = (
    "backup_max_age_hours",
    "backup_require_verified",
    "snapshot_max_count",
    "snapshot_max_age_days",
    "replication_max_failures",
    "ha_required",
)


class CompliancePolicyFields(models.Model):
    # Every NOT NULL column has a database default too (rows written outside Django).
    backup_max_age_hours = models.PositiveIntegerField(
        verbose_name=_("maximum backup age (hours)"),
        default=DEFAULT_BACKUP_MAX_AGE_HOURS,
        db_default=DEFAULT_BACKUP_MAX_AGE_HOURS,
        validators=[MinValueValidator(1), MaxValueValidator(24 * 366)],
        help_text=_("A VM whose newest backup is older is out of policy (daily job: 26)"),
    )
    backup_require_verified = models.BooleanField(
        verbose_name=_("require verified backups"),
        default=False,
        db_default=False,
        help_text=_(
            "The newest backup must have passed a Proxmox Backup Server verification; "
            "a failed verification is out of policy either way"
        ),
    )
    snapshot_max_count = models.PositiveSmallIntegerField(
        verbose_name=_("maximum snapshots"),
        blank=True,
        null=True,
        default=None,
        validators=[MaxValueValidator(1000)],
        help_text=_("More snapshots than this is out of policy; empty: no limit"),
    )
    snapshot_max_age_days = models.PositiveSmallIntegerField(
        verbose_name=_("maximum snapshot age (days)"),
        blank=True,
        null=True,
        default=DEFAULT_SNAPSHOT_MAX_AGE_DAYS,
        validators=[MinValueValidator(1), MaxValueValidator(3650)],
        help_text=_("An older snapshot is out of policy; empty: no limit"),
    )
    replication_max_failures = models.PositiveSmallIntegerField(
        verbose_name=_("tolerated replication failures"),
        default=0,
        db_default=0,
        validators=[MaxValueValidator(1000)],
        help_text=_(
            "A replication job that failed more often in a row is out of policy (0: any failure)"
        ),
    )
    ha_required = models.BooleanField(
        verbose_name=_("require HA"),
        default=False,
        db_default=False,
        help_text=_("Every VM must be an HA resource requested to be started"),
    )

    class Meta:
        abstract = True
