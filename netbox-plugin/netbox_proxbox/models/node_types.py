"""Which NetBox device type a Proxmox node's device gets: the endpoint's `node_device_type`
for every node, and an override per node for the ones built differently.

An override is a row of its own (not a mapping stored on the endpoint): the device type is
a real reference that NetBox protects from deletion, each override has its own change
record, permissions and REST/GraphQL/UI like every other NetBox object, and the endpoint's
REST representation lists them (`node_device_types`) so the backend reads them with the
endpoint record it already fetches.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import models
from django.urls import reverse
from django.utils.translation import gettext_lazy as _
from netbox.models import NetBoxModel

__all__ = ("NODE_NAME_VALIDATOR", "ProxmoxNodeTypeOverride", "duplicate_node_message")

# PVE's node names (pve-common's `pve-node` format): a host name label.
NODE_NAME_VALIDATOR = RegexValidator(
    regex=r"^[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?$",
    message=_("Enter a Proxmox node name: letters, digits and inner hyphens."),
    code="invalid_node_name",
)
UNIQUE_NODE_CONSTRAINT = "netbox_proxbox_proxmoxnodetypeoverride_unique_node"


def duplicate_node_message(node: str):
    return _("The endpoint already has a device type override for node %(node)s.") % {"node": node}


class ProxmoxNodeTypeOverride(NetBoxModel):
    endpoint = models.ForeignKey(
        to="netbox_proxbox.ProxmoxEndpoint",
        on_delete=models.CASCADE,
        related_name="node_type_overrides",
        verbose_name=_("endpoint"),
    )
    node = models.CharField(
        verbose_name=_("node"),
        max_length=63,
        validators=[NODE_NAME_VALIDATOR],
        help_text=_("The Proxmox node's name, as Proxmox lists it"),
    )
    # PROTECT like the endpoint's own references: a device type in use by a mapping is not
    # deleted from under it (the next sync would silently fall back to another type).
    device_type = models.ForeignKey(
        to="dcim.DeviceType",
        on_delete=models.PROTECT,
        related_name="proxmox_node_type_overrides",
        verbose_name=_("device type"),
    )
    description = models.CharField(verbose_name=_("description"), max_length=200, blank=True)

    clone_fields = ("endpoint", "device_type")

    class Meta:
        ordering = ("endpoint", "node")
        verbose_name = _("Proxmox node type override")
        verbose_name_plural = _("Proxmox node type overrides")
        constraints = (
            models.UniqueConstraint(
                fields=("endpoint", "node"),
                name=UNIQUE_NODE_CONSTRAINT,
                violation_error_message=_("This endpoint already has an override for the node."),
            ),
        )

    def __str__(self):
        return f"{self.endpoint} / {self.node}"

    def get_absolute_url(self):
        return reverse("plugins:netbox_proxbox:proxmoxnodetypeoverride", args=[self.pk])

    def clean(self):
        super().clean()
        # Checked here (not only by the constraint) so the answer names the node field.
        if self.endpoint_id is None or not self.node:
            return
        others = type(self).objects.filter(endpoint_id=self.endpoint_id, node=self.node)
        if self.pk is not None:
            others = others.exclude(pk=self.pk)
        if others.exists():
            raise ValidationError({"node": duplicate_node_message(self.node)})
