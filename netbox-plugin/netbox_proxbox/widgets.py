"""Dashboard widgets: sync health of the Proxmox endpoints a user may view."""

from __future__ import annotations

from django import forms
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.translation import gettext_lazy as _
from extras.dashboard.utils import register_widget
from extras.dashboard.widgets import DashboardWidget, WidgetConfigForm

from .models import ProxmoxEndpoint
from .sync.health import FAILING, NEVER, URGENCY, SyncHealth, with_sync_health

__all__ = ("ComplianceWidget", "SyncHealthWidget")


@register_widget
class SyncHealthWidget(DashboardWidget):
    default_title = _("Proxmox sync health")
    description = _(
        "Each Proxmox endpoint's sync state, failing ones first: failed syncs in a row, "
        "the last successful sync and the next scheduled one."
    )
    template_name = "netbox_proxbox/widgets/sync_health.html"
    default_config = {"problems_only": False, "limit": 10}
    width = 6
    height = 4

    class ConfigForm(WidgetConfigForm):
        problems_only = forms.BooleanField(
            required=False,
            label=_("Only endpoints that need attention"),
            help_text=_("Failing endpoints and enabled ones that never synced"),
        )
        limit = forms.IntegerField(
            min_value=1, max_value=100, initial=10, label=_("Endpoints shown")
        )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # A widget added with an empty title takes the default, a lazy translation the
        # dashboard's JSON field cannot store: keep it as the text the adding user saw.
        if self.title is not None:
            self.title = str(self.title)

    def render(self, request):
        if not request.user.has_perm("netbox_proxbox.view_proxmoxendpoint"):
            return render_to_string(self.template_name, {"allowed": False})
        endpoints = with_sync_health(ProxmoxEndpoint.objects.restrict(request.user, "view"))
        rows = [(endpoint, SyncHealth.of(endpoint)) for endpoint in endpoints]
        if self.config.get("problems_only"):
            rows = [(e, h) for e, h in rows if h.state in (FAILING, NEVER)]
        rows.sort(key=lambda row: (URGENCY[row[1].state], -row[1].failures_in_a_row, row[0].name))
        limit = int(self.config.get("limit") or self.default_config["limit"])
        return render_to_string(
            self.template_name,
            {
                "allowed": True,
                "rows": rows[:limit],
                "hidden": max(len(rows) - limit, 0),
                "failing": sum(1 for _, h in rows if h.state == FAILING),
                "list_url": reverse("plugins:netbox_proxbox:proxmoxendpoint_list"),
            },
        )


# -- data-protection compliance --------------------------------------------------------------


@register_widget
class ComplianceWidget(DashboardWidget):
    default_title = _("Proxmox data protection")
    description = _(
        "The VMs of Proxmox endpoints that are out of data-protection policy: in all, per "
        "rule and per endpoint."
    )
    template_name = "netbox_proxbox/widgets/compliance.html"
    width = 4
    height = 4

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.title is not None:
            self.title = str(self.title)

    def render(self, request):
        from virtualization.models import VirtualMachine

        from .compliance import RULES, compliance_counts, endpoint_counts, may_view_compliance

        if not may_view_compliance(request.user):
            return render_to_string(self.template_name, {"allowed": False})
        vms = VirtualMachine.objects.restrict(request.user, "view")
        counts = compliance_counts(vms)
        list_url = reverse("plugins:netbox_proxbox:compliance_list")
        return render_to_string(
            self.template_name,
            {
                "allowed": True,
                "counts": counts,
                "rules": [
                    (rule.removeprefix("rule_"), label, counts[rule.removeprefix("rule_")])
                    for rule, label in RULES.items()
                ],
                "endpoints": endpoint_counts(vms),
                "list_url": list_url,
            },
        )
