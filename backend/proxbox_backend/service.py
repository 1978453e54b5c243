"""The application service: one sync run of one endpoint, from claim to report.

Adapters (CLI, HTTP service) call `SyncService.run` and listen to its events. This
module keeps the run's life cycle: the endpoint and its credentials, the claim, the
stage graph (`stages.GRAPH`, run by `pipeline.Scheduler`), the baseline, and the
sidecar's record. A failing object is counted and reported, never fatal; a failing
claim stops the run before anything else is written, because nothing can be attached
to a cluster this endpoint does not own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
import time
from collections.abc import Callable

from proxbox_backend import hygiene
from proxbox_backend.background import in_background
from proxbox_backend.baselines import BaselineStore
from proxbox_backend.clients.http import TransportError
from proxbox_backend.clients.netbox import NetBoxClient, NetBoxError
from proxbox_backend.clients.proxmox import ProxmoxClient, ProxmoxCredentials, ProxmoxError
from proxbox_backend.config import Settings
from proxbox_backend.domain.endpoint import Endpoint
from proxbox_backend.domain.policy import ACTIVE, OFF, PolicyError, Target
from proxbox_backend.domain.preview import PlanRecorder
from proxbox_backend.gateways.netbox import (
    EndpointNotFound,
    NetBoxGateway,
    NoCredentials,
)
from proxbox_backend.gateways.preview import PreviewNetBoxClient, PreviewNetBoxGateway
from proxbox_backend.gateways.proxmox import ProxmoxGateway
from proxbox_backend.incremental import Incremental
from proxbox_backend.pipeline import Scheduler
from proxbox_backend.report import FATAL, RunReport, SyncFailed, failure_reason, reflection
from proxbox_backend.stages import GRAPH
from proxbox_backend.stages import cluster as cluster_stage
from proxbox_backend.stages.context import StageRun

__all__ = ["RunReport", "SyncService", "reflection"]  # what adapters import from here

log = logging.getLogger("proxbox_backend.sync")

Emit = Callable[[dict], None]


class SyncService:
    def __init__(
        self,
        settings: Settings,
        *,
        netbox: NetBoxClient | None = None,
        proxmox_factory: Callable[[Endpoint, ProxmoxCredentials], ProxmoxClient] | None = None,
        baselines: BaselineStore | None = None,
    ):
        """`baselines`: where incremental runs keep what the last run saw; None: every
        run is a full one."""
        self.settings = settings
        self._netbox = netbox
        self.baselines = baselines
        self._proxmox_factory = proxmox_factory or settings.proxmox_client

    def netbox_client(self) -> NetBoxClient:
        return self.settings.netbox_client()

    async def run(
        self,
        endpoint_ref: str | int,
        emit: Emit = lambda _event: None,
        target: Target | None = None,
        *,
        dry_run: bool = False,
    ) -> RunReport:
        """Sync the endpoint; with `target`, only that guest or node (same claim, planners).

        With `dry_run`, the same planners run against NetBox's current state but nothing is
        written: the report's `plan` lists what the run would create, update and delete.
        """
        report = RunReport(started_at=dt.datetime.now(dt.UTC).isoformat(), dry_run=dry_run)
        started = time.monotonic()
        netbox = self._netbox or self.netbox_client()
        try:
            if dry_run:
                report.plan = PlanRecorder()
                preview = PreviewNetBoxClient(netbox, report.plan)
                await self._run(endpoint_ref, preview, report, emit, target)
            else:
                await self._run(endpoint_ref, netbox, report, emit, target)
        except Exception as exc:
            # The run's boundary: an unexpected answer ends this run with a report (and the
            # HTTP service's followers with a `finished` event) instead of a hung stream.
            if not isinstance(exc, FATAL):
                log.exception("sync of endpoint %s failed unexpectedly", endpoint_ref)
            report.error = failure_reason(exc)
        finally:
            report.duration_s = time.monotonic() - started
            report.netbox_requests = netbox.stats.as_dict()
            if self._netbox is None:
                await netbox.aclose()
        emit({"event": "finished", "report": report.as_dict()})
        return report

    async def endpoint_exists(self, endpoint_id: int) -> bool:
        """Asked before a run is recorded: a run of an endpoint NetBox does not have would
        only fail. NetBoxError or TransportError when NetBox cannot tell."""
        netbox = self._netbox or self.netbox_client()
        try:
            return await NetBoxGateway(netbox).endpoint_exists(endpoint_id)
        finally:
            if self._netbox is None:
                await netbox.aclose()

    async def watched_endpoints(self) -> dict[int, int]:
        """Endpoint id → poll interval of every endpoint with live sync on."""
        netbox = self._netbox or self.netbox_client()
        try:
            return await NetBoxGateway(netbox).watched_endpoints()
        finally:
            if self._netbox is None:
                await netbox.aclose()

    async def record_live_run(
        self, endpoint_id: int, run_id: str, report: RunReport, trigger: dict
    ) -> str:
        """The finished run a watcher started, as a sync Job in NetBox."""
        netbox = self._netbox or self.netbox_client()
        try:
            return await NetBoxGateway(netbox).record_live_run(
                endpoint_id,
                {
                    "backend_run": run_id,
                    "started": report.started_at,
                    "completed": dt.datetime.now(dt.UTC).isoformat(),
                    "report": report.as_dict(),
                    "trigger": trigger,
                },
            )
        finally:
            if self._netbox is None:
                await netbox.aclose()

    async def watch_client(self, endpoint_id: int) -> ProxmoxClient:
        """A logged-in client of the endpoint's Proxmox, for its watcher's polls."""
        netbox = self._netbox or self.netbox_client()
        try:
            gateway = NetBoxGateway(netbox)
            client = await self.proxmox_client(await gateway.endpoint(endpoint_id), gateway)
        finally:
            if self._netbox is None:
                await netbox.aclose()
        try:
            await client.login()
        except BaseException:
            await client.aclose()
            raise
        return client

    async def preview(
        self,
        endpoint_ref: str | int,
        emit: Emit = lambda _event: None,
        target: Target | None = None,
    ) -> RunReport:
        return await self.run(endpoint_ref, emit, target, dry_run=True)

    async def _run(
        self, ref, netbox_client: NetBoxClient, report: RunReport, emit: Emit, target=None
    ) -> None:
        if isinstance(netbox_client, PreviewNetBoxClient):
            netbox: NetBoxGateway = PreviewNetBoxGateway(netbox_client)
        else:
            netbox = NetBoxGateway(netbox_client)
        try:
            endpoint = await netbox.endpoint(ref)
        except (EndpointNotFound, PolicyError) as exc:
            raise SyncFailed(str(exc)) from exc
        endpoint = dataclasses.replace(endpoint, policy=endpoint.policy.targeting(target))
        report.endpoint = {"id": endpoint.id, "name": endpoint.name}
        if target is not None:
            report.endpoint["target"] = (
                f"{target.guest[0]}/{target.guest[1]}" if target.guest else f"node {target.node}"
            )
        if not endpoint.enabled:
            raise SyncFailed(f"endpoint {endpoint.name!r} is disabled")
        try:
            await self._sync_endpoint(endpoint, netbox, report, emit, target)
        except Exception as exc:
            # A run that broke off before its stages recorded it (no credentials, Proxmox
            # unreachable at its first read, a refused claim): the native cluster the
            # endpoint already owns must not keep showing the previous run's success.
            if not report.sync_state and not report.dry_run:
                broke_off = reflection(report.tally, error=failure_reason(exc))
                report.sync_state = await netbox.record_broken_off(endpoint, broke_off)
            raise

    async def _sync_endpoint(
        self, endpoint: Endpoint, netbox: NetBoxGateway, report: RunReport, emit: Emit, target
    ) -> None:
        incremental = None
        # A preview shows the whole plan, and a targeted sync is not a whole run.
        if self.baselines is not None and target is None and not report.dry_run:
            incremental = Incremental(self.baselines, netbox, endpoint)
        # Nothing is written before the claim: the change log is read meanwhile.
        async with in_background(self._read_history(incremental)) as read:
            proxmox_client = await self.proxmox_client(endpoint, netbox)
            try:
                await proxmox_client.login()
                proxmox = ProxmoxGateway(proxmox_client)
                policy = ACTIVE.set(endpoint.policy)
                try:
                    await self._execute(endpoint, netbox, proxmox, report, emit, incremental, read)
                finally:
                    ACTIVE.reset(policy)
            finally:
                report.proxmox_requests = proxmox_client.stats.as_dict()
                await proxmox_client.aclose()

    async def _execute(
        self, endpoint, netbox, proxmox, report: RunReport, emit: Emit, incremental, history_read
    ) -> None:
        """Claim, stage graph, record and baseline; `history_read`: the incremental run's
        change-log read, started before Proxmox was asked anything."""
        identity, nodes = await proxmox.identity()
        if identity.mode != endpoint.mode:
            # Proxmox is the authority on what it is; the record is only a declaration.
            report.warnings.append(
                f"endpoint {endpoint.name!r} is declared {endpoint.mode} but Proxmox "
                f"reports {identity.mode} {identity.name!r}; syncing as {identity.mode}"
            )

        def progress(done: int, total: int) -> None:
            phase = {"phase": "reading Proxmox"}
            emit({"event": "progress", "stage": "guests", "done": done, "total": total, **phase})

        # Proxmox's guests are read while NetBox answers the prerequisites and the claim.
        async with in_background(proxmox.inventory(identity, nodes, progress)) as inventory:
            # Before this run writes anything: where it starts in the change log.
            await history_read
            prerequisites = (
                incremental.prerequisites() if incremental is not None else None
            ) or await netbox.prerequisites(report.tally)
            claimed = await cluster_stage.claimed(
                netbox, endpoint, identity, prerequisites.cluster_type_id, report, emit
            )
            run = StageRun(
                self.settings, endpoint, netbox, proxmox, report, emit, incremental,
                ACTIVE.get(), prerequisites, claimed.cluster_id, nodes, inventory,
            )  # fmt: skip
            # The tracking record's refresh and the sidecar's lookup need only the claim:
            # they run beside the stages instead of before and after them.
            async with (
                in_background(
                    cluster_stage.refreshed(netbox, identity, claimed, report)
                ) as tracking,
                in_background(netbox.sync_state_sidecar(run.cluster_id)) as sidecar,
            ):
                try:
                    await Scheduler(
                        GRAPH,
                        run,
                        emit,
                        enter=lambda: ACTIVE.set(run.policy),
                        switched_off=lambda object_type: run.policy.mode(object_type) == OFF,
                    ).execute()
                    await tracking
                except (NetBoxError, ProxmoxError, TransportError) as exc:
                    # Proxmox was seen all the same; the tracking record says so.
                    await asyncio.gather(tracking, return_exceptions=True)
                    # The cluster is ours: its sidecar says the run broke off, and why.
                    failed = reflection(
                        report.tally, error=str(exc), read_failures=report.read_failures
                    )
                    report.sync_state = await netbox.write_sync_state(await sidecar, failed)
                    raise
                # The sidecar is bookkeeping, not inventory: the baseline's end in the
                # change log is read while it is written.
                done = reflection(report.tally, read_failures=report.read_failures)
                # The IPAM checks (`hygiene`) read while the sidecar and baseline are written.
                report.sync_state, report.hygiene, *_ = await asyncio.gather(
                    netbox.write_sync_state(await sidecar, done),
                    hygiene.check(run),
                    *([incremental.finish(run)] if incremental is not None else []),
                )

    async def proxmox_client(self, endpoint: Endpoint, netbox: NetBoxGateway) -> ProxmoxClient:
        """A client of the endpoint's Proxmox with its credentials (not logged in yet);
        SyncFailed naming why when there are none."""
        try:
            credentials = await netbox.proxmox_credentials(endpoint, self.settings)
        except NoCredentials as exc:
            raise SyncFailed(str(exc)) from exc
        return self._proxmox_factory(endpoint, credentials)

    async def _read_history(self, incremental: Incremental | None) -> None:
        if incremental is not None:
            await incremental.read(self.settings.full_sync_interval)
