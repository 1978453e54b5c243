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

from proxbox_backend.background import in_background
from proxbox_backend.baselines import BaselineStore
from proxbox_backend.clients.http import TransportError
from proxbox_backend.clients.netbox import NetBoxClient, NetBoxError
from proxbox_backend.clients.proxmox import ProxmoxClient, ProxmoxCredentials, ProxmoxError
from proxbox_backend.config import Settings
from proxbox_backend.domain.endpoint import Endpoint
from proxbox_backend.domain.models import ClusterIdentity
from proxbox_backend.domain.policy import ACTIVE, OFF, PolicyError, Target
from proxbox_backend.domain.preview import PlanRecorder
from proxbox_backend.gateways.netbox import (
    ChangeLogUnreadable,
    ClaimRefused,
    CredentialsWithheld,
    EndpointNotFound,
    NetBoxGateway,
)
from proxbox_backend.gateways.preview import PreviewNetBoxClient, PreviewNetBoxGateway
from proxbox_backend.gateways.proxmox import ProxmoxGateway
from proxbox_backend.incremental import Incremental
from proxbox_backend.pipeline import Scheduler
from proxbox_backend.report import MAX_NAMED, RunReport, reflection
from proxbox_backend.stages import GRAPH
from proxbox_backend.stages import cluster as cluster_stage
from proxbox_backend.stages.context import StageRun

__all__ = ["MAX_NAMED", "RunReport", "SyncFailed", "SyncService", "reflection"]

log = logging.getLogger("proxbox_backend.sync")

Emit = Callable[[dict], None]


class SyncFailed(Exception):
    """A problem that stops the run (no credentials, unreachable Proxmox, refused claim)."""


FATAL = (SyncFailed, NetBoxError, ProxmoxError, TransportError)


def failure_reason(exc: Exception) -> str:
    """Why a run stopped, as its report and sidecar say it."""
    return str(exc) if isinstance(exc, FATAL) else f"unexpected {type(exc).__name__}: {exc}"


