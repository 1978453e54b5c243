"""Stage `guests`: QEMU VMs and LXC containers → NetBox virtual machines.

A guest's identity is its source key, stored in the `proxbox_source` custom field:
`<cluster identity>/<qemu|lxc>/<vmid>[#<creation id>]`.  The cluster part is the
claimed native cluster (stable across renames, distinct for clusters that share a
name), the creation id distinguishes a new guest that reuses a destroyed guest's
VMID.  Virtual machines without a key under this cluster are not ours: never touched.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime

from proxbox_backend.background import together
from proxbox_backend.domain import tags
from proxbox_backend.domain.assignment import AssignmentRule, first_match, placeable
from proxbox_backend.domain.counters import Tally
from proxbox_backend.domain.models import Guest, Platform
from proxbox_backend.domain.plan import Create, Delete, Plan, Update, diff
from proxbox_backend.domain.policy import OFF, OFFLINE_THEN_DELETE
from proxbox_backend.domain.tags import TagDefinition
from proxbox_backend.gateways.netbox import (
    GONE_FIELD,
    SOURCE_FIELD,
    VIRTUAL_MACHINES,
    NetBoxGateway,
    nested_id,
)
from proxbox_backend.pipeline import (
    CREATE,
    EVERY,
    Effect,
    Gate,
    Settle,
    Stage,
    nothing_to_settle,
)
from proxbox_backend.pipeline import DELETE as DELETE_ROW
from proxbox_backend.stages.apply import restricted, write_plan
from proxbox_backend.stages.context import StageRun
from proxbox_backend.stages.primary_ips import VmOutcomes, current_primaries

OBJECT_TYPE = "virtualization.virtualmachine"
TAG, PLATFORM = "extras.tag", "dcim.platform"

OFFLINE, DELETE, KEEP = "offline", "delete", "keep"
DISAPPEARED_POLICIES = (OFFLINE, DELETE, KEEP)
# With the policy's OFFLINE_THEN_DELETE the days are counted from the date the sync wrote
# into the VM's GONE_FIELD when it first found the guest gone.
# Templates (`template: 1`) are blueprints, not machines: skipped unless asked for, and
# then synced tagged `proxbox-template`.
SKIP_TEMPLATES, SYNC_TEMPLATES = "skip", "sync"
TEMPLATE_POLICIES = (SKIP_TEMPLATES, SYNC_TEMPLATES)

STATUS = {"running": "active", "paused": "paused", "stopped": "offline"}


def cluster_source(cluster_id: int) -> str:
    return f"cluster-{cluster_id}"


def source_key(prefix: str, guest: Guest) -> str:
    key = f"{prefix}/{guest.kind}/{guest.vmid}"
    return f"{key}#{guest.creation_id}" if guest.creation_id else key


def parse_source_key(prefix: str, value: str | None) -> tuple[str, int] | None:
    """(kind, vmid) of one of this cluster's keys; None for anything else."""
    if not value or not value.startswith(prefix + "/"):
        return None
    kind, _, rest = value[len(prefix) + 1 :].partition("/")
    vmid = rest.partition("#")[0]
    return (kind, int(vmid)) if vmid.isdigit() else None


@dataclass(frozen=True)
class GuestPlacement:
    cluster_id: int
    site_id: int | None
    tenant_id: int | None
    device_ids: dict[str, int]  # node name → device id
    disappeared: str = OFFLINE
    platforms: frozenset[str] = frozenset()  # slugs of the platforms NetBox has
    role_id: int | None = None  # the endpoint's default VM role: set when a VM is created
    sync_descriptions: bool = False  # the endpoint's opt-in: Proxmox notes → description
    adopt: bool = False  # the endpoint's opt-in: take over marked VMs (see `adoptable`)
    delete_after_days: int | None = None  # OFFLINE_THEN_DELETE's number of days
    today: date | None = None  # the run's date (UTC), for OFFLINE_THEN_DELETE
    # The endpoint's assignment rules (`domain.assignment`), their sites already checked
    # against the cluster's (`placeable`).
    rules: tuple[AssignmentRule, ...] = ()


