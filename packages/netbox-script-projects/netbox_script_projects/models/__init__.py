from .projects import ScriptFile, ScriptProject
from .revisions import ScriptProjectRevision

__all__ = ("ScriptFile", "ScriptProject", "ScriptProjectRevision")
