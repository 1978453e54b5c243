import django_tables2 as tables
from django.utils.translation import gettext_lazy as _
from netbox.tables import columns
from tenancy.tables import TenancyColumnsMixin

from ..models import ProxmoxAssignmentRule
from .proxbox import ViewerAwareTable, VisibleRelationColumn

__all__ = ("ProxmoxAssignmentRuleTable",)


class ProxmoxAssignmentRuleTable(TenancyColumnsMixin, ViewerAwareTable):
    weight = tables.Column(linkify=True, verbose_name=_("Order"))
    endpoint = VisibleRelationColumn(verbose_name=_("Endpoint"))
    enabled = columns.BooleanColumn()
    vm_role = tables.Column(linkify=True, verbose_name=_("VM role"))
    platform = tables.Column(linkify=True)
    site = tables.Column(linkify=True)
    location = tables.Column(linkify=True)
    tags = columns.TagColumn(url_name="plugins:netbox_proxbox:proxmoxassignmentrule_list")

    class Meta(ViewerAwareTable.Meta):
        model = ProxmoxAssignmentRule
        fields = (
            "pk",
            "id",
            "endpoint",
            "weight",
            "enabled",
            "description",
            "name_pattern",
            "proxmox_tag",
            "pool",
            "node",
            "vmid_min",
            "vmid_max",
            "tenant",
            "tenant_group",
            "vm_role",
            "platform",
            "site",
            "location",
            "tags",
            "created",
            "last_updated",
        )
        default_columns = (
            "endpoint",
            "weight",
            "enabled",
            "name_pattern",
            "proxmox_tag",
            "pool",
            "node",
            "vmid_min",
            "vmid_max",
            "tenant",
            "vm_role",
            "platform",
            "site",
        )
