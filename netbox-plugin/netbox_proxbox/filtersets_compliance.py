"""Filters of the compliance list (UI and REST): by endpoint, cluster, VM and rule."""

from __future__ import annotations

import django_filters
from django.db.models import Q
from django.utils.translation import gettext_lazy as _
from utilities.filters import MultiValueNumberFilter
from virtualization.models import VirtualMachine

from .compliance import RULES
from .models import ProxmoxEndpoint

__all__ = ("ComplianceFilterSet",)


class ComplianceFilterSet(django_filters.FilterSet):
    """Over a queryset `compliance.with_compliance` annotated."""

    q = django_filters.CharFilter(method="search", label=_("Search"))
    id = django_filters.ModelMultipleChoiceFilter(
        field_name="pk", queryset=VirtualMachine.objects.all(), to_field_name="pk"
    )
    name = django_filters.CharFilter(lookup_expr="icontains")
    endpoint_id = django_filters.ModelMultipleChoiceFilter(
        field_name="cluster__proxmox_endpoint",
        queryset=ProxmoxEndpoint.objects.all(),
        label=_("Endpoint (ID)"),
    )
    # NetBox's own multi-value filters: `?vmid=100&vmid=101`, documented as integer lists
    # and refusing a non-number as NetBox's core lists do.
    cluster_id = MultiValueNumberFilter(field_name="cluster_id")
    vmid = MultiValueNumberFilter(field_name="proxmox_vmid", label=_("VMID"))
    compliant = django_filters.BooleanFilter()
    backup_job = django_filters.BooleanFilter(label=_("Selected by a backup job"))

    class Meta:
        model = VirtualMachine
        fields = ("id", "name", "cluster_id")

    def search(self, queryset, name, value):
        value = value.strip()
        if not value:
            return queryset
        query = Q(name__icontains=value)
        if value.isdigit():
            query |= Q(proxmox_vmid=int(value))
        return queryset.filter(query)


# One boolean filter per rule, named after it without `rule_` (`?backup_stale=true`).
for _rule, _label in RULES.items():
    ComplianceFilterSet.base_filters[_rule.removeprefix("rule_")] = django_filters.BooleanFilter(
        field_name=_rule, label=_label
    )
