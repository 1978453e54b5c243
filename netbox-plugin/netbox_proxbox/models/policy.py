"""An endpoint's sync policy: what the backend may create, overwrite, delete or must skip.

Fields on the endpoint (one row per endpoint, read by the backend with the endpoint record
it already fetches); `clean()` refuses malformed or overlapping filters naming the field.
"""

from __future__ import annotations

import re

from django.contrib.postgres.fields import ArrayField
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils.translation import gettext_lazy as _

from ..choices import ProtectedFieldChoices, RemovedGuestChoices, SyncModeChoices

__all__ = ("OBJECT_MODE_FIELDS", "SyncPolicyFields", "parse_vmid_ranges")

# The object types a policy sets a mode for, each a `<type>_mode` field.
OBJECT_MODE_FIELDS = (
    "guests_mode",
    "nodes_mode",
    "interfaces_mode",
    "ips_mode",
    "disks_mode",
    "vlans_mode",
    "tags_mode",
    "records_mode",
    "sdn_mode",
    "prefixes_mode",
)
VMID_MAX = 999_999_999  # Proxmox's upper bound for a VMID
REMOVED_GUESTS_DAYS_MAX = 3650
RANGE = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")


def parse_vmid_ranges(text: str) -> list[tuple[int, int]]:
    """`"100-199, 250"` → [(100, 199), (250, 250)]; ValueError says what is wrong."""
    ranges = []
    for part in (text or "").split(","):
        if not part.strip():
            continue
        match = RANGE.match(part)
        if match is None:
            raise ValueError(f"{part.strip()!r} is not a VMID or a range like 100-199")
        low = int(match[1])
        high = int(match[2]) if match[2] is not None else low
        if not 100 <= low <= high <= VMID_MAX:
            raise ValueError(f"{part.strip()!r}: VMIDs run from 100 to {VMID_MAX}, low to high")
        ranges.append((low, high))
    ranges.sort()
    for (_low, high), (next_low, next_high) in zip(ranges, ranges[1:], strict=False):
        if next_low <= high:
            raise ValueError(f"ranges overlap at {next_low}-{min(high, next_high)}")
    return ranges


def _mode_field(label, help_text="", default=SyncModeChoices.ALWAYS):
    return models.CharField(
        verbose_name=label,
        help_text=help_text,
        max_length=20,
        choices=SyncModeChoices,
        default=default,
        db_default=default,
    )


def _names_field(label, help_text):
    return ArrayField(
        base_field=models.CharField(max_length=100),
        verbose_name=label,
        blank=True,
        default=list,
        db_default=[],
        help_text=help_text,
    )


