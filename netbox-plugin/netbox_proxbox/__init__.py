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
    default_settings = {}


config = ProxboxConfig
