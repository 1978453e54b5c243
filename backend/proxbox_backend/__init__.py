"""The Proxbox sync backend: Proxmox inventory into NetBox."""

from importlib import metadata

# The version lives in pyproject.toml only; the installed metadata carries it here.
__version__ = metadata.version("proxbox-backend")
