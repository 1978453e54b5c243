"""Importing this package registers every semantic handler."""

from proxmox_simulator.api.handlers import (  # noqa: F401
    access,
    acme,
    backup,
    ceph,
    certificates,
    cluster,
    cluster_config,
    consoles,
    disks,
    firewall,
    guest_operations,
    guests,
    ha,
    hardware,
    jobs,
    node_admin,
    node_system,
    nodes,
    notifications,
    pools,
    qemu_capabilities,
    replication,
    sdn,
    storage,
)
from proxmox_simulator.api.handlers.registry import REGISTRY

__all__ = ["REGISTRY"]
