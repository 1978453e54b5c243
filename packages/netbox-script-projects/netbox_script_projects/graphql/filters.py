from typing import TYPE_CHECKING, Annotated

import strawberry
import strawberry_django
from netbox.graphql.filters import (
    ChangeLoggedModelFilter,
    NetBoxModelFilter,
    PrimaryModelFilter,
    register_filter,
)
from strawberry.scalars import ID
from strawberry_django import BaseFilterLookup, FilterLookup, StrFilterLookup

from .. import models

if TYPE_CHECKING:
    from .enums import ActivationPolicyEnum, RevisionStatusEnum

__all__ = ("ScriptFileFilter", "ScriptProjectFilter", "ScriptProjectRevisionFilter")


@register_filter(models.ScriptProject, lookups=True)
class ScriptProjectFilter(PrimaryModelFilter):
    name: StrFilterLookup | None = strawberry_django.filter_field()
    key: StrFilterLookup | None = strawberry_django.filter_field()
    enabled: FilterLookup[bool] | None = strawberry_django.filter_field()
    activation_policy: (
        BaseFilterLookup[
            Annotated[
                "ActivationPolicyEnum", strawberry.lazy("netbox_script_projects.graphql.enums")
            ]
        ]
        | None
    ) = strawberry_django.filter_field()


@register_filter(models.ScriptFile, lookups=True)
class ScriptFileFilter(NetBoxModelFilter):
    project: (
        Annotated["ScriptProjectFilter", strawberry.lazy("netbox_script_projects.graphql.filters")]
        | None
    ) = strawberry_django.filter_field()
    project_id: ID | None = strawberry_django.filter_field()
    path: StrFilterLookup | None = strawberry_django.filter_field()
    enabled: FilterLookup[bool] | None = strawberry_django.filter_field()


@register_filter(models.ScriptProjectRevision, lookups=True)
class ScriptProjectRevisionFilter(ChangeLoggedModelFilter):
    # `project` filters by the Project's fields, e.g. {project: {key: {exact: "inventory"}}}.
    project: (
        Annotated["ScriptProjectFilter", strawberry.lazy("netbox_script_projects.graphql.filters")]
        | None
    ) = strawberry_django.filter_field()
    project_id: ID | None = strawberry_django.filter_field()
    status: (
        BaseFilterLookup[
            Annotated["RevisionStatusEnum", strawberry.lazy("netbox_script_projects.graphql.enums")]
        ]
        | None
    ) = strawberry_django.filter_field()
    digest: StrFilterLookup | None = strawberry_django.filter_field()
    script_file_digest: StrFilterLookup | None = strawberry_django.filter_field()
