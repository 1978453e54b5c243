"""Assignment rules: the tenant, role, platform and site a sync gives an endpoint's guests.

An endpoint's rules are tried in `weight` order (lowest first); the first enabled rule
whose every set matcher matches a guest decides that guest's assignments. The backend
evaluates them (`proxbox_backend/domain/assignment.py`); this model only keeps them valid.
"""

from __future__ import annotations

import re

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils.translation import gettext_lazy as _
from netbox.models import NetBoxModel

from .policy import VMID_MAX

__all__ = (
    "ASSIGNMENT_FIELDS",
    "MATCHER_FIELDS",
    "RULE_FIELDS",
    "TEXT_MATCHERS",
    "ProxmoxAssignmentRule",
)

VMID_MIN = 100  # Proxmox's lowest VMID
TEXT_MATCHERS = ("name_pattern", "proxmox_tag", "pool", "node")
MATCHER_FIELDS = (*TEXT_MATCHERS, "vmid_min", "vmid_max")
ASSIGNMENT_FIELDS = ("tenant", "vm_role", "platform", "site", "location")
# What a rule is, in the order its forms, table, filters and REST list it.
RULE_FIELDS = ("endpoint", "weight", "enabled", "description", *MATCHER_FIELDS, *ASSIGNMENT_FIELDS)


def _vmid_field(label, help_text):
    return models.PositiveIntegerField(
        verbose_name=label,
        null=True,
        blank=True,
        validators=[MinValueValidator(VMID_MIN), MaxValueValidator(VMID_MAX)],
        help_text=help_text,
    )


def _assigned(to, label, **kwargs):
    # PROTECT: a rule must not silently lose what it assigns.
    return models.ForeignKey(
        to=to,
        on_delete=models.PROTECT,
        related_name="+",
        null=True,
        blank=True,
        verbose_name=label,
        **kwargs,
    )


class ProxmoxAssignmentRule(NetBoxModel):
    endpoint = models.ForeignKey(
        to="netbox_proxbox.ProxmoxEndpoint",
        on_delete=models.CASCADE,
        related_name="assignment_rules",
        verbose_name=_("endpoint"),
    )
    weight = models.PositiveIntegerField(
        verbose_name=_("order"),
        default=100,
        validators=[MaxValueValidator(32767)],
        help_text=_("Rules are tried lowest first; the first that matches a guest wins"),
    )
    enabled = models.BooleanField(verbose_name=_("enabled"), default=True)
    description = models.CharField(verbose_name=_("description"), max_length=200, blank=True)
    # Matchers: a rule matches a guest when every one it sets matches.
    name_pattern = models.CharField(
        verbose_name=_("name pattern"),
        max_length=200,
        blank=True,
        help_text=_(
            "Python regular expression the whole guest name must match, e.g. web-\\d+ "
            "(case-sensitive)"
        ),
    )
    proxmox_tag = models.CharField(
        verbose_name=_("Proxmox tag"),
        max_length=100,
        blank=True,
        help_text=_("Guests carrying this Proxmox tag"),
    )
    pool = models.CharField(
        verbose_name=_("pool"),
        max_length=100,
        blank=True,
        help_text=_("Guests in this resource pool"),
    )
    node = models.CharField(
        verbose_name=_("node"), max_length=100, blank=True, help_text=_("Guests on this node")
    )
    vmid_min = _vmid_field(_("lowest VMID"), _("Guests with this VMID or a higher one"))
    vmid_max = _vmid_field(_("highest VMID"), _("Guests with this VMID or a lower one"))
    # Assignments.
    tenant = _assigned("tenancy.Tenant", _("tenant"))
    # Model validation refuses a device-only role, naming vm_role.
    vm_role = _assigned("dcim.DeviceRole", _("VM role"), limit_choices_to={"vm_role": True})
    platform = _assigned("dcim.Platform", _("platform"))
    site = _assigned("dcim.Site", _("site"))
    location = _assigned(
        "dcim.Location",
        _("location"),
        help_text=_(
            "Recorded with the rule; NetBox 4.7 virtual machines have no location, so the "
            "sync does not write it"
        ),
    )

    clone_fields = ("endpoint", "enabled", *MATCHER_FIELDS, *ASSIGNMENT_FIELDS)

    class Meta:
        ordering = ("endpoint", "weight", "pk")
        verbose_name = _("Proxmox assignment rule")
        verbose_name_plural = _("Proxmox assignment rules")
        constraints = (
            models.UniqueConstraint(
                fields=("endpoint", "weight"),
                name="netbox_proxbox_assignmentrule_unique_weight",
                violation_error_message=_("This endpoint already has a rule of this order."),
            ),
        )

    def __str__(self):
        label = f"{self.endpoint} #{self.weight}" if self.endpoint_id else f"#{self.weight}"
        return f"{label} {self.description}" if self.description else label

    def clean(self):
        super().clean()
        errors = {}
        for name in TEXT_MATCHERS:
            setattr(self, name, (getattr(self, name) or "").strip())
        if self.name_pattern:
            try:
                re.compile(self.name_pattern)
            except re.error as exc:
                errors["name_pattern"] = _("Not a valid regular expression: {error}").format(
                    error=exc
                )
        if (
            self.vmid_min is not None
            and self.vmid_max is not None
            and self.vmid_min > self.vmid_max
        ):
            errors["vmid_max"] = _("The highest VMID must not be below the lowest.")
        if not any(getattr(self, name) not in (None, "") for name in MATCHER_FIELDS):
            errors["name_pattern"] = _(
                "Set at least one matcher: name pattern, Proxmox tag, pool, node or VMID range."
            )
        if not any(getattr(self, f"{name}_id") is not None for name in ASSIGNMENT_FIELDS):
            errors["tenant"] = _(
                "Set at least one assignment: tenant, VM role, platform, site or location."
            )
        # The unique constraint would answer without naming a field.
        taken = type(self).objects.filter(endpoint_id=self.endpoint_id, weight=self.weight)
        if self.endpoint_id and taken.exclude(pk=self.pk).exists():
            errors["weight"] = _("This endpoint already has a rule of this order.")
        endpoint_site = self.endpoint.site_id if self.endpoint_id else None
        if self.site_id is not None and endpoint_site not in (None, self.site_id):
            # The endpoint's site scopes its native cluster and holds its nodes' devices:
            # NetBox refuses a VM of that cluster, on those hosts, at another site.
            errors["site"] = _(
                "The endpoint's cluster and nodes are at site {site}; NetBox refuses its VMs "
                "at another site."
            ).format(site=self.endpoint.site)
        if self.location_id is not None:
            if self.site_id is None:
                errors["site"] = _("A location needs its site.")
            elif self.location.site_id != self.site_id:
                errors["location"] = _("The location must belong to the rule's site.")
        if errors:
            raise ValidationError(errors)

    def as_rule(self) -> dict:
        """The rule as the backend reads it (also in its REST representation)."""
        return {
            "id": self.pk,
            "weight": self.weight,
            "enabled": self.enabled,
            "description": self.description,
            "match": {name: getattr(self, name) or None for name in MATCHER_FIELDS},
            "assign": {name: getattr(self, f"{name}_id") for name in ASSIGNMENT_FIELDS},
        }