def gone_since(vm: dict) -> date | None:
    """The date the sync first found the VM's guest gone (OFFLINE_THEN_DELETE)."""
    value = (vm.get("custom_fields") or {}).get(GONE_FIELD)
    try:
        return date.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None  # an operator's unreadable edit: counted from today again


def expired(vm: dict, placement: GuestPlacement) -> date | None:
    """When an OFFLINE_THEN_DELETE VM has been gone long enough: the date it went."""
    since = gone_since(vm)
    if since is None or placement.today is None or placement.delete_after_days is None:
        return None
    return since if (placement.today - since).days >= placement.delete_after_days else None


def _vcpus(value) -> float | None:
    return None if value is None else float(value)


def _current(vm: dict) -> dict:
    status = vm.get("status")
    return {
        "name": vm.get("name"),
        "status": status.get("value") if isinstance(status, dict) else status,
        "vcpus": _vcpus(vm.get("vcpus")),
        "memory": vm.get("memory"),
        "cluster": nested_id(vm.get("cluster")),
        "device": nested_id(vm.get("device")),
        "site": nested_id(vm.get("site")),
        "tenant": nested_id(vm.get("tenant")),
        "description": vm.get("description") or "",
        "comments": vm.get("comments") or "",
    }


def desired(guest: Guest, placement: GuestPlacement) -> dict:
    fields = {
        "name": guest.name,
        "status": STATUS.get(guest.status, "offline"),
        "vcpus": guest.vcpus,
        "memory": guest.memory_mb,
        "cluster": placement.cluster_id,
        "site": placement.site_id,
        "tenant": placement.tenant_id,
    }
    rule = first_match(placement.rules, guest)
    if rule is not None:
        # The rule's tenant and site replace the endpoint's; its role and platform are
        # `assigned` (they are no fields the endpoint sets on every run).
        fields.update({k: v for k, v in rule.assignments().items() if k in ("site", "tenant")})
    # Without its node's device (the device failed), leave the host field as it is.
    if guest.node in placement.device_ids:
        fields["device"] = placement.device_ids[guest.node]
    if placement.sync_descriptions:
        fields.update(description_fields(guest.description))
    return fields


def description_fields(notes: str) -> dict:
    """Proxmox notes → the VM's description (its first line, as NetBox's 200 characters
    allow) and comments (the whole Markdown text)."""
    first = next((line.strip() for line in notes.splitlines() if line.strip()), "")
    return {"description": first[:200], "comments": notes}


def syncable(guests: list[Guest], templates: str = SKIP_TEMPLATES) -> list[Guest]:
    """The guests synced as VMs: templates only when the policy asks for them.  A skipped
    template that was synced before counts as gone (the disappeared-guest policy)."""
    return [g for g in guests if templates == SYNC_TEMPLATES or not g.template]


def guest_tag_definitions(
    guests: list[Guest], colors: dict[str, str] | None = None
) -> list[TagDefinition]:
    """The NetBox tags the guests need (their Proxmox tags, the template mark), each once;
    a tag's colour comes from the cluster's tag style when it sets one (on creation)."""
    names = dict.fromkeys(name for guest in guests for name in guest.tags)
    colors = colors or {}
    definitions = {
        tag.slug: tag for tag in (tags.guest_tag(name, colors.get(name)) for name in names)
    }
    if any(g.template for g in guests):
        definitions[tags.TEMPLATE.slug] = tags.TEMPLATE
    return list(definitions.values())


def platform_change(guest: Guest, vm: dict | None, placement: GuestPlacement) -> dict:
    """The VM's `platform` when it should change: the agent's answer always wins; the
    config's `ostype` hint only fills an empty platform (so a stopped guest, or an
    operator's more precise choice, keeps what it has)."""
    platform = guest.platform
    if platform is None or platform.slug not in placement.platforms:
        return {}
    current = (vm or {}).get("platform")
    current = current.get("slug") if isinstance(current, dict) else None
    if current == platform.slug or (current is not None and not guest.platform_reported):
        return {}
    return {"platform": {"slug": platform.slug}}


