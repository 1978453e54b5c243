from .projects import ScriptFile, ScriptProject
from .publications import PublishedScript
from .revisions import ScriptProjectRevision

__all__ = ("PublishedScript", "ScriptFile", "ScriptProject", "ScriptProjectRevision")
