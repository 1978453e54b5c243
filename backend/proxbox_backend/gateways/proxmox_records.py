"""Reading storage and data-protection inventory from Proxmox, with bounded concurrency.

Per node: its storage list, the backup volumes of each backup storage it holds (a shared
storage is listed once) and its replication status. Per guest: its snapshots. Cluster
wide: backup jobs, replication jobs, HA resources, HA groups and, from PVE 9
(`domain.capabilities`), HA rules. Whatever does not answer (no permission, an offline
node, a standalone host without HA) is a warning, and the records it would have
produced stay as they are in NetBox.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from urllib.parse import quote

from proxbox_backend.clients.http import TransportError
from proxbox_backend.clients.proxmox import ProxmoxClient, ProxmoxError
from proxbox_backend.domain import records as parse
from proxbox_backend.domain.capabilities import Capabilities
from proxbox_backend.domain.models import Guest, ProxmoxNode
from proxbox_backend.domain.records import Records

UNREADABLE = (ProxmoxError, TransportError)
HA_GROUPS_PATH, HA_RULES_PATH = "/cluster/ha/groups", "/cluster/ha/rules"
# How PVE 9 answers a listing of HA groups once they have become rules.
MIGRATED_TO_RULES = "migrated to rules"


async def read(
    client: ProxmoxClient,
    nodes: list[ProxmoxNode],
    guests: list[Guest],
    capabilities: Capabilities,
    known_snapshots: Collection[int] = (),
) -> Records:
    """`known_snapshots`: VMIDs whose snapshots are not read (the caller knows them
    unchanged); like guests whose list did not answer, they are left out of
    `snapshot_vmids`, so their records stay as they are. `capabilities`: the release's,
    where it reads HA placement from."""
    records = Records()
    online = [n.name for n in nodes if n.online]

    async def attempt(what: str, coro):
        try:
            return await coro
        except UNREADABLE as exc:
            records.warnings.append(f"{what} unreadable: {exc}")
            return None

    async def node_storages(node: str) -> list[parse.Storage]:
        entries = await attempt(
            f"node {node}: storage", client.get(f"/nodes/{quote(node)}/storage")
        )
        if entries is None:
            return []
        records.storage_nodes.add(node)
        return parse.storages(node, entries or [])

    per_node = await asyncio.gather(*(node_storages(n) for n in online))
    seen: dict[tuple[str, str], tuple[str, parse.Storage]] = {}
    for node, found in zip(online, per_node, strict=True):
        for storage in found:
            # A shared storage answers on every node: the first node that lists it reads it.
            seen.setdefault((storage.name, storage.node), (node, storage))
    records.storages = [storage for _node, storage in seen.values()]

    async def storage_backups(node: str, storage: parse.Storage) -> list[parse.Backup]:
        path = f"/nodes/{quote(node)}/storage/{quote(storage.name)}/content"
        entries = await attempt(
            f"node {node}: backups on {storage.name}", client.get(path, content="backup")
        )
        if entries is None:
            return []
        records.backup_sources.add((storage.name, storage.node))
        return parse.backups(storage, entries or [])

    async def guest_snapshots(guest: Guest) -> list[parse.Snapshot]:
        path = f"/nodes/{quote(guest.node)}/{guest.kind}/{guest.vmid}/snapshot"
        entries = await attempt(f"{guest.label}: snapshots", client.get(path))
        if entries is None:
            return []
        records.snapshot_vmids.add(guest.vmid)
        return parse.snapshots(guest.vmid, entries or [])

    async def listing(name: str, answer):
        entries = await attempt(name, answer)
        if entries is not None:
            records.lists.add(name)
        return entries or []

    async def ha_groups() -> list[dict]:
        """PVE 9 keeps HA groups until its HA manager turns them into node-affinity
        rules; from then on listing them answers 500 "... migrated to rules": none left,
        which is no failure to warn about."""
        try:
            return await client.get(HA_GROUPS_PATH)
        except ProxmoxError as exc:
            if capabilities.ha_rules and MIGRATED_TO_RULES in exc.reason:
                return []
            raise

    async def replication_status(node: str) -> list[dict]:
        entries = await attempt(
            f"node {node}: replication status", client.get(f"/nodes/{quote(node)}/replication")
        )
        return entries or []

    (
        backups,
        snapshots,
        jobs,
        replication,
        groups,
        rules,
        resources,
        *statuses,
    ) = await asyncio.gather(
        asyncio.gather(
            *(
                storage_backups(node, storage)
                for node, storage in seen.values()
                if parse.holds_backups(storage)
            )
        ),
        asyncio.gather(
            *(
                guest_snapshots(g)
                for g in guests
                if g.node in online and g.vmid not in known_snapshots
            )
        ),
        listing("backup-jobs", client.get("/cluster/backup")),
        listing("replication", client.get("/cluster/replication")),
        listing(parse.HA_GROUPS, ha_groups()),
        # Up to PVE 8 there are no rules: none read, so none recorded is ever removed.
        listing(parse.HA_RULES, client.get(HA_RULES_PATH)) if capabilities.ha_rules else _nothing(),
        listing("ha-resources", client.get("/cluster/ha/resources")),
        *(replication_status(node) for node in online),
    )
    records.backups = [b for found in backups for b in found]
    records.snapshots = [s for found in snapshots for s in found]
    pools: dict[str, set[int]] = {}
    for guest in guests:
        if guest.pool:
            pools.setdefault(guest.pool, set()).add(guest.vmid)
    records.backup_jobs = parse.backup_jobs(jobs, pools)
    records.replication = parse.replication(replication, [s for found in statuses for s in found])
    records.ha_groups = parse.ha_groups(groups)
    records.ha_resources = parse.ha_resources(resources)
    records.ha_rules = parse.ha_rules(rules)
    return records


async def _nothing() -> list:
    return []
