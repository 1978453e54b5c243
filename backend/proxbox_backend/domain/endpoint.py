"""The plugin's Proxmox endpoint record, as far as the sync needs it."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

from proxbox_backend.domain.assignment import AssignmentRule
from proxbox_backend.domain.policy import SyncPolicy


def _id(value) -> int | None:
    if isinstance(value, dict):
        return value.get("id")
    return value


def choice_value(value):
    """A choice field's stored value: NetBox's REST API serves `{"value": ..., "label": ...}`."""
    if isinstance(value, dict):
        return value.get("value")
    return value


@dataclass(frozen=True)
class Endpoint:
    id: int
    name: str
    host: str
    port: int
    verify_tls: bool
    enabled: bool
    mode: str
    token_id: str | None
    site_id: int | None
    tenant_id: int | None
    netbox_cluster_id: int | None
    # Sync policy: the VRF of synced addresses, the role of VMs the sync creates, and
    # whether guests' Proxmox descriptions become the VMs' description and comments.
    vrf_id: int | None = None
    vm_role_id: int | None = None
    sync_descriptions: bool = False
    policy: SyncPolicy = field(default_factory=SyncPolicy)
    # Read with the endpoint (`NetBoxGateway.endpoint`): part of the endpoint as an
    # incremental run compares it, so a changed rule makes the next run a full one.
    assignment_rules: tuple[AssignmentRule, ...] = ()
    # The nodes' hardware: the device type of every node's device, and per-node overrides
    # (node name → device type id). Neither: the sync's generic type, set at creation only.
    node_device_type_id: int | None = None
    node_device_types: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_api(cls, data: dict) -> Endpoint:
        return cls(
            id=data["id"],
            name=data["name"],
            host=data["host"],
            port=int(data.get("port") or 8006),
            verify_tls=bool(data.get("verify_tls", True)),
            enabled=bool(data.get("enabled", True)),
            mode=choice_value(data.get("mode")) or "cluster",
            token_id=data.get("token_id") or None,
            site_id=_id(data.get("site")),
            tenant_id=_id(data.get("tenant")),
            netbox_cluster_id=_id(data.get("netbox_cluster")),
            vrf_id=_id(data.get("vrf")),
            vm_role_id=_id(data.get("vm_role")),
            sync_descriptions=bool(data.get("sync_descriptions", False)),
            policy=SyncPolicy.from_api(data.get("sync_policy")),
            node_device_type_id=_id(data.get("node_device_type")),
            node_device_types={
                str(node): int(type_id)
                for node, type_id in (data.get("node_device_types") or {}).items()
            },
        )

    def node_device_type(self, node: str) -> int | None:
        """The device type configured for `node`'s device: its override, else the
        endpoint's; None when neither is set."""
        return self.node_device_types.get(node, self.node_device_type_id)

    @property
    def url(self) -> str:
        """`https://host:port` from the record; a host given as a URL keeps its scheme and port."""
        if "://" in self.host:
            parts = urlsplit(self.host)
            scheme, host, port = parts.scheme, parts.hostname or "", parts.port or self.port
        else:
            scheme, host, port = "https", self.host.strip("[]"), self.port
        host = f"[{host}]" if ":" in host else host
        return f"{scheme}://{host}:{port}"
