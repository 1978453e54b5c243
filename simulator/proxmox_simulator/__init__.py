"""A stateful, asynchronous Proxmox VE API simulator."""

from importlib import metadata

# The version lives in pyproject.toml only; the installed metadata carries it here.
__version__ = metadata.version("proxmox-simulator")
