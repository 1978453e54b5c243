import copy

import django_filters
from django.core.exceptions import ValidationError
from django.db import DataError, connection, transaction
from django.db.models import Q
from django.utils.translation import gettext_lazy as _
from netbox.filtersets import (
    BaseFilterSet,
    ChangeLoggedModelFilterSet,
    NetBoxModelFilterSet,
    PrimaryModelFilterSet,
)
from utilities.filtersets import register_filterset

from .choices import ActivationPolicyChoices, RevisionStatusChoices, ScriptFileDiscoveryChoices
from .models import PublishedScript, ScriptFile, ScriptProject, ScriptProjectRevision

__all__ = (
    "PublishedScriptFilterSet",
    "ScriptFileFilterSet",
    "ScriptProjectFilterSet",
    "ScriptProjectRevisionFilterSet",
)


def _check_regex(pattern: str) -> None:
    """A pattern PostgreSQL cannot compile fails the whole list query (a 500 in NetBox
    core); compiled here first, it is a 400 naming the `__regex` filter instead."""
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT '' ~ %s", [pattern])
    except (DataError, ValueError) as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ValidationError(
            _("Invalid regular expression: {error}").format(error=reason)
        ) from None


class _RegexChecked:
    @classmethod
    def get_filters(cls):
        filters = super().get_filters()
        for name, query_filter in filters.items():
            if getattr(query_filter, "lookup_expr", None) in ("regex", "iregex"):
                checked = copy.copy(query_filter)  # NetBox's own filtersets share the original
                checked.extra = {
                    **query_filter.extra,
                    "validators": [*query_filter.extra.get("validators", ()), _check_regex],
                }
                filters[name] = checked
        return filters


class _ProjectFilters(django_filters.FilterSet):
    project_id = django_filters.ModelMultipleChoiceFilter(
        queryset=ScriptProject.objects.all(), distinct=False, label=_("Project (ID)")
    )
    project = django_filters.ModelMultipleChoiceFilter(
        field_name="project__key",
        queryset=ScriptProject.objects.all(),
        to_field_name="key",
        distinct=False,
        label=_("Project (key)"),
    )


@register_filterset
class ScriptProjectFilterSet(_RegexChecked, PrimaryModelFilterSet):
    activation_policy = django_filters.MultipleChoiceFilter(
        choices=ActivationPolicyChoices, distinct=False
    )

    class Meta:
        model = ScriptProject
        fields = ("id", "name", "key", "storage_key", "enabled", "description", "active_revision")

    def search(self, queryset, name, value):
        if not value.strip():
            return queryset
        return queryset.filter(
            Q(name__icontains=value) | Q(key__icontains=value) | Q(description__icontains=value)
        )


@register_filterset
class ScriptFileFilterSet(_RegexChecked, _ProjectFilters, NetBoxModelFilterSet):
    discovery_status = django_filters.MultipleChoiceFilter(
        choices=ScriptFileDiscoveryChoices, distinct=False
    )

    class Meta:
        model = ScriptFile
        fields = ("id", "path", "enabled", "description")

    def search(self, queryset, name, value):
        if not value.strip():
            return queryset
        return queryset.filter(Q(path__icontains=value) | Q(description__icontains=value))


@register_filterset
class ScriptProjectRevisionFilterSet(_RegexChecked, _ProjectFilters, ChangeLoggedModelFilterSet):
    status = django_filters.MultipleChoiceFilter(choices=RevisionStatusChoices, distinct=False)

    class Meta:
        model = ScriptProjectRevision
        fields = ("id", "digest", "script_file_digest", "file_count", "total_size", "activated")

    def search(self, queryset, name, value):
        if not value.strip():
            return queryset
        return queryset.filter(
            Q(digest__startswith=value.lower())
            | Q(project__name__icontains=value)
            | Q(project__key=value)
        )


@register_filterset
class PublishedScriptFilterSet(_RegexChecked, _ProjectFilters, BaseFilterSet):
    q = django_filters.CharFilter(method="search", label=_("Search"))
    live = django_filters.BooleanFilter(
        field_name="revision",
        lookup_expr="isnull",
        exclude=True,
        label=_("Published by a revision"),
    )

    class Meta:
        model = PublishedScript
        fields = ("id", "module_name", "class_name", "script_file_path", "enabled", "revision")

    def search(self, queryset, name, value):
        if not value.strip():
            return queryset
        return queryset.filter(
            Q(module_name__icontains=value)
            | Q(class_name__icontains=value)
            | Q(script_file_path__icontains=value)
        )
