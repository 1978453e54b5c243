import django_filters
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
class ScriptProjectFilterSet(PrimaryModelFilterSet):
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
class ScriptFileFilterSet(_ProjectFilters, NetBoxModelFilterSet):
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
class ScriptProjectRevisionFilterSet(_ProjectFilters, ChangeLoggedModelFilterSet):
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
class PublishedScriptFilterSet(_ProjectFilters, BaseFilterSet):
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