def _no_events(_event: dict) -> None:
    return None


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

    async def run(
        self,
        endpoint_ref: str | int,
        emit: Emit = _no_events,
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

    async def preview(
        self, endpoint_ref: str | int, emit: Emit = _no_events, target: Target | None = None
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
                report.sync_state = await self._record_failure(netbox, endpoint, report, exc)
            raise

    async def _record_failure(
        self, netbox: NetBoxGateway, endpoint: Endpoint, report: RunReport, exc: Exception
    ) -> str:
        if endpoint.netbox_cluster_id is None:
            return "not recorded: the endpoint owns no native cluster yet"
        try:
            sidecar = await netbox.sync_state_sidecar(endpoint.netbox_cluster_id)
            return await netbox.write_sync_state(
                sidecar, reflection(report.tally, error=failure_reason(exc))
            )
        except (NetBoxError, TransportError) as write_failed:
            return f"not recorded: {write_failed}"

    async def _sync_endpoint(
        self, endpoint: Endpoint, netbox: NetBoxGateway, report: RunReport, emit: Emit, target
    ) -> None:
        incremental = None
        # A preview shows the whole plan, and a targeted sync is not a whole run.
        if self.baselines is not None and target is None and not report.dry_run:
            incremental = Incremental(self.baselines, netbox, endpoint)
        # Nothing is written before the claim: the change log is read meanwhile.
        async with in_background(self._read_history(incremental)) as history_read:
            withheld = None
            try:
                try:
                    credentials = await netbox.credentials(endpoint)
                except CredentialsWithheld as exc:
                    credentials, withheld = None, exc
                credentials = credentials or self.settings.fallback_credentials(endpoint.token_id)
            except ValueError as exc:
                raise SyncFailed(
                    f"unusable Proxmox credentials for endpoint {endpoint.name!r}: {exc}"
                ) from exc
            if credentials is None:
                reason = withheld or "the credentials API did not provide them"
                raise SyncFailed(
                    f"no Proxmox credentials for endpoint {endpoint.name!r}: {reason}; "
                    "PROXBOX_PROXMOX_TOKEN (or user/password) is unset"
                )
            proxmox_client = self._proxmox_factory(endpoint, credentials)
            try:
                await proxmox_client.login()
                run = _Run(
                    self.settings, endpoint, netbox, ProxmoxGateway(proxmox_client), report, emit
                )
                run.incremental = incremental
                policy = ACTIVE.set(endpoint.policy)
                try:
                    await run.execute(history_read)
                finally:
                    ACTIVE.reset(policy)
            finally:
                report.proxmox_requests = proxmox_client.stats.as_dict()
                await proxmox_client.aclose()

    async def _read_history(self, incremental: Incremental | None) -> None:
        if incremental is not None:
            await incremental.read(self.settings.full_sync_interval)


class _Run:
    """One run's life cycle around its stages: claim, stage graph, baseline, record."""

    def __init__(self, settings, endpoint, netbox, proxmox, report: RunReport, emit: Emit):
        self.settings, self.endpoint, self.netbox, self.proxmox = (
            settings,
            endpoint,
            netbox,
            proxmox,
        )
        self.report, self.tally, self.emit = report, report.tally, emit
        self.incremental: Incremental | None = None

    async def execute(self, history_read: asyncio.Future) -> None:
        """The run; `history_read`: the incremental run's change-log read, started before
        Proxmox was asked anything."""
        identity, nodes = await self.proxmox.identity()
        if identity.mode != self.endpoint.mode:
            # Proxmox is the authority on what it is; the record is only a declaration.
            self.report.warnings.append(
                f"endpoint {self.endpoint.name!r} is declared {self.endpoint.mode} but Proxmox "
                f"reports {identity.mode} {identity.name!r}; syncing as {identity.mode}"
            )
        # Proxmox's guests are read while NetBox answers the prerequisites and the claim.
        async with in_background(self.proxmox.inventory(identity, nodes, self.progress)) as read:
            incremental = self.incremental
            # Before this run writes anything: where it starts in the change log.
            await history_read
            prerequisites = (
                incremental.prerequisites() if incremental is not None else None
            ) or await self.netbox.prerequisites(self.tally)
            claimed = await self.claim(identity, prerequisites.cluster_type_id)
            run = StageRun(
                self.settings,
                self.endpoint,
                self.netbox,
                self.proxmox,
                self.report,
                self.emit,
                incremental,
                ACTIVE.get(),
                prerequisites,
                claimed.cluster_id,
                nodes,
                read,
            )
            # The tracking record's refresh and the sidecar's lookup need only the claim:
            # they run beside the stages instead of before and after them.
            async with (
                in_background(self.refresh_tracking(identity, claimed)) as tracking,
                in_background(self.netbox.sync_state_sidecar(run.cluster_id)) as sidecar,
            ):
                try:
                    await Scheduler(
                        GRAPH,
                        run,
                        self.emit,
                        enter=lambda: ACTIVE.set(run.policy),
                        switched_off=lambda object_type: run.policy.mode(object_type) == OFF,
                    ).execute()
                    await tracking
                except (NetBoxError, ProxmoxError, TransportError) as exc:
                    # Proxmox was seen all the same; the tracking record says so.
                    await asyncio.gather(tracking, return_exceptions=True)
                    # The cluster is ours: its sidecar says the run broke off, and why.
                    self.report.sync_state = await self.netbox.write_sync_state(
                        await sidecar,
                        reflection(
                            self.tally, error=str(exc), read_failures=self.report.read_failures
                        ),
                    )
                    raise
                # The sidecar is bookkeeping, not inventory: the baseline's end in the
                # change log is read while it is written.
                self.report.sync_state, _ = await asyncio.gather(
                    self.netbox.write_sync_state(
                        await sidecar,
                        reflection(self.tally, read_failures=self.report.read_failures),
                    ),
                    self.save_baseline(run),
                )

    def progress(self, done: int, total: int) -> None:
        phase = {"phase": "reading Proxmox"}
        self.emit({"event": "progress", "stage": "guests", "done": done, "total": total, **phase})

    async def save_baseline(self, run: StageRun) -> None:
        incremental = self.incremental
        if incremental is None:
            return
        self.report.run_mode = incremental.summary()
        # A run with failures leaves the previous baseline: the guests it could not sync
        # still differ from it, and what it wrote is in the change log after it.
        if self.tally.failed:
            return
        owned = run.owned.owned if run.owned is not None else []
        try:
            await incremental.save(
                run.cluster_id, run.prerequisites, run.device_ids, owned, run.records_digest
            )
        except (NetBoxError, TransportError, ChangeLogUnreadable) as exc:
            # The run is done; only the next run's shortcut is lost.
            self.report.warnings.append(f"no baseline for the next run: {exc}")

    async def claim(
        self, identity: ClusterIdentity, cluster_type_id: int
    ) -> cluster_stage.ClusterOutcome:
        self.emit({"event": "stage", "stage": "cluster", "state": "started", "total": 1})
        try:
            outcome = await cluster_stage.claim(
                self.netbox, self.endpoint, identity, cluster_type_id
            )
        except ClaimRefused as exc:
            self.tally.fail(cluster_stage.OBJECT_TYPE, identity.name, str(exc))
            raise SyncFailed(f"claim refused: {exc}") from exc
        finally:
            self.emit({"event": "stage", "stage": "cluster", "state": "finished", "done": 1})
        self.report.cluster = {
            "id": outcome.cluster_id,
            "name": identity.name,
            "mode": identity.mode,
            "tracking_id": outcome.claim.tracking_id,
            "claim_status": outcome.claim.http_status,
            "created": outcome.claim.created,
            "changed": outcome.claim.changed,
            "metadata_changed": outcome.metadata_changed,
        }
        return outcome

    async def refresh_tracking(
        self, identity: ClusterIdentity, outcome: cluster_stage.ClusterOutcome
    ) -> None:
        """The tracking record's refresh; then the cluster is counted."""
        tracking_changed = await cluster_stage.refresh_tracking(
            self.netbox, outcome.claim, identity
        )
        changed = outcome.metadata_changed or tracking_changed
        self.report.cluster["metadata_changed"] = changed
        cluster_stage.count(self.tally, outcome.claim, changed)