def assigned(guest: Guest, vm: dict | None, placement: GuestPlacement) -> dict:
    """The VM's role and platform from the rule that matches the guest, where they
    differ; they replace the endpoint's default role and the guest's own platform."""
    rule = first_match(placement.rules, guest)
    if rule is None:
        return {}
    wanted = {k: v for k, v in rule.assignments().items() if k in ("role", "platform")}
    return {k: v for k, v in wanted.items() if nested_id((vm or {}).get(k)) != v}


def platform_and_role(guest: Guest, vm: dict | None, placement: GuestPlacement) -> dict:
    """The VM's platform (and role) changes: a rule's, else the guest's platform."""
    changes = assigned(guest, vm, placement)
    rule = first_match(placement.rules, guest)
    if rule is None or rule.platform is None:
        changes.update(platform_change(guest, vm, placement))
    return changes


def guest_platforms(guests: list[Guest]) -> list[Platform]:
    """The platforms the guests name, each once."""
    return list({g.platform.slug: g.platform for g in guests if g.platform}.values())


def sync_tags(guest: Guest) -> set[str]:
    """The sync's tags on a guest's VM: `proxbox` and the guest's own Proxmox tags."""
    wanted = {tags.PROXBOX.slug, *(tags.guest_tag(name).slug for name in guest.tags)}
    return wanted | {tags.TEMPLATE.slug} if guest.template else wanted


def adoptable(current: list[dict], placement: GuestPlacement) -> dict[str, dict]:
    """Lower-cased name → the VM a guest of that name may take over: only with adoption
    switched on, only VMs in the endpoint's own cluster that no sync manages (no source
    key) and that an operator marked `proxbox-adopt`. A name alone never adopts."""
    if not placement.adopt:
        return {}
    found: dict[str, dict] = {}
    for vm in current:
        if nested_id(vm.get("cluster")) != placement.cluster_id:
            continue
        if (vm.get("custom_fields") or {}).get(SOURCE_FIELD):
            continue
        if tags.ADOPT.slug not in tags.tag_slugs(vm) or tags.PROXBOX.slug in tags.tag_slugs(vm):
            continue
        found.setdefault((vm.get("name") or "").lower(), vm)
    return found


def keyed(current: list[dict], placement: GuestPlacement) -> tuple[dict, dict]:
    """(source key → VM the sync manages, source key → VM an operator marked for adoption
    by writing this cluster's key into its source field).  With adoption on, a key on a
    VM without the `proxbox` tag is such a marker; a key under another cluster is neither."""
    prefix = cluster_source(placement.cluster_id)
    ours: dict[str, dict] = {}
    marked: dict[str, dict] = {}
    for vm in current:
        key = (vm.get("custom_fields") or {}).get(SOURCE_FIELD)
        if parse_source_key(prefix, key) is None:
            continue
        if placement.adopt and tags.PROXBOX.slug not in tags.tag_slugs(vm):
            marked.setdefault(key, vm)
        else:
            ours.setdefault(key, vm)
    return ours, marked


def keyed_mark(marked: dict[str, dict], key: str) -> dict | None:
    """The VM marked with `key`, or with it short of the creation id (an operator rarely
    knows it); a different creation id names another guest that had this VMID."""
    return marked.pop(key, None) or marked.pop(key.partition("#")[0], None)


