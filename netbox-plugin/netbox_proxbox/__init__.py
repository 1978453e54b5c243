"""NetBox plugin: Proxmox endpoints and their ownership of native clusters."""

from netbox.plugins import PluginConfig

__version__ = "0.1.0"


class ProxboxConfig(PluginConfig):
    name = "netbox_proxbox"
    verbose_name = "Proxbox"
    description = "Proxmox VE endpoints, cluster tracking and the atomic sync-cluster claim"
    version = __version__
    author = "Proxbox"
    base_url = "proxbox"
    min_version = "4.7.0"
    max_version = "4.7.99"
    # encryption_key: a Fernet key encrypting endpoint token secrets at rest (required).
    required_settings = []
    default_settings = {"encryption_key": None}

    def ready(self):
        super().ready()
        from . import signals  # noqa: F401


config = ProxboxConfig
