"""The application service: one sync run of one endpoint, stage by stage.

Adapters (CLI, HTTP service) call `SyncService.run` and listen to its events;
the stages plan against NetBox's current state and apply in bulk.  A failing
object is counted and reported, never fatal; a failing claim stops the run
before anything else is written, because nothing can be attached to a cluster
this endpoint does not own.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from proxbox_backend.clients.http import TransportError
from proxbox_backend.clients.netbox import NetBoxClient, NetBoxError
from proxbox_backend.clients.proxmox import ProxmoxClient, ProxmoxCredentials, ProxmoxError
from proxbox_backend.config import Settings
from proxbox_backend.domain.counters import Tally
from proxbox_backend.domain.endpoint import Endpoint
from proxbox_backend.gateways.netbox import ClaimRefused, EndpointNotFound, NetBoxGateway
from proxbox_backend.gateways.proxmox import ProxmoxGateway
from proxbox_backend.stages import cluster as cluster_stage
from proxbox_backend.stages import disks as disks_stage
from proxbox_backend.stages import guests as guests_stage
from proxbox_backend.stages import interfaces as interfaces_stage
from proxbox_backend.stages import ips as ips_stage
from proxbox_backend.stages import nodes as nodes_stage

log = logging.getLogger("proxbox_backend.sync")

Emit = Callable[[dict], None]


@dataclass
class RunReport:
    endpoint: dict = field(default_factory=dict)
    cluster: dict = field(default_factory=dict)
    tally: Tally = field(default_factory=Tally)
    warnings: list[str] = field(default_factory=list)
    error: str | None = None  # a fatal error: the run stopped here
    netbox_requests: dict = field(default_factory=dict)
    proxmox_requests: dict = field(default_factory=dict)
    started_at: str = ""
    duration_s: float = 0.0
    sync_state: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None and self.tally.failed == 0

    @property
    def status(self) -> str:
        if self.error is not None:
            return "failed"
        return "completed" if self.tally.failed == 0 else "completed_with_errors"

    def as_dict(self) -> dict:
        return {
            "ok": self.ok,
            "status": self.status,
            "endpoint": self.endpoint,
            "cluster": self.cluster,
            **self.tally.as_dict(),
            "inventory_writes": self.tally.writes,
            "warnings": self.warnings,
            "error": self.error,
            "netbox_requests": self.netbox_requests,
            "proxmox_requests": self.proxmox_requests,
            "started_at": self.started_at,
            "duration_s": round(self.duration_s, 3),
            "sync_state": self.sync_state,
        }


class SyncFailed(Exception):
    """A problem that stops the run (no credentials, unreachable Proxmox, refused claim)."""


def _no_events(_event: dict) -> None:
    return None


class SyncService:
    def __init__(
        self,
        settings: Settings,
        *,
        netbox: NetBoxClient | None = None,
        proxmox_factory: Callable[[Endpoint, ProxmoxCredentials], ProxmoxClient] | None = None,
    ):
        self.settings = settings
        self._netbox = netbox
        self._proxmox_factory = proxmox_factory or self._proxmox_client

    def netbox_client(self) -> NetBoxClient:
        s = self.settings
        return NetBoxClient(
            s.netbox_url,
            s.netbox_token,
            verify_tls=s.netbox_verify_tls,
            ca_bundle=s.netbox_ca_bundle,
            timeout=s.timeout,
            retry=s.retry,
            concurrency=s.netbox_concurrency,
        )

    def _proxmox_client(self, endpoint: Endpoint, credentials: ProxmoxCredentials) -> ProxmoxClient:
        s = self.settings
        verify = endpoint.verify_tls if s.proxmox_verify_tls is None else s.proxmox_verify_tls
        return ProxmoxClient(
            s.proxmox_url or endpoint.url,
            credentials,
            verify_tls=verify,
            ca_bundle=s.proxmox_ca_bundle,
            timeout=s.timeout,
            retry=s.retry,
            concurrency=s.proxmox_concurrency,
        )

    async def run(self, endpoint_ref: str | int, emit: Emit = _no_events) -> RunReport:
        report = RunReport(started_at=dt.datetime.now(dt.UTC).isoformat())
        started = time.monotonic()
        netbox = self._netbox or self.netbox_client()
        try:
            await self._run(endpoint_ref, netbox, report, emit)
        except SyncFailed as exc:
            report.error = str(exc)
        except (NetBoxError, ProxmoxError, TransportError) as exc:
            report.error = str(exc)
        finally:
            report.duration_s = time.monotonic() - started
            report.netbox_requests = netbox.stats.as_dict()
            if self._netbox is None:
                await netbox.aclose()
        emit({"event": "finished", "report": report.as_dict()})
        return report

    async def _run(self, ref, netbox_client: NetBoxClient, report: RunReport, emit: Emit) -> None:
        netbox = NetBoxGateway(netbox_client)
        tally = report.tally
        try:
            endpoint = await netbox.endpoint(ref)
        except EndpointNotFound as exc:
            raise SyncFailed(str(exc)) from exc
        report.endpoint = {"id": endpoint.id, "name": endpoint.name}
        if not endpoint.enabled:
            raise SyncFailed(f"endpoint {endpoint.name!r} is disabled")
        credentials = await netbox.credentials(endpoint) or self.settings.fallback_credentials(
            endpoint.token_id
        )
        if credentials is None:
            raise SyncFailed(
                f"no Proxmox credentials for endpoint {endpoint.name!r}: the credentials API "
                "did not provide them and PROXBOX_PROXMOX_TOKEN (or user/password) is unset"
            )
        proxmox_client = self._proxmox_factory(endpoint, credentials)
        try:
            await proxmox_client.login()
            await self._stages(
                endpoint, netbox, ProxmoxGateway(proxmox_client), tally, report, emit
            )
        finally:
            report.proxmox_requests = proxmox_client.stats.as_dict()
            await proxmox_client.aclose()

    async def _stages(
        self,
        endpoint: Endpoint,
        netbox: NetBoxGateway,
        proxmox: ProxmoxGateway,
        tally: Tally,
        report: RunReport,
        emit: Emit,
    ) -> None:
        def stage(name: str, state: str, **extra) -> None:
            emit({"event": "stage", "stage": name, "state": state, **extra})

        # cluster ---------------------------------------------------------------------------
        stage("cluster", "started", total=1)
        identity, nodes = await proxmox.identity()
        if identity.mode != endpoint.mode:
            # Proxmox is the authority on what it is; the record is only a declaration.
            report.warnings.append(
                f"endpoint {endpoint.name!r} is declared {endpoint.mode} but Proxmox reports "
                f"{identity.mode} {identity.name!r}; syncing as {identity.mode}"
            )
        prerequisites = await netbox.prerequisites(tally)
        try:
            outcome = await cluster_stage.apply(
                netbox, endpoint, identity, prerequisites.cluster_type_id, tally
            )
        except ClaimRefused as exc:
            tally.fail(cluster_stage.OBJECT_TYPE, identity.name, str(exc))
            stage("cluster", "finished", done=1)
            raise SyncFailed(f"claim refused: {exc}") from exc
        cluster_id = outcome.cluster_id
        report.cluster = {
            "id": cluster_id,
            "name": identity.name,
            "mode": identity.mode,
            "tracking_id": outcome.claim.tracking_id,
            "claim_status": outcome.claim.http_status,
            "created": outcome.claim.created,
            "changed": outcome.claim.changed,
            "metadata_changed": outcome.metadata_changed,
        }
        stage("cluster", "finished", done=1)

        # Proxmox inventory (the slow read, with per-guest progress) --------------------
        def guest_progress(done: int, total: int) -> None:
            emit(
                {
                    "event": "progress",
                    "stage": "guests",
                    "done": done,
                    "total": total,
                    "phase": "reading Proxmox",
                }
            )

        inventory = await proxmox.inventory(identity, nodes, guest_progress)
        report.warnings.extend(inventory.warnings)

        # nodes -------------------------------------------------------------------------------
        stage("nodes", "started", total=len(nodes))
        placement = nodes_stage.NodePlacement(
            cluster_id,
            endpoint.site_id,
            endpoint.tenant_id,
            prerequisites.device_role_id,
            prerequisites.device_type_id,
        )
        device_ids = await nodes_stage.apply(netbox, nodes, placement, tally)
        stage("nodes", "finished", done=len(nodes))

        # guests ------------------------------------------------------------------------------
        guests = inventory.guests
        stage("guests", "started", total=len(guests))
        guest_placement = guests_stage.GuestPlacement(
            cluster_id,
            endpoint.site_id,
            endpoint.tenant_id,
            device_ids,
            self.settings.disappeared,
        )
        vm_ids, existing_vm_ids = await guests_stage.apply(
            netbox, guests, guest_placement, tally, inventory.unreadable
        )
        stage("guests", "finished", done=len(guests))
        prefix = guests_stage.cluster_source(cluster_id)
        owned = [
            (vm_ids[key], g)
            for g in guests
            if (key := guests_stage.source_key(prefix, g)) in vm_ids
        ]

        # interfaces, ips, disks --------------------------------------------------------
        nic_count = sum(len(g.nics) for _, g in owned)
        stage("interfaces", "started", total=nic_count)
        interface_ids = await interfaces_stage.apply(
            netbox, cluster_id, owned, existing_vm_ids, tally
        )
        stage("interfaces", "finished", done=nic_count)

        ip_count = sum(len(g.addresses) for _, g in owned)
        stage("ips", "started", total=ip_count)
        await ips_stage.apply(netbox, owned, interface_ids, existing_vm_ids, tally)
        stage("ips", "finished", done=ip_count)

        disk_count = sum(len(g.disks) for _, g in owned)
        stage("disks", "started", total=disk_count)
        await disks_stage.apply(netbox, owned, existing_vm_ids, tally)
        stage("disks", "finished", done=disk_count)

        report.sync_state = await netbox.write_sync_state(cluster_id, reflection(tally))


def reflection(tally: Tally, error: str | None = None) -> dict:
    """The sidecar's reflection metadata: when, how it went, what it changed."""
    totals = {outcome: 0 for outcome in ("created", "updated", "deleted", "failed")}
    for counters in tally.counters.values():
        for outcome in totals:
            totals[outcome] += getattr(counters, outcome)
    failed = bool(error) or totals["failed"] > 0
    lines = [error] if error else []
    lines += [f"{f.object_type} {f.label}: {f.reason}" for f in tally.failures[:20]]
    if len(tally.failures) > 20:
        lines.append(f"… and {len(tally.failures) - 20} more failures")
    return {
        "last_sync": dt.datetime.now(dt.UTC).isoformat(),
        "status": "failed" if failed else "succeeded",
        "objects_created": totals["created"],
        "objects_updated": totals["updated"],
        "objects_deleted": totals["deleted"],
        "errors": totals["failed"],
        "message": "\n".join(lines),
    }
