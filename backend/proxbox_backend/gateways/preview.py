"""The NetBox side of a dry run: reads go to NetBox, writes go to a PlanRecorder.

`PreviewNetBoxClient` shares the real client's transport (and its request counters) but
refuses to send anything other than a read: bulk writes are recorded and answered as
NetBox would answer them, with placeholder ids for created objects. Every object read
is remembered so that an update can show each field's current value.

`PreviewNetBoxGateway` replaces the plugin's write actions: the sync-cluster claim is
only read (the endpoint's linked native cluster and its tracking record), and the
sidecar's reflection metadata is not written.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx

from proxbox_backend.clients.netbox import BulkResult, NetBoxClient, NetBoxError
from proxbox_backend.domain.endpoint import Endpoint
from proxbox_backend.domain.preview import PlanRecorder
from proxbox_backend.gateways import netbox as nb
from proxbox_backend.gateways.netbox import ClaimResult, NetBoxGateway, SyncStateSidecar

READS = frozenset({"GET", "HEAD", "OPTIONS"})

OBJECT_TYPES = {
    nb.CLUSTERS: "virtualization.cluster",
    nb.CLUSTER_TYPES: "virtualization.clustertype",
    nb.VIRTUAL_MACHINES: "virtualization.virtualmachine",
    nb.VM_INTERFACES: "virtualization.vminterface",
    nb.DEVICE_INTERFACES: "dcim.interface",
    nb.VIRTUAL_DISKS: "virtualization.virtualdisk",
    nb.IP_ADDRESSES: "ipam.ipaddress",
    nb.DEVICES: "dcim.device",
    nb.DEVICE_ROLES: "dcim.devicerole",
    nb.DEVICE_TYPES: "dcim.devicetype",
    nb.MANUFACTURERS: "dcim.manufacturer",
    nb.CUSTOM_FIELDS: "extras.customfield",
    nb.TAGS: "extras.tag",
    nb.PLATFORMS: "dcim.platform",
    nb.VLANS: "ipam.vlan",
    nb.VLAN_GROUPS: "ipam.vlangroup",
    nb.PREFIXES: "ipam.prefix",
    nb.IP_RANGES: "ipam.iprange",
    nb.L2VPNS: "vpn.l2vpn",
    nb.L2VPN_TERMINATIONS: "vpn.l2vpntermination",
    nb.TRACKING: "netbox_proxbox.proxmoxcluster",
}


def object_type_of(path: str) -> str:
    if path in OBJECT_TYPES:
        return OBJECT_TYPES[path]
    from proxbox_backend.stages.records import TYPES  # the stages import the gateways

    for kind in TYPES:
        if kind.path == path:
            return kind.object_type
    return path


class PreviewWriteRefused(NetBoxError):
    """A write request reached the preview client: a bug, never sent to NetBox."""

    def __init__(self, method: str, path: str):
        super().__init__(0, method, path, "a preview never writes to NetBox")


def _placeholder(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value < 0


def collection_of(path: str) -> tuple[str, int | None]:
    """`/x/y/5/` → (`/x/y/`, 5); a list path → (path, None)."""
    head, _, last = path.rstrip("/").rpartition("/")
    if last.isdigit():
        return f"{head}/", int(last)
    return path, None


class PreviewNetBoxClient(NetBoxClient):
    """A read-only view of `inner`: same transport (and counters), no client of its own."""

    def __init__(self, inner: NetBoxClient, recorder: PlanRecorder):
        self.base_url = inner.base_url
        self.transport = inner.transport
        self.recorder = recorder
        self.seen: dict[tuple[str, int], dict] = {}

    def __repr__(self) -> str:
        return f"PreviewNetBoxClient({self.base_url!r})"

    async def request(self, method: str, path: str, **kwargs) -> httpx.Response:
        if method.upper() not in READS:
            raise PreviewWriteRefused(method.upper(), path)
        return await super().request(method, path, **kwargs)

    async def call(self, method: str, path: str, **kwargs) -> Any:
        body = await super().call(method, path, **kwargs)
        collection, obj_id = collection_of(path)
        if isinstance(body, dict):
            if obj_id is not None and body.get("id") == obj_id:
                self.seen[(collection, obj_id)] = body
            for obj in body.get("results") or ():
                if isinstance(obj, dict) and "id" in obj:
                    self.seen[(collection, obj["id"])] = obj
        return body

    async def list(self, path: str, params: dict | None = None) -> list[dict]:
        """Objects under a placeholder (a parent this run would create) do not exist yet."""
        query = {}
        for name, value in (params or {}).items():
            if isinstance(value, list | tuple):
                value = [v for v in value if not _placeholder(v)]
                if not value:
                    return []
            elif _placeholder(value):
                return []
            query[name] = value
        return await super().list(path, query)

    async def bulk_create(self, path: str, items: Sequence[dict]) -> BulkResult:
        kind = object_type_of(path)
        result = BulkResult()
        for position, payload in enumerate(items):
            placeholder = self.recorder.create(kind, payload)
            result.succeeded[position] = {**payload, "id": placeholder}
        return result

    async def bulk_update(self, path: str, items: Sequence[dict]) -> BulkResult:
        kind = object_type_of(path)
        result = BulkResult()
        for position, item in enumerate(items):
            changes = {k: v for k, v in item.items() if k != "id"}
            self.recorder.update(kind, item["id"], changes, self.seen.get((path, item["id"])))
            result.succeeded[position] = {**item}
        return result

    async def bulk_delete(self, path: str, ids: Sequence[int]) -> BulkResult:
        kind = object_type_of(path)
        result = BulkResult()
        for position, obj_id in enumerate(ids):
            self.recorder.delete(kind, obj_id, self.seen.get((path, obj_id)))
            result.succeeded[position] = obj_id
        return result

    async def aclose(self) -> None:
        return None  # the real client's owner closes the shared transport


class PreviewNetBoxGateway(NetBoxGateway):
    client: PreviewNetBoxClient

    def __init__(self, client: PreviewNetBoxClient):
        super().__init__(client)
        self.recorder = client.recorder

    async def claim(self, endpoint: Endpoint, body: dict) -> ClaimResult:
        """What the claim would do, read from the endpoint's linked native cluster."""
        if endpoint.netbox_cluster_id is None:
            placeholder = self.recorder.create(
                "virtualization.cluster",
                {"name": body["name"], "type": body["cluster_type"], "tenant": body["tenant"]}
                | ({"scope_type": "dcim.site", "scope_id": body["site"]} if body["site"] else {}),
            )
            self.recorder.notes.append(
                f"the endpoint has no native cluster yet: the claim would create cluster "
                f"{body['name']!r} (or adopt the one its tracking record links); everything "
                "the run would attach to it is planned against a placeholder"
            )
            cluster = {"id": placeholder, "name": body["name"], "status": None, "tags": []}
            return ClaimResult(0, cluster, None, created=True, changed=False)
        cluster = await self.client.get(f"{nb.CLUSTERS}{endpoint.netbox_cluster_id}/")
        current = {
            "name": cluster.get("name"),
            "type": nb.nested_id(cluster.get("type")),
            "tenant": nb.nested_id(cluster.get("tenant")),
        }
        wanted = {"name": body["name"], "type": body["cluster_type"], "tenant": body["tenant"]}
        scope_type = cluster.get("scope_type")
        if body["site"] is None:
            if scope_type is not None:
                current["scope_type"], wanted["scope_type"] = scope_type, None
        elif not (scope_type == "dcim.site" and cluster.get("scope_id") == body["site"]):
            current["scope_type"], current["scope_id"] = scope_type, cluster.get("scope_id")
            wanted["scope_type"], wanted["scope_id"] = "dcim.site", body["site"]
        changes = {k: v for k, v in wanted.items() if current.get(k) != v}
        if changes:
            self.recorder.update("virtualization.cluster", cluster["id"], changes, current)
            self.recorder.types["virtualization.cluster"].updates[-1]["label"] = str(
                current["name"]
            )
        tracking = await self.client.list(
            nb.TRACKING, {"endpoint_id": endpoint.id, "netbox_cluster_id": cluster["id"]}
        )
        tracking_id = tracking[0]["id"] if tracking else None
        return ClaimResult(200, cluster, tracking_id, created=False, changed=bool(changes))

    def explain(self, object_type: str, obj_id: int, fields: set[str], why: str) -> None:
        self.recorder.explain(object_type, obj_id, fields, why)

    async def update_cluster(self, cluster_id: int, changes: dict) -> dict:
        self.recorder.update(
            "virtualization.cluster",
            cluster_id,
            changes,
            self.client.seen.get((nb.CLUSTERS, cluster_id)),
        )
        return {"id": cluster_id, **changes}

    async def update_tracking_record(self, tracking_id: int, changes: dict) -> dict:
        """`last_seen` is reflection metadata a preview does not claim; the rest is shown."""
        inventory = {k: v for k, v in changes.items() if k != "last_seen"}
        if inventory:
            current = self.client.seen.get((nb.TRACKING, tracking_id))
            self.recorder.update(object_type_of(nb.TRACKING), tracking_id, inventory, current)
        return {"id": tracking_id, **changes}

    async def sync_state_sidecar(self, cluster_id: int) -> SyncStateSidecar:
        return SyncStateSidecar(None, "not recorded: a preview writes nothing")
