"""Fixtures for tests that need committed data and a thread-served NetBox."""

from .live import committed_inventory, live_netbox

__all__ = ("committed_inventory", "live_netbox")
