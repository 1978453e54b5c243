import strawberry
import strawberry_django

from .types import ScriptFileType, ScriptProjectRevisionType, ScriptProjectType


@strawberry.type(name="Query")
class ScriptProjectsQuery:
    script_project: ScriptProjectType = strawberry_django.field()
    script_project_list: list[ScriptProjectType] = strawberry_django.field()

    script_file: ScriptFileType = strawberry_django.field()
    script_file_list: list[ScriptFileType] = strawberry_django.field()

    script_project_revision: ScriptProjectRevisionType = strawberry_django.field()
    script_project_revision_list: list[ScriptProjectRevisionType] = strawberry_django.field()


schema = [ScriptProjectsQuery]
