"""The application service: one sync run of one endpoint, stage by stage.

Adapters (CLI, HTTP service) call `SyncService.run` and listen to its events;
the stages plan against NetBox's current state and apply in bulk.  A failing
object is counted and reported, never fatal; a failing claim stops the run
before anything else is written, because nothing can be attached to a cluster
this endpoint does not own.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from proxbox_backend.background import in_background, together
from proxbox_backend.baselines import BaselineStore
from proxbox_backend.clients.http import TransportError
from proxbox_backend.clients.netbox import NetBoxClient, NetBoxError
from proxbox_backend.clients.proxmox import ProxmoxClient, ProxmoxCredentials, ProxmoxError
from proxbox_backend.config import Settings
from proxbox_backend.domain.counters import Tally
from proxbox_backend.domain.endpoint import Endpoint
from proxbox_backend.domain.models import ClusterIdentity, Guest, ProxmoxInventory, ProxmoxNode
from proxbox_backend.domain.policy import ACTIVE, OFF, PolicyError, Target
from proxbox_backend.domain.preview import PlanRecorder
from proxbox_backend.domain.records import Records
from proxbox_backend.gateways import proxmox_records
from proxbox_backend.gateways.netbox import (
    ChangeLogUnreadable,
    ClaimRefused,
    CredentialsWithheld,
    EndpointNotFound,
    NetBoxGateway,
    Prerequisites,
)
from proxbox_backend.gateways.preview import PreviewNetBoxClient, PreviewNetBoxGateway
from proxbox_backend.gateways.proxmox import ProxmoxGateway
from proxbox_backend.incremental import (
    Incremental,
    context_digest,
    node_digest,
    records_digest,
)
from proxbox_backend.secrets import scrub
from proxbox_backend.stages import cluster as cluster_stage
from proxbox_backend.stages import disks as disks_stage
from proxbox_backend.stages import guests as guests_stage
from proxbox_backend.stages import interfaces as interfaces_stage
from proxbox_backend.stages import ips as ips_stage
from proxbox_backend.stages import node_addresses as node_addresses_stage
from proxbox_backend.stages import node_interfaces as node_interfaces_stage
from proxbox_backend.stages import nodes as nodes_stage
from proxbox_backend.stages import primary_ips as primary_ips_stage
from proxbox_backend.stages import records as records_stage
from proxbox_backend.stages import vlans as vlans_stage

log = logging.getLogger("proxbox_backend.sync")

Emit = Callable[[dict], None]


@dataclass
class RunReport:
    endpoint: dict = field(default_factory=dict)
    cluster: dict = field(default_factory=dict)
    tally: Tally = field(default_factory=Tally)
    warnings: list[str] = field(default_factory=list)
    # Proxmox reads that failed after retries: what they would have told is missing, so
    # the run is degraded (its sidecar says so) even when every write succeeded.
    read_failures: list[str] = field(default_factory=list)
    error: str | None = None  # a fatal error: the run stopped here
    netbox_requests: dict = field(default_factory=dict)
    proxmox_requests: dict = field(default_factory=dict)
    started_at: str = ""
    duration_s: float = 0.0
    sync_state: str = ""
    # A dry run: nothing was written; `plan` says what the run would write.
    dry_run: bool = False
    plan: PlanRecorder | None = None
    # Full or incremental, and why (`proxbox_backend.incremental`).
    run_mode: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None and self.tally.failed == 0 and not self.read_failures

    @property
    def status(self) -> str:
        if self.error is not None:
            return "failed"
        done = "previewed" if self.dry_run else "completed"
        return done if self.tally.failed == 0 and not self.read_failures else f"{done}_with_errors"

    def as_dict(self) -> dict:
        """What adapters show or send: messages quoting remote answers are scrubbed."""
        tally = self.tally.as_dict()
        tally["failures"] = [
            {**failure, "reason": scrub(failure["reason"])} for failure in tally["failures"]
        ]
        return {
            "ok": self.ok,
            "status": self.status,
            "endpoint": self.endpoint,
            "cluster": self.cluster,
            **tally,
            "inventory_writes": self.tally.writes,
            "warnings": [scrub(warning) for warning in self.warnings],
            "read_failures": [scrub(failure) for failure in self.read_failures],
            "error": scrub(self.error) if self.error is not None else None,
            "netbox_requests": self.netbox_requests,
            "proxmox_requests": self.proxmox_requests,
            "started_at": self.started_at,
            "duration_s": round(self.duration_s, 3),
            "sync_state": self.sync_state,
            "run_mode": self.run_mode,
            "dry_run": self.dry_run,
            "plan": self.plan.as_dict() if self.plan is not None else None,
        }


class SyncFailed(Exception):
    """A problem that stops the run (no credentials, unreachable Proxmox, refused claim)."""


FATAL = (SyncFailed, NetBoxError, ProxmoxError, TransportError)
MAX_NAMED = 20  # failures a sidecar message names one by one; the Job's data has them all


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
                    f"{self._why_no_fallback()}"
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

    def _why_no_fallback(self) -> str:
        s = self.settings
        configured = s.proxmox_token or (s.proxmox_user and s.proxmox_password)
        if configured and not s.proxmox_url:
            return (
                "the backend's own PROXBOX_PROXMOX_TOKEN (or user/password) is sent only to "
                "PROXBOX_PROXMOX_URL, which is unset (never to an endpoint's host, which "
                "whoever may add endpoints chooses)"
            )
        return "PROXBOX_PROXMOX_TOKEN (or user/password) is unset"

    async def _read_history(self, incremental: Incremental | None) -> None:
        if incremental is not None:
            await incremental.read(self.settings.full_sync_interval)


class _Run:
    """One run's stages, sharing the endpoint, gateways, tally and event sink."""

    def __init__(
        self,
        settings: Settings,
        endpoint: Endpoint,
        netbox: NetBoxGateway,
        proxmox: ProxmoxGateway,
        report: RunReport,
        emit: Emit,
    ):
        self.settings, self.endpoint, self.netbox, self.proxmox = (
            settings,
            endpoint,
            netbox,
            proxmox,
        )
        self.report, self.tally, self.emit = report, report.tally, emit
        self.incremental: Incremental | None = None
        self.records_digest: str | None = None

    def stage(self, name: str, state: str, **extra) -> None:
        self.emit({"event": "stage", "stage": name, "state": state, **extra})

    def skipped(self, *names: str) -> None:
        """Stages with nothing to do this run still start and finish, for followers."""
        for name in names:
            self.stage(name, "started", total=0)
            self.stage(name, "finished", done=0)

    async def execute(self, history_read: asyncio.Future) -> None:
        """The run's stages; `history_read`: the incremental run's change-log read, started
        before Proxmox was asked anything."""
        identity, nodes = await self.proxmox.identity()
        if identity.mode != self.endpoint.mode:
            # Proxmox is the authority on what it is; the record is only a declaration.
            self.report.warnings.append(
                f"endpoint {self.endpoint.name!r} is declared {self.endpoint.mode} but Proxmox "
                f"reports {identity.mode} {identity.name!r}; syncing as {identity.mode}"
            )
        # Proxmox's guests are read while NetBox answers the prerequisites and the claim.
        async with in_background(self.read_proxmox(identity, nodes)) as proxmox_read:
            incremental = self.incremental
            # Before this run writes anything: where it starts in the change log.
            await history_read
            prerequisites = (
                incremental.prerequisites() if incremental is not None else None
            ) or await self.netbox.prerequisites(self.tally)
            claimed = await self.claim(identity, prerequisites.cluster_type_id)
            cluster_id = claimed.cluster_id
            if incremental is None or not incremental.may_skip():
                # Nothing before the guests stage writes VMs: their read overlaps Proxmox's.
                self.netbox.read_ahead("virtual_machines", cluster_id)
            # The tracking record's refresh and the sidecar's lookup need only the claim:
            # they run beside the stages instead of before and after them.
            async with (
                in_background(self.refresh_tracking(identity, claimed)) as tracking,
                in_background(self.netbox.sync_state_sidecar(cluster_id)) as sidecar,
            ):
                try:
                    owned, device_ids = await self.inventory(
                        proxmox_read, nodes, prerequisites, cluster_id
                    )
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
                finally:
                    await self.netbox.forget()
                # The sidecar is bookkeeping, not inventory: the baseline's end in the
                # change log is read while it is written.
                baseline = self.save_baseline(cluster_id, prerequisites, device_ids, owned)
                self.report.sync_state, _ = await asyncio.gather(
                    self.netbox.write_sync_state(
                        await sidecar,
                        reflection(self.tally, read_failures=self.report.read_failures),
                    ),
                    baseline,
                )

    async def save_baseline(self, cluster_id, prerequisites, device_ids, owned) -> None:
        incremental = self.incremental
        if incremental is None:
            return
        self.report.run_mode = incremental.summary()
        # A run with failures leaves the previous baseline: the guests it could not sync
        # still differ from it, and what it wrote is in the change log after it.
        if self.tally.failed:
            return
        try:
            await incremental.save(
                cluster_id, prerequisites, device_ids, owned, self.records_digest
            )
        except (NetBoxError, TransportError, ChangeLogUnreadable) as exc:
            # The run is done; only the next run's shortcut is lost.
            self.report.warnings.append(f"no baseline for the next run: {exc}")

    async def claim(
        self, identity: ClusterIdentity, cluster_type_id: int
    ) -> cluster_stage.ClusterOutcome:
        self.stage("cluster", "started", total=1)
        try:
            outcome = await cluster_stage.claim(
                self.netbox, self.endpoint, identity, cluster_type_id
            )
        except ClaimRefused as exc:
            self.tally.fail(cluster_stage.OBJECT_TYPE, identity.name, str(exc))
            raise SyncFailed(f"claim refused: {exc}") from exc
        finally:
            self.stage("cluster", "finished", done=1)
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

    async def read_proxmox(
        self, identity: ClusterIdentity, nodes: list[ProxmoxNode]
    ) -> ProxmoxInventory:
        def guest_progress(done: int, total: int) -> None:
            self.emit(
                {
                    "event": "progress",
                    "stage": "guests",
                    "done": done,
                    "total": total,
                    "phase": "reading Proxmox",
                }
            )

        return await self.proxmox.inventory(identity, nodes, guest_progress)

    async def inventory(
        self,
        proxmox_read: asyncio.Future[ProxmoxInventory],
        nodes: list[ProxmoxNode],
        prerequisites: Prerequisites,
        cluster_id: int,
    ) -> None:
        endpoint = self.endpoint
        inventory = await proxmox_read
        self.report.warnings.extend(inventory.warnings)
        self.report.read_failures.extend(inventory.read_failures)
        policy = endpoint.policy
        if policy.target is not None and policy.target.node is not None:
            policy = dataclasses.replace(
                policy, target=policy.target.with_inventory(inventory.guests)
            )
            ACTIVE.set(policy)  # the run's reset restores what was active before it
        templates = self.settings.templates
        if policy.sync_templates is not None:
            templates = (
                guests_stage.SYNC_TEMPLATES
                if policy.sync_templates
                else guests_stage.SKIP_TEMPLATES
            )
        # Excluded guests are left as they are in NetBox: like unreadable ones, never "gone".
        excluded = {(g.kind, g.vmid) for g in inventory.guests if policy.excludes(g)}
        unreadable = inventory.unreadable | excluded
        guests = [
            g
            for g in guests_stage.syncable(inventory.guests, templates)
            if (g.kind, g.vmid) not in excluded
        ]
        if self.incremental is not None:
            disappeared = policy.removed_guests or self.settings.disappeared
            self.incremental.check(
                context_digest(endpoint, cluster_id, disappeared, templates, inventory.tag_colors),
                cluster_id,
            )
        # The records' reads (a snapshot list per guest) overlap the stages before them.
        known = (
            self.incremental.snapshots_known(inventory.config_digests)
            if self.incremental is not None
            else {}
        )
        async with in_background(self.read_records(nodes, guests, known)) as records_read:
            return await self.stages(
                inventory,
                nodes,
                guests,
                unreadable,
                policy,
                prerequisites,
                cluster_id,
                records_read,
            )

    async def stages(
        self, inventory, nodes, guests, unreadable, policy, prerequisites, cluster_id, records_read
    ):
        """Every stage, in dependency order; the guests the cluster owns (NetBox id,
        guest) and the nodes' device ids."""
        endpoint, netbox, tally = self.endpoint, self.netbox, self.tally
        incremental = self.incremental
        nodes_digest = node_digest(nodes, inventory.node_networks)
        device_ids = incremental.unchanged_devices(nodes_digest) if incremental else None
        if device_ids is None:
            device_ids = await self.node_stages(inventory, nodes, policy, prerequisites, cluster_id)
        else:
            self.skipped("nodes", "node interfaces", "node addresses")
        policy = ACTIVE.get()  # a node target knows its device now

        if incremental is not None:
            synced = incremental.decide(nodes_digest, device_ids, guests, unreadable)
            # The guests left out are unchanged: like unreadable ones, never "gone".
            kept = {(g.kind, g.vmid) for g in guests} - {(g.kind, g.vmid) for g in synced}
            unreadable, guests = unreadable | kept, synced
        # The VMs are read (just theirs, in an incremental run) while tags and platforms
        # are ensured: neither writes VMs.
        netbox.read_ahead("virtual_machines", cluster_id)
        tag_definitions = guests_stage.guest_tag_definitions(guests, inventory.tag_colors)
        _, platforms = await together(
            netbox.ensure_tags(tag_definitions if policy.mode("extras.tag") != OFF else [], tally),
            netbox.ensure_platforms(guests_stage.guest_platforms(guests), tally),
        )

        self.stage("guests", "started", total=len(guests))
        guest_placement = guests_stage.GuestPlacement(
            cluster_id,
            endpoint.site_id,
            endpoint.tenant_id,
            device_ids,
            policy.removed_guests or self.settings.disappeared,
            frozenset(platforms),
            role_id=endpoint.vm_role_id,
            sync_descriptions=endpoint.sync_descriptions,
            adopt=policy.adopt_existing,
        )
        prefix = guests_stage.cluster_source(cluster_id)

        def owned_by(vm_ids: dict[str, int]) -> list[tuple[int, Guest]]:
            return [
                (vm_ids[key], g)
                for g in guests
                if (key := guests_stage.source_key(prefix, g)) in vm_ids
            ]

        def read_components_ahead(kept: dict[str, int], existing: frozenset[int]) -> None:
            # The VMs that existed and stay their guests': their interfaces, disks and
            # addresses, and the cluster's VLANs, are read while the VMs are written and
            # the VLANs synced.  Neither touches those: a deleted VM is no guest's, and an
            # interface the interface stage deletes takes its addresses with it, which the
            # address plan ignores (it weighs only the run's interfaces).
            staying = owned_by(kept)
            preexisting = guests_stage.preexisting(staying, existing)
            if preexisting:
                netbox.read_ahead("interfaces", cluster_id, preexisting)
                netbox.read_ahead("disks", preexisting)
                netbox.read_ahead("ip_addresses", preexisting)
            if vlans_stage.wanted_vids([g for _, g in staying]):
                netbox.read_ahead("vlan_group_id", vlans_stage.group_slug(cluster_id))
                netbox.read_ahead("vlans", vlans_stage.group_slug(cluster_id))

        vm_ids, vm_outcomes = await guests_stage.apply(
            netbox, guests, guest_placement, tally, unreadable, read_components_ahead
        )
        existing_vm_ids = vm_outcomes.existing
        owned = owned_by(vm_ids)

        async def guests_written() -> None:
            await vm_outcomes.rows.settled()
            self.stage("guests", "finished", done=len(guests))

        # Interfaces with their addresses, disks, and records need the VMs, not one
        # another: they are written at once (the NetBox client bounds what is in flight),
        # and beside the VMs' updates as far as `stages.vm_rows` allows.
        try:
            await together(
                guests_written(),
                self.vm_interfaces(owned, existing_vm_ids, vm_outcomes, cluster_id, policy),
                self.disks(owned, existing_vm_ids, vm_outcomes.rows),
                self.records(cluster_id, records_read, owned, device_ids),
            )
        finally:
            await vm_outcomes.rows.abandon()
        return owned, device_ids

    async def vm_interfaces(self, owned, existing_vm_ids, vm_outcomes, cluster_id, policy):
        """VLANs, the VMs' interfaces, their addresses and the VMs' primary addresses."""
        endpoint, netbox, tally = self.endpoint, self.netbox, self.tally
        vids = vlans_stage.wanted_vids([g for _, g in owned])
        self.stage("vlans", "started", total=len(vids))
        vlan_ids = await vlans_stage.apply(
            netbox, cluster_id, endpoint.name, [g for _, g in owned], tally
        )
        self.stage("vlans", "finished", done=len(vids))

        count = sum(len(g.nics) for _, g in owned)
        self.stage("interfaces", "started", total=count)
        interface_ids = await interfaces_stage.apply(
            netbox, cluster_id, owned, existing_vm_ids, tally, vlan_ids, vm_outcomes.rows
        )
        self.stage("interfaces", "finished", done=count)

        count = sum(len(g.addresses) for _, g in owned)
        self.stage("ips", "started", total=count)
        ip_ids, removed_ip_ids = await ips_stage.apply(
            netbox,
            owned,
            interface_ids,
            existing_vm_ids,
            tally,
            vrf_id=endpoint.vrf_id,
            adopt=policy.adopt_existing,
            vm_rows=vm_outcomes.rows,
        )
        await primary_ips_stage.apply(
            netbox, owned, interface_ids, ip_ids, removed_ip_ids, vm_outcomes, tally
        )
        self.stage("ips", "finished", done=count)

    async def disks(self, owned, existing_vm_ids, vm_rows) -> None:
        count = sum(len(g.disks) for _, g in owned)
        self.stage("disks", "started", total=count)
        await disks_stage.apply(self.netbox, owned, existing_vm_ids, self.tally, vm_rows)
        self.stage("disks", "finished", done=count)

    async def node_stages(self, inventory, nodes, policy, prerequisites, cluster_id):
        """Nodes, their interfaces and addresses; node name → device id."""
        endpoint, netbox, tally = self.endpoint, self.netbox, self.tally
        self.stage("nodes", "started", total=len(nodes))
        placement = nodes_stage.NodePlacement(
            cluster_id,
            endpoint.site_id,
            endpoint.tenant_id,
            prerequisites.device_role_id,
            prerequisites.device_type_id,
            adopt=policy.adopt_existing,
        )
        device_ids, device_outcomes = await nodes_stage.apply(netbox, nodes, placement, tally)
        self.stage("nodes", "finished", done=len(nodes))

        target = policy.target
        if target is not None and target.node is not None:
            policy = dataclasses.replace(policy, target=target.with_device(device_ids))
            ACTIVE.set(policy)
            target = policy.target
        # A node target refreshes that node's network; a guest target no node's.
        networks = {
            device_ids[name]: interfaces
            for name, interfaces in inventory.node_networks.items()
            if name in device_ids and (target is None or name == target.node)
        }
        count = sum(len(interfaces) for interfaces in networks.values())
        self.stage("node interfaces", "started", total=count)
        node_interface_ids = await node_interfaces_stage.apply(
            netbox, networks, set(networks), tally
        )
        self.stage("node interfaces", "finished", done=count)
        await self.node_addresses(nodes, device_ids, networks, node_interface_ids, device_outcomes)
        return device_ids

    async def node_addresses(self, nodes, device_ids, networks, interface_ids, outcomes) -> None:
        count = sum(len(i.addresses) for interfaces in networks.values() for i in interfaces)
        self.stage("node addresses", "started", total=count)
        cluster_ips = {device_ids[n.name]: n.ip for n in nodes if n.name in device_ids}
        await node_addresses_stage.apply(
            self.netbox,
            networks,
            cluster_ips,
            interface_ids,
            outcomes,
            self.tally,
            vrf_id=self.endpoint.vrf_id,
        )
        self.stage("node addresses", "finished", done=count)

    async def read_records(self, nodes, guests, known_snapshots) -> Records | None:
        """The cluster's records from Proxmox; None when the policy writes none (Proxmox
        is spared the reads, one per guest for snapshots).  A guest that does not end up
        owned has its snapshots read but linked to no VM, so they make no record; one in
        `known_snapshots` has them left unread, and its records as they are."""
        if ACTIVE.get().mode(records_stage.STORAGES.object_type) == OFF:
            return None
        return await proxmox_records.read(self.proxmox.client, nodes, guests, known_snapshots)

    async def records(self, cluster_id: int, records_read, owned, device_ids) -> None:
        """Storages, backups, jobs, snapshots, replication and HA of the cluster."""
        records = await records_read
        if records is None:
            self.skipped("records")
            return
        self.report.read_failures.extend(records.warnings)
        vms = {g.vmid: vm_id for vm_id, g in owned}
        if self.incremental is not None:
            vms = {**self.incremental.clean_vms(), **vms}
        links = records_stage.Links(device_ids, vms)
        if self.incremental is not None:
            # Only a run that keeps a baseline needs the records' digest.
            self.records_digest = records_digest(
                records, links, self.incremental.snapshot_digests(records)
            )
            if self.incremental.records_unchanged(self.records_digest):
                self.skipped("records")
                return
        self.stage("records", "started", total=len(records_stage.TYPES))
        await records_stage.apply(
            self.netbox,
            cluster_id,
            records,
            links,
            self.tally,
            first_sync=bool(self.report.cluster.get("created")),
        )
        self.stage("records", "finished", done=len(records_stage.TYPES))