def plan(
    guests: list[Guest],
    current: list[dict],
    placement: GuestPlacement,
    unreadable: set[tuple[str, int]] = frozenset(),
) -> Plan:
    prefix = cluster_source(placement.cluster_id)
    result = Plan(OBJECT_TYPE)
    ours, keyed_marks = keyed(current, placement)
    marked = adoptable(current, placement)
    wanted = set()
    for guest in guests:
        key = source_key(prefix, guest)
        wanted.add(key)
        fields = desired(guest, placement)
        existing = ours.get(key)
        wanted_tags = sync_tags(guest)
        vm = keyed_mark(keyed_marks, key) if existing is None else None
        if vm is None and existing is None and guest.name.lower() in marked:
            vm = marked.pop(guest.name.lower())
        if vm is not None:
            # Adopted: the source key and `proxbox` tag make it ours, `proxbox-adopt` goes;
            # its fields follow Proxmox like any synced VM's (protected fields stay).
            changes = {**diff(fields, _current(vm)), "custom_fields": {SOURCE_FIELD: key}}
            changes = tags.with_sync_tags(changes, vm, wanted_tags)
            changes.update(platform_and_role(guest, vm, placement))
            result.updates.append(
                Update(key, f"{guest.label} (adopted)", vm["id"], changes, adopts=True)
            )
            continue
        if existing is None:
            payload = {**fields, "disk": guest.disk_mb, "custom_fields": {SOURCE_FIELD: key}}
            if placement.role_id is not None:
                # A default: an operator's later choice of role is never undone.
                payload["role"] = placement.role_id
            payload = tags.with_sync_tags(payload, None, wanted_tags)
            payload.update(platform_and_role(guest, None, placement))
            result.creates.append(Create(key, guest.label, payload))
            continue
        changes = tags.with_sync_tags(diff(fields, _current(existing)), existing, wanted_tags)
        changes.update(platform_and_role(guest, existing, placement))
        if gone_since(existing) is not None:
            changes["custom_fields"] = {GONE_FIELD: None}  # its guest is back
        if changes:
            result.updates.append(Update(key, guest.label, existing["id"], changes))
        else:
            result.unchanged[key] = existing["id"]
    wanted_names = {g.name.lower() for g in guests}
    for key, vm in ours.items():
        if key in wanted or parse_source_key(prefix, key) in unreadable:
            continue
        label = f"{vm.get('name')} ({key}, gone from Proxmox)"
        if placement.disappeared == DELETE:
            result.deletes.append(Delete(key, label, vm["id"]))
            continue
        changes = {}
        if placement.disappeared == OFFLINE_THEN_DELETE:
            if since := expired(vm, placement):
                result.deletes.append(Delete(key, f"{label}, since {since}", vm["id"]))
                continue
            if gone_since(vm) is None and placement.today is not None:
                changes["custom_fields"] = {GONE_FIELD: placement.today.isoformat()}
        if placement.disappeared in (OFFLINE, OFFLINE_THEN_DELETE):
            if _current(vm)["status"] != "offline":
                changes["status"] = "offline"
            # NetBox names are unique per cluster: a kept record steps aside for the new
            # guest that took its name (typically a re-created guest reusing its VMID).
            if (vm.get("name") or "").lower() in wanted_names:
                changes["name"] = gone_name(vm["name"], key)
        if changes:
            result.updates.append(Update(key, label, vm["id"], changes))
        else:
            result.unchanged[key] = vm["id"]
    return result


def run_date() -> date:
    return datetime.now(UTC).date()


def disappeared_context(policy, settings) -> str:
    """The disappeared-guest setting as an incremental run's context: with
    OFFLINE_THEN_DELETE it holds the days and today's date, so the first run of each day
    is a full one and finds the VMs whose time is up, though Proxmox did not change."""
    disappeared = policy.removed_guests or settings.disappeared
    if disappeared != OFFLINE_THEN_DELETE:
        return disappeared
    return f"{disappeared}:{policy.removed_guests_days}:{run_date().isoformat()}"


def gone_name(name: str, key: str) -> str:
    kind, vmid = parse_source_key(key.split("/", 1)[0], key) or ("guest", 0)
    suffix = f" (gone {kind}/{vmid})"
    return name[: 64 - len(suffix)] + suffix


def preexisting(owned: list[tuple[int, Guest]], existing_vm_ids) -> list[int]:
    """The owned VMs that existed before this run: only they can already have disks and
    addresses in NetBox."""
    return [vm_id for vm_id, _ in owned if vm_id in existing_vm_ids]


