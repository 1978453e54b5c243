"""NetBox plugin: Script Projects with immutable, digest-identified revisions."""

from importlib import metadata

from netbox.plugins import PluginConfig

# The version lives in pyproject.toml only; the installed metadata carries it here.
__version__ = metadata.version("netbox-script-projects")


class ScriptProjectsConfig(PluginConfig):
    name = "netbox_script_projects"
    verbose_name = "Script Projects"
    description = "Script Projects with immutable, digest-identified source revisions"
    version = __version__
    author = "Proxbox"
    base_url = "script-projects"
    graphql_schema = "graphql.schema.schema"
    min_version = "4.7.3"
    max_version = "4.7.99"
    # Limits (see constants.DEFAULT_LIMITS); override in PLUGINS_CONFIG.
    default_settings = {}

    def ready(self):
        super().ready()
        from . import reconciliation, signals  # noqa: F401  (connect their receivers)
        from .runtime import published

        published.install()


config = ScriptProjectsConfig