def reflection(tally: Tally, error: str | None = None, read_failures: list[str] = ()) -> dict:
    """The sidecar's reflection metadata: when, how it went, what it changed.

    `failed`: the run stopped (`error`). `degraded`: it ran to its end, but Proxmox reads
    or NetBox writes failed; `errors` counts both, the message names them.
    """
    totals = {outcome: 0 for outcome in ("created", "updated", "deleted", "failed")}
    for counters in tally.counters.values():
        for outcome in totals:
            totals[outcome] += getattr(counters, outcome)
    errors = totals["failed"] + len(read_failures)
    lines = [error] if error else []
    if errors:
        lines.append(
            f"{len(read_failures)} Proxmox read(s) failed, {totals['failed']} NetBox write(s) failed"
        )
    lines += [f"read failed: {failure}" for failure in read_failures[:MAX_NAMED]]
    if len(read_failures) > MAX_NAMED:
        lines.append(f"… and {len(read_failures) - MAX_NAMED} more failed reads")
    lines += [f"{f.object_type} {f.label}: {f.reason}" for f in tally.failures[:MAX_NAMED]]
    if len(tally.failures) > MAX_NAMED:
        lines.append(f"… and {len(tally.failures) - MAX_NAMED} more failures")
    status = "failed" if error else "degraded" if errors else "succeeded"
    return {
        "last_sync": dt.datetime.now(dt.UTC).isoformat(),
        "status": status,
        "objects_created": totals["created"],
        "objects_updated": totals["updated"],
        "objects_deleted": totals["deleted"],
        "errors": errors,
        # Stored in NetBox (and its change log): scrubbed like everything the run shows.
        "message": scrub("\n".join(lines)),
    }