@dataclass(frozen=True)
class Selected:
    """The guests this run syncs, and those whose VMs stay as they are (unreadable,
    excluded, or unchanged in an incremental run: never "gone")."""

    guests: list[Guest]
    unreadable: set[tuple[str, int]]


@dataclass(frozen=True)
class Kept:
    """Known once the VMs are planned: the VMs that existed and stay their guests' (only
    they can have components in NetBox yet), and those guests."""

    preexisting: list[int]
    guests: list[Guest]


@dataclass(frozen=True)
class Owned:
    """The guests the cluster owns (VM id, guest) once their VMs exist, and what the
    guests stage did to the VMs."""

    owned: list[tuple[int, Guest]]
    outcomes: VmOutcomes

    @property
    def existing(self) -> frozenset[int]:
        return self.outcomes.existing


def owned_by(prefix: str, guests: list[Guest], vm_ids: dict[str, int]) -> list[tuple[int, Guest]]:
    return [(vm_ids[key], g) for g in guests if (key := source_key(prefix, g)) in vm_ids]


async def apply(
    netbox: NetBoxGateway,
    guests: list[Guest],
    placement: GuestPlacement,
    tally: Tally,
    unreadable: set[tuple[str, int]] = frozenset(),
    *,
    current: list[dict] | None = None,
    settle: Settle = nothing_to_settle,
    planned: Callable[[Kept], None] = lambda _kept: None,
    in_flight: Callable[[Awaitable], None] | None = None,
) -> tuple[dict[str, int], VmOutcomes]:
    """(source key → VM id of every guest now in NetBox, what happened to the VMs).
    `planned` hears, before anything is written, which VMs stay their guests'.

    A plan that creates and adopts no VM knows every id before it writes: with
    `in_flight`, its updates and deletes are then handed to it instead of awaited, so
    that the components' writes that do not conflict with them go beside them."""
    if current is None:
        current = await netbox.virtual_machines(placement.cluster_id)
    the_plan = await restricted(
        netbox.client, VIRTUAL_MACHINES, plan(guests, current, placement, unreadable)
    )
    if any((u.changes.get("custom_fields") or {}).get(GONE_FIELD) for u in the_plan.updates):
        await netbox.ensure_gone_field(tally)
    prefix = cluster_source(placement.cluster_id)
    wanted = {source_key(prefix, g) for g in guests}
    existing = frozenset(vm["id"] for vm in current)
    kept = {**the_plan.unchanged, **{u.key: u.id for u in the_plan.updates}}
    staying = owned_by(prefix, guests, {k: v for k, v in kept.items() if k in wanted})
    planned(Kept(preexisting(staying, existing), [g for _, g in staying]))
    await settle(the_plan)
    writes = write_plan(netbox.client, VIRTUAL_MACHINES, the_plan, tally)
    if (
        in_flight is not None
        and not the_plan.creates
        and not any(u.adopts for u in the_plan.updates)
    ):
        # What `write_plan` would answer: updated and unchanged VMs keep their ids.
        ids = kept
        in_flight(writes)
    else:
        ids = await writes
    outcomes = VmOutcomes(
        existing=existing,
        unchanged=frozenset(the_plan.unchanged.values()),
        primaries=current_primaries(current),
    )
    return {k: v for k, v in ids.items() if k in wanted}, outcomes


# -- the stages ----------------------------------------------------------------------------


async def select(run: StageRun, gate: Gate) -> dict:
    """The guests an incremental run syncs (`Incremental.decide`), once the nodes' devices
    are known; the gateway then reads only their VMs."""
    selected = run.incremental.decide(
        run.nodes_digest,
        gate.take("nodes.devices"),
        run.guests,
        run.unreadable,
        run.inventory.node_networks,
    )
    # The guests left out are unchanged: like unreadable ones, never "gone".
    kept = {(g.kind, g.vmid) for g in run.guests} - {(g.kind, g.vmid) for g in selected}
    return {"guests.selected": Selected(selected, run.unreadable | kept), "guests.scope": None}


