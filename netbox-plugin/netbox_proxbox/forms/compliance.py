from django import forms
from django.utils.translation import gettext_lazy as _
from utilities.forms import BOOLEAN_WITH_BLANK_CHOICES
from utilities.forms.fields import DynamicModelMultipleChoiceField
from utilities.forms.forms import FilterForm
from utilities.forms.rendering import FieldSet

from ..compliance import RULES
from ..models import ProxmoxEndpoint

__all__ = ("ComplianceFilterForm",)


def _yes_no(label):
    return forms.NullBooleanField(
        required=False, label=label, widget=forms.Select(choices=BOOLEAN_WITH_BLANK_CHOICES)
    )


class ComplianceFilterForm(FilterForm):
    fieldsets = (
        FieldSet("q", "endpoint_id", "compliant", "backup_job"),
        FieldSet(*(r.removeprefix("rule_") for r in RULES), name=_("Rules broken")),
    )
    endpoint_id = DynamicModelMultipleChoiceField(
        queryset=ProxmoxEndpoint.objects.all(), required=False, label=_("Endpoint")
    )
    compliant = _yes_no(_("Compliant"))
    backup_job = _yes_no(_("Selected by a backup job"))


for _rule, _label in RULES.items():
    ComplianceFilterForm.base_fields[_rule.removeprefix("rule_")] = _yes_no(_label)