class SyncPolicyFields(models.Model):
    # Every NOT NULL column has a database default too: rows written outside Django
    # (restores, other tools, raw SQL) get today's behaviour instead of an error.
    # Empty / null: the backend's own setting (PROXBOX_DISAPPEARED_GUESTS, PROXBOX_TEMPLATES).
    removed_guests = models.CharField(
        verbose_name=_("removed guests"),
        max_length=20,
        choices=RemovedGuestChoices,
        blank=True,
        default="",
        db_default="",
        help_text=_(
            "What happens to a VM whose guest is gone from Proxmox; empty: the backend's "
            "setting (offline unless configured)"
        ),
    )
    removed_guests_days = models.PositiveSmallIntegerField(
        verbose_name=_("delete removed guests after (days)"),
        null=True,
        blank=True,
        default=None,
        validators=[MinValueValidator(1), MaxValueValidator(REMOVED_GUESTS_DAYS_MAX)],
        help_text=_(
            "With 'Mark offline, delete after a number of days': the days a VM stays offline "
            "after its guest is gone (counted from its 'Gone from Proxmox since' field)"
        ),
    )
    sync_templates = models.BooleanField(
        verbose_name=_("sync templates"),
        null=True,
        blank=True,
        default=None,
        help_text=_(
            "Sync Proxmox templates as VMs (tagged proxbox-template); empty: the backend's "
            "setting (skip unless configured)"
        ),
    )
    guests_mode = _mode_field(_("guests"))
    nodes_mode = _mode_field(_("nodes"))
    interfaces_mode = _mode_field(_("interfaces"))
    ips_mode = _mode_field(_("IP addresses"))
    disks_mode = _mode_field(_("disks"))
    vlans_mode = _mode_field(_("VLANs"))
    tags_mode = _mode_field(_("tags"))
    # One switch for the eight inventory record types: they are one mirror of Proxmox's
    # storage, data-protection and HA state (backups point at storages, HA resources at HA
    # groups, HA rules at HA resources), so switching one family off would leave the
    # others dangling.
    records_mode = _mode_field(
        _("storage and data-protection records"),
        _(
            "Storages, backups, backup jobs, snapshots, replication jobs, HA groups, "
            "resources and rules"
        ),
    )
    # One switch for everything the SDN sync writes: the VNets' VLAN groups and VLANs, L2VPNs,
    # the subnets' prefixes, gateway addresses and DHCP ranges, and the guest interfaces'
    # links to them refer to each other, like the records above.
    sdn_mode = _mode_field(
        _("SDN"),
        _(
            "Proxmox SDN zones, VNets and subnets: VLAN groups, VLANs, L2VPNs, prefixes, "
            "gateway addresses, DHCP ranges and the guest interfaces' links to them"
        ),
    )
    # Opt-in (off by default, here and in the backend for a plugin without the field): a
    # prefix for each network the synced guest addresses live in that has none in the
    # endpoint's VRF. Prefixes are the operator's to plan; the sync only fills gaps.
    prefixes_mode = _mode_field(
        _("guest network prefixes"),
        _(
            "A prefix in the endpoint's VRF for each network of the synced guest addresses "
            "that no prefix covers yet (removed again once empty or covered); off by default"
        ),
        default=SyncModeChoices.OFF,
    )
    protected_fields = ArrayField(
        base_field=models.CharField(max_length=20, choices=ProtectedFieldChoices),
        verbose_name=_("protected fields"),
        blank=True,
        default=list,
        db_default=[],
        help_text=_("Fields a sync never overwrites once the object exists"),
    )
    keep_operator_objects = models.BooleanField(
        verbose_name=_("keep operator-added interfaces and disks"),
        default=True,
        db_default=True,
        help_text=_("Interfaces and disks without the proxbox tag are never deleted"),
    )
    adopt_existing = models.BooleanField(
        verbose_name=_("adopt existing objects"),
        default=False,
        db_default=False,
        help_text=_(
            "Take over devices, VMs and IP addresses already in NetBox that carry the "
            "proxbox-adopt tag and match exactly inside this endpoint's cluster and site"
        ),
    )
    exclude_vmids = models.CharField(
        verbose_name=_("excluded VMIDs"),
        max_length=500,
        blank=True,
        default="",
        db_default="",
        help_text=_("VMIDs and ranges, e.g. 100-199, 250"),
    )
    exclude_names = _names_field(
        _("excluded names"), _("Shell-style patterns of guest names, e.g. test-*")
    )
    exclude_tags = _names_field(_("excluded tags"), _("Guests with one of these Proxmox tags"))
    exclude_nodes = _names_field(_("excluded nodes"), _("Guests on these nodes"))
    exclude_pools = _names_field(_("excluded pools"), _("Guests in these resource pools"))

    class Meta:
        abstract = True

    def clean(self):
        super().clean()
        errors = {}
        try:
            parse_vmid_ranges(self.exclude_vmids)
        except ValueError as exc:
            errors["exclude_vmids"] = str(exc)
        for name in ("exclude_names", "exclude_tags", "exclude_nodes", "exclude_pools"):
            values = [v.strip() for v in getattr(self, name) or []]
            if any(not v for v in values):
                errors[name] = _("Empty entries are not allowed.")
            elif len(set(values)) != len(values):
                errors[name] = _("An entry is listed twice.")
            setattr(self, name, values)
        counting = self.removed_guests == RemovedGuestChoices.OFFLINE_THEN_DELETE
        if counting and self.removed_guests_days is None:
            errors["removed_guests_days"] = _(
                "Required with 'Mark offline, delete after a number of days'."
            )
        elif not counting and self.removed_guests_days is not None:
            errors["removed_guests_days"] = _(
                "Only with 'Mark offline, delete after a number of days'; leave it empty."
            )
        if len(set(self.protected_fields or [])) != len(self.protected_fields or []):
            errors["protected_fields"] = _("A field is listed twice.")
        if errors:
            raise ValidationError(errors)

    def policy(self) -> dict:
        """The policy as the backend reads it (also in the endpoint's REST representation)."""
        return {
            "removed_guests": self.removed_guests or None,
            "removed_guests_days": self.removed_guests_days,
            "sync_templates": self.sync_templates,
            "modes": {
                name.removesuffix("_mode"): getattr(self, name) for name in OBJECT_MODE_FIELDS
            },
            "protected_fields": list(self.protected_fields),
            "keep_operator_objects": self.keep_operator_objects,
            "adopt_existing": self.adopt_existing,
            "exclude": {
                "vmids": parse_vmid_ranges(self.exclude_vmids),
                "names": list(self.exclude_names),
                "tags": list(self.exclude_tags),
                "nodes": list(self.exclude_nodes),
                "pools": list(self.exclude_pools),
            },
        }