SELECTION = Stage(
    "guest selection",
    select,
    starts_with=("inventory",),
    takes=("nodes.devices",),
    gives=("guests.selected", "guests.scope"),
    # A full run syncs every guest; one that cannot turn out incremental reads all VMs.
    left_out=lambda run: (
        {"guests.selected": Selected(run.guests, run.unreadable), "guests.scope": None}
        if run.incremental is None
        else None
    ),
    known=lambda run: (
        {"guests.scope": None} if run.incremental is None or not run.incremental.may_skip() else {}
    ),
)


async def ensure_labels(run: StageRun, gate: Gate) -> dict:
    """The guests' Proxmox tags as NetBox tags, and their platforms."""
    guests = gate.take("guests.selected").guests
    definitions = guest_tag_definitions(guests, run.inventory.tag_colors)
    _, platforms = await together(
        run.netbox.ensure_tags(definitions if run.policy.mode(TAG) != OFF else [], run.tally),
        run.netbox.ensure_platforms(guest_platforms(guests), run.tally),
    )
    return {"guests.platforms": frozenset(platforms)}


LABELS = Stage(
    "guest tags",
    ensure_labels,
    takes=("guests.selected",),
    gives=("guests.platforms",),
    reads=frozenset({TAG, PLATFORM}),
    writes={TAG: frozenset({CREATE}), PLATFORM: frozenset({CREATE})},
)


async def read_vms(run: StageRun, gate: Gate) -> list[dict]:
    return await run.netbox.virtual_machines(run.cluster_id)


async def sync_vms(run: StageRun, gate: Gate) -> dict:
    selected = gate.take("guests.selected")
    endpoint, policy = run.endpoint, run.policy
    gate.started(len(selected.guests))
    rules, unplaceable = placeable(endpoint.assignment_rules, endpoint.site_id)
    run.report.warnings.extend(unplaceable)
    placement = GuestPlacement(
        run.cluster_id,
        endpoint.site_id,
        endpoint.tenant_id,
        gate.take("nodes.devices"),
        policy.removed_guests or run.settings.disappeared,
        gate.take("guests.platforms"),
        role_id=endpoint.vm_role_id,
        sync_descriptions=endpoint.sync_descriptions,
        adopt=policy.adopt_existing,
        delete_after_days=policy.removed_guests_days,
        today=run_date(),
        rules=rules,
    )
    left: list[Awaitable] = []
    vm_ids, outcomes = await apply(
        run.netbox,
        selected.guests,
        placement,
        run.tally,
        selected.unreadable,
        current=gate.current,
        settle=gate.settle,
        planned=lambda kept: gate.give("guests.kept", kept),
        in_flight=left.append,
    )

    async def written() -> None:
        for writes in left:
            await writes
        # A preview names the rule behind each VM's assigned fields.
        prefix = cluster_source(run.cluster_id)
        for guest in selected.guests:
            rule = first_match(placement.rules, guest)
            vm_id = vm_ids.get(source_key(prefix, guest))
            if rule is not None and vm_id is not None:
                run.netbox.explain(OBJECT_TYPE, vm_id, set(rule.assignments()), rule.label)
        gate.finished(len(selected.guests))

    gate.in_flight(written())
    owned = owned_by(cluster_source(run.cluster_id), selected.guests, vm_ids)
    run.owned, run.device_ids = Owned(owned, outcomes), placement.device_ids
    return {"guests.owned": run.owned}


STAGE = Stage(
    "guests",
    sync_vms,
    read=read_vms,
    starts_with=("guests.scope",),
    takes=("guests.selected", "nodes.devices", "guests.platforms"),
    gives=("guests.kept", "guests.owned"),
    reads=frozenset({OBJECT_TYPE}),
    # The OFFLINE_THEN_DELETE date's custom field, created the first time a VM needs it.
    writes={OBJECT_TYPE: EVERY, "extras.customfield": frozenset({CREATE})},
    effects=(
        Effect(
            OBJECT_TYPE,
            frozenset({CREATE, DELETE_ROW}),
            "virtualization.virtualmachinetype",
            whole_row=False,
            why="a VM type counts its VMs",
        ),
    ),
    events="guests",
)
