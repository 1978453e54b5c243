"""Proxmox gateway: the endpoint's inventory in domain models, read with bounded concurrency."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import replace
from urllib.parse import quote

from proxbox_backend.clients.http import TransportError
from proxbox_backend.clients.proxmox import ProxmoxClient, ProxmoxError
from proxbox_backend.domain import proxmox_config as parse
from proxbox_backend.domain import sdn as sdn_parse
from proxbox_backend.domain.capabilities import sdn_absent
from proxbox_backend.domain.models import (
    LXC,
    QEMU,
    ClusterIdentity,
    Guest,
    ProxmoxInventory,
    ProxmoxNode,
)


class ProxmoxGateway:
    def __init__(self, client: ProxmoxClient):
        self.client = client

    async def identity(self) -> tuple[ClusterIdentity, list[ProxmoxNode]]:
        status = await self.client.cluster_status()
        nodes = parse.nodes_from_status(status)
        if not nodes:
            # Some standalone hosts list no node entry in /cluster/status; /nodes always does.
            nodes = [
                ProxmoxNode(n["node"], n.get("status", "online") == "online")
                for n in await self.client.nodes()
            ]
            status = [*status, *({"type": "node", "name": n.name} for n in nodes)]
        release = (await self.client.version() or {}).get("version", "")
        return replace(parse.cluster_identity(status), version=str(release)), nodes

    async def inventory(
        self,
        identity: ClusterIdentity,
        nodes: list[ProxmoxNode],
        progress: Callable[[int, int], None] | None = None,
    ) -> ProxmoxInventory:
        resources = [r for r in await self.client.guests() if r.get("type") in (QEMU, LXC)]
        inventory = ProxmoxInventory(identity, nodes, [])
        done = 0
        total = len(resources)
        if progress:
            progress(0, total)

        async def read(resource: dict) -> Guest | None:
            nonlocal done
            try:
                return await self._guest(resource, inventory)
            except (ProxmoxError, TransportError, parse.ConfigError) as exc:
                inventory.read_failures.append(
                    f"{resource.get('type')}/{resource.get('vmid')}: config unreadable: {exc}"
                )
                return None
            finally:
                done += 1
                if progress:
                    progress(done, total)

        async def network(node: ProxmoxNode) -> None:
            try:
                entries = await self.client.node_network(node.name)
                inventory.node_networks[node.name] = parse.node_interfaces(entries)
            except (ProxmoxError, TransportError) as exc:
                inventory.read_failures.append(f"node {node.name}: network unreadable: {exc}")

        async def facts(node: ProxmoxNode) -> None:
            """The node's hardware (`/nodes/{node}/status`, shaped by its release)."""
            try:
                status = await self.client.node_status(node.name)
                inventory.node_facts[node.name] = parse.node_facts(
                    status, inventory.identity.capabilities
                )
            except (ProxmoxError, TransportError) as exc:
                # Its device keeps the facts it has: a degraded run.
                inventory.read_failures.append(f"node {node.name}: status unreadable: {exc}")

        async def search_domains(node: ProxmoxNode) -> None:
            """A container without `searchdomain` inherits its node's (its DNS name)."""
            try:
                dns = await self.client.node_dns(node.name)
                inventory.node_search_domains[node.name] = str(dns.get("search") or "")
            except (ProxmoxError, TransportError) as exc:
                # Its containers' DNS names then stay as they are: a degraded run.
                inventory.read_failures.append(f"node {node.name}: DNS settings unreadable: {exc}")

        # No readable tag style (no Sys.Audit on /, older PVE): tags get default colours.
        with contextlib.suppress(ProxmoxError, TransportError):
            inventory.tag_colors = parse.tag_colors(await self.client.cluster_options())

        # An offline node cannot answer; its interfaces are left as they are.
        holding_containers = {r.get("node") for r in resources if r.get("type") == LXC}
        await asyncio.gather(
            *(network(n) for n in nodes if n.online),
            *(facts(n) for n in nodes if n.online),
            *(search_domains(n) for n in nodes if n.online and n.name in holding_containers),
        )
        guests = await asyncio.gather(*(read(r) for r in resources))
        # A guest whose config could not be read is left out of this run entirely, and
        # remembered so the disappeared-guest policy does not delete it by mistake.
        inventory.guests = [g for g in guests if g is not None]
        inventory.unreadable = {
            (r["type"], int(r["vmid"])) for r, g in zip(resources, guests, strict=True) if g is None
        }
        return inventory

    async def sdn(self, warnings: list[str]) -> sdn_parse.Sdn:
        """The applied SDN: zones, VNets and each VNet's subnets. A cluster without SDN
        (`capabilities.sdn_absent`) has none and answers nothing, so nothing synced from
        it goes; any other failure is a warning and leaves it as it is too."""
        try:
            zones, vnets = await asyncio.gather(
                self.client.get("/cluster/sdn/zones", running=1),
                self.client.get("/cluster/sdn/vnets", running=1),
            )
            found = sdn_parse.Sdn(sdn_parse.zones(zones), sdn_parse.vnets(vnets))
            answers = await asyncio.gather(
                *(
                    self.client.get(f"/cluster/sdn/vnets/{quote(v.name)}/subnets", running=1)
                    for v in found.vnets
                )
            )
            for vnet, entries in zip(found.vnets, answers, strict=True):
                found.subnets.extend(sdn_parse.subnets(vnet.name, entries))
            return found
        except ProxmoxError as exc:
            if not sdn_absent(exc.status):
                warnings.append(f"SDN unreadable: {exc}")
            return sdn_parse.Sdn(answered=False)
        except (TransportError, sdn_parse.SdnError) as exc:
            warnings.append(f"SDN unreadable: {exc}")
            return sdn_parse.Sdn(answered=False)

    async def _guest(self, resource: dict, inventory: ProxmoxInventory) -> Guest:
        kind, node, vmid = resource["type"], resource["node"], int(resource["vmid"])
        config = await self.client.guest_config(node, kind, vmid)
        draft = parse.guest(
            resource, config, node_search_domains=inventory.node_search_domains.get(node)
        )
        if isinstance(config.get("digest"), str):
            inventory.config_digests[vmid] = config["digest"]
        if resource.get("status") != "running":
            return draft
        try:
            if kind == QEMU:
                agent = parse.property_string(config.get("agent", "0"), "enabled")
                if agent.get("enabled") not in ("1", "yes", "on", "true"):
                    return draft
                # The agent calls need only the config: one round trip, not three in a row.
                interfaces, platform, host_name = await asyncio.gather(
                    self.client.qemu_agent_interfaces(node, vmid),
                    self._agent_platform(node, vmid),
                    self._agent_host_name(node, vmid),
                )
                return parse.reported(
                    draft,
                    parse.agent_addresses(interfaces, list(draft.nics)),
                    platform,
                    nics=parse.agent_nic_names(interfaces, list(draft.nics)),
                    dns_name=parse.agent_dns_name(host_name, config),
                )
            if not inventory.identity.capabilities.lxc_interfaces:
                # The release cannot tell: the container syncs with its configured ones.
                return draft
            entries = await self.client.lxc_interfaces(node, vmid)
            return parse.reported(
                draft, parse.lxc_runtime_addresses(entries, list(draft.nics)), None
            )
        except ProxmoxError as exc:
            # An agent that is not running is normal: the guest syncs with its configured
            # addresses (and the names it reported earlier), kept until it answers again.
            inventory.warnings.append(f"{draft.label}: no runtime addresses: {exc.reason}")
            return draft

    async def _agent_host_name(self, node: str, vmid: int) -> str | None:
        """The guest's host name; None when the agent cannot say (it answers the
        interfaces call, whose failure is the one that counts)."""
        try:
            return await self.client.qemu_agent_host_name(node, vmid)
        except ProxmoxError:
            return None

    async def _agent_platform(self, node: str, vmid: int):
        """The OS the agent names; None when it cannot say (older agents lack the call)."""
        try:
            return parse.agent_platform(await self.client.qemu_agent_osinfo(node, vmid))
        except ProxmoxError:
            return None
