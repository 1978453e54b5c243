"""Data-protection compliance in the UI: the list (filters, CSV and YAML export) and the
tab on a VM's page. Both read `compliance.with_compliance`; nothing calls Proxmox."""

from __future__ import annotations

import yaml
from django.http import HttpResponse
from django.utils.translation import gettext_lazy as _
from netbox.object_actions import ObjectAction
from netbox.views import generic
from utilities.views import ViewTab, register_model_view
from virtualization.models import VirtualMachine

from .compliance import (
    FACTS,
    INVENTORY_PERMISSIONS,
    RULES,
    failed_rules,
    with_compliance,
    without_jit,
)
from .filtersets_compliance import ComplianceFilterSet
from .forms.compliance import ComplianceFilterForm
from .models import ProxmoxEndpoint
from .models.compliance import COMPLIANCE_FIELDS
from .tables.compliance import ComplianceTable

__all__ = ("ComplianceListView", "VirtualMachineComplianceView")


class ComplianceExport(ObjectAction):
    """Export: the current view (CSV), or every column as CSV or YAML."""

    name = "export"
    label = _("Export")
    permissions_required = {"view"}
    template_name = "netbox_proxbox/inc/compliance_export_button.html"

    @classmethod
    def get_context(cls, context, model):
        request = context["request"]
        return {"url_params": request.GET.urlencode() if request.GET else ""}


def compliance_record(vm) -> dict:
    """One annotated VM as the YAML export writes it."""

    def plain(value):
        return value.isoformat() if hasattr(value, "isoformat") else value

    return {
        "name": vm.name,
        "endpoint": vm.endpoint_name,
        "cluster": vm.cluster.name if vm.cluster_id else None,
        "vmid": vm.proxmox_vmid,
        "node": vm.device.name if vm.device_id else None,
        "compliant": vm.compliant,
        "failed_rules": failed_rules(vm),
        "backup_job": vm.backup_job,
        **{field: plain(getattr(vm, field)) for field in FACTS},
    }


class ComplianceListView(generic.ObjectListView):
    queryset = with_compliance(VirtualMachine.objects.select_related("cluster", "device")).order_by(
        "endpoint_name", "name", "pk"
    )
    additional_permissions = INVENTORY_PERMISSIONS
    table = ComplianceTable
    filterset = ComplianceFilterSet
    filterset_form = ComplianceFilterForm
    actions = (ComplianceExport,)
    template_name = "netbox_proxbox/compliance_list.html"

    def get(self, request):
        export = request.GET.get("export")
        if export == "yaml":
            queryset = self.filterset(request.GET, self.get_queryset(request), request=request).qs
            with without_jit():
                records = [compliance_record(vm) for vm in queryset]
            body = yaml.safe_dump_all(records, sort_keys=False)
            response = HttpResponse(body, content_type="text/yaml")
            response["Content-Disposition"] = 'attachment; filename="netbox_compliance.yaml"'
            return response
        if export == "csv":
            queryset = self.filterset(request.GET, self.get_queryset(request), request=request).qs
            with without_jit():
                # Evaluated here, inside the transaction that switched JIT off.
                rows = list(queryset)
            table = self.get_table(rows, request, False)
            return self.export_table(table, filename="netbox_compliance.csv")
        return super().get(request)


def _in_endpoint_cluster(vm) -> bool:
    return (
        vm.cluster_id is not None
        and ProxmoxEndpoint.objects.filter(netbox_cluster_id=vm.cluster_id).exists()
    )


@register_model_view(VirtualMachine, "proxbox_compliance", path="data-protection")
class VirtualMachineComplianceView(generic.ObjectView):
    queryset = VirtualMachine.objects.all()
    additional_permissions = INVENTORY_PERMISSIONS
    template_name = "netbox_proxbox/virtualmachine_compliance.html"
    tab = ViewTab(
        label=_("Data protection"),
        visible=_in_endpoint_cluster,
        # One permission names the tab's; its view asks for every one it reads.
        permission="netbox_proxbox.view_proxmoxbackup",
        weight=2500,
    )

    def get_extra_context(self, request, instance):
        row = with_compliance(
            VirtualMachine.objects.filter(pk=instance.pk).select_related("cluster", "device")
        ).first()
        endpoint = ProxmoxEndpoint.objects.filter(netbox_cluster_id=instance.cluster_id).first()
        return {
            "row": row,
            "rules": [
                (name.removeprefix("rule_"), label, getattr(row, name))
                for name, label in RULES.items()
            ]
            if row
            else [],
            "thresholds": [
                (ProxmoxEndpoint._meta.get_field(f).verbose_name, getattr(endpoint, f))
                for f in COMPLIANCE_FIELDS
            ]
            if endpoint
            else [],
            "endpoint": endpoint,
        }
