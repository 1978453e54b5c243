from typing import Annotated

import strawberry
from netbox.graphql.types import NetBoxObjectType, ObjectType, PrimaryObjectType, register_type

from .. import models
from .filters import ScriptFileFilter, ScriptProjectFilter, ScriptProjectRevisionFilter

__all__ = ("ScriptFileType", "ScriptProjectRevisionType", "ScriptProjectType")


@register_type(models.ScriptProject, fields="__all__", filters=ScriptProjectFilter, pagination=True)
class ScriptProjectType(PrimaryObjectType):
    active_revision: (
        Annotated[
            "ScriptProjectRevisionType", strawberry.lazy("netbox_script_projects.graphql.types")
        ]
        | None
    )
    script_files: list[
        Annotated["ScriptFileType", strawberry.lazy("netbox_script_projects.graphql.types")]
    ]
    revisions: list[
        Annotated[
            "ScriptProjectRevisionType", strawberry.lazy("netbox_script_projects.graphql.types")
        ]
    ]


@register_type(models.ScriptFile, fields="__all__", filters=ScriptFileFilter, pagination=True)
class ScriptFileType(NetBoxObjectType):
    project: Annotated["ScriptProjectType", strawberry.lazy("netbox_script_projects.graphql.types")]
    discovered_revision: (
        Annotated[
            "ScriptProjectRevisionType", strawberry.lazy("netbox_script_projects.graphql.types")
        ]
        | None
    )


# manifest and script_file_snapshot are full stored documents; the lease
# fields record internal ownership. None of them is exposed.
@register_type(
    models.ScriptProjectRevision,
    exclude=["manifest", "script_file_snapshot", "validation_job", "validation_started"],
    filters=ScriptProjectRevisionFilter,
    pagination=True,
)
class ScriptProjectRevisionType(ObjectType):
    project: Annotated["ScriptProjectType", strawberry.lazy("netbox_script_projects.graphql.types")]
