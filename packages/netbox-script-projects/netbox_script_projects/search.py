from netbox.search import SearchIndex

from .models import ScriptFile, ScriptProject


class ScriptProjectIndex(SearchIndex):
    model = ScriptProject
    fields = (("name", 100), ("key", 110), ("description", 500), ("comments", 5000))
    display_attrs = ("key", "activation_policy", "enabled", "description")


class ScriptFileIndex(SearchIndex):
    model = ScriptFile
    fields = (("path", 100), ("description", 500))
    display_attrs = ("project", "enabled", "description")


# Revisions have no global-search view.
indexes = (ScriptProjectIndex, ScriptFileIndex)
