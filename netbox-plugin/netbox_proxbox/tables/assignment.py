import django_tables2 as tables
from django.utils.translation import gettext_lazy as _
from netbox.tables import columns
from tenancy.tables import TenancyColumnsMixin

from ..models import ProxmoxAssignmentRule
from ..models.assignment import ASSIGNMENT_FIELDS, MATCHER_FIELDS, RULE_FIELDS
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
            *RULE_FIELDS,
            "tenant_group",
            "tags",
            "created",
            "last_updated",
        )
        default_columns = (
            "endpoint",
            "weight",
            "enabled",
            *MATCHER_FIELDS,
            *(name for name in ASSIGNMENT_FIELDS if name != "location"),
        )
