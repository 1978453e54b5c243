"""What every stage of one run shares: the endpoint, gateways, the Proxmox inventory as
the run syncs it, and where the stages report."""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the stages import this module: it imports none of theirs
    from proxbox_backend.config import Settings
    from proxbox_backend.domain.counters import Tally
    from proxbox_backend.domain.endpoint import Endpoint
    from proxbox_backend.domain.models import Guest, ProxmoxInventory, ProxmoxNode
    from proxbox_backend.domain.policy import SyncPolicy
    from proxbox_backend.gateways.netbox import NetBoxGateway, Prerequisites
    from proxbox_backend.gateways.proxmox import ProxmoxGateway
    from proxbox_backend.incremental import Incremental


@dataclass
class StageRun:
    settings: Settings
    endpoint: Endpoint
    netbox: NetBoxGateway
    proxmox: ProxmoxGateway
    report: Any  # service.RunReport
    emit: Any
    incremental: Incremental | None
    # The run's policy; a node target learns its guests and its device on the way.
    policy: SyncPolicy
    prerequisites: Prerequisites
    cluster_id: int
    nodes: list[ProxmoxNode]
    proxmox_read: Awaitable[ProxmoxInventory]  # started before the claim
    # Known once the inventory stage has it (`stages.inventory`): the syncable guests
    # (templates and excluded guests left out), and the guests whose VMs stay as they are
    # (unreadable or excluded: never "gone").
    inventory: ProxmoxInventory | None = None
    guests: list[Guest] = field(default_factory=list)
    unreadable: set[tuple[str, int]] = field(default_factory=set)
    nodes_digest: str = ""
    # The nodes' devices when an incremental run leaves the node stages out.
    known_devices: dict[str, int] | None = None
    known_snapshots: dict[int, str] = field(default_factory=dict)
    # What the baseline of a run keeping one records: set by the stages on their way.
    device_ids: dict[str, int] = field(default_factory=dict)
    owned: Any = None  # guests.Owned
    records_digest: str | None = None

    @property
    def tally(self) -> Tally:
        return self.report.tally
