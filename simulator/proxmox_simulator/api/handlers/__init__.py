"""Importing this package registers every semantic handler."""

from proxmox_simulator.api.handlers import access, cluster, guests, nodes  # noqa: F401
from proxmox_simulator.api.handlers.registry import REGISTRY

__all__ = ["REGISTRY"]
