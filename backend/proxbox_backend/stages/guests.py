"""Stage `guests`: QEMU VMs and LXC containers → NetBox virtual machines.

A guest's identity is its source key, stored in the `proxbox_source` custom field:
`<cluster identity>/<qemu|lxc>/<vmid>[#<creation id>]`.  The cluster part is the
claimed native cluster (stable across renames, distinct for clusters that share a
name), the creation id distinguishes a new guest that reuses a destroyed guest's
VMID.  Virtual machines without a key under this cluster are not ours: never touched.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from proxbox_backend.domain import tags
from proxbox_backend.domain.counters import Tally
from proxbox_backend.domain.models import Guest, Platform
from proxbox_backend.domain.plan import Create, Delete, Plan, Update, diff
from proxbox_backend.domain.tags import TagDefinition
from proxbox_backend.gateways.netbox import SOURCE_FIELD, VIRTUAL_MACHINES, NetBoxGateway, nested_id
from proxbox_backend.stages.apply import restricted, write_plan
from proxbox_backend.stages.primary_ips import VmOutcomes, current_primaries
from proxbox_backend.stages.vm_rows import SETTLED, VmRowWrites

OBJECT_TYPE = "virtualization.virtualmachine"

OFFLINE, DELETE, KEEP = "offline", "delete", "keep"
DISAPPEARED_POLICIES = (OFFLINE, DELETE, KEEP)
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
            changes.update(platform_change(guest, vm, placement))
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
            payload.update(platform_change(guest, None, placement))
            result.creates.append(Create(key, guest.label, payload))
            continue
        changes = tags.with_sync_tags(diff(fields, _current(existing)), existing, wanted_tags)
        changes.update(platform_change(guest, existing, placement))
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
        if placement.disappeared == OFFLINE:
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


def gone_name(name: str, key: str) -> str:
    kind, vmid = parse_source_key(key.split("/", 1)[0], key) or ("guest", 0)
    suffix = f" (gone {kind}/{vmid})"
    return name[: 64 - len(suffix)] + suffix


def preexisting(owned: list[tuple[int, Guest]], existing_vm_ids) -> list[int]:
    """The owned VMs that existed before this run: only they can already have disks and
    addresses in NetBox."""
    return [vm_id for vm_id, _ in owned if vm_id in existing_vm_ids]


async def apply(
    netbox: NetBoxGateway,
    guests: list[Guest],
    placement: GuestPlacement,
    tally: Tally,
    unreadable: set[tuple[str, int]] = frozenset(),
    planned: Callable[[dict[str, int], frozenset[int]], None] | None = None,
) -> tuple[dict[str, int], VmOutcomes]:
    """(source key → VM id of every guest now in NetBox, what happened to the VMs).
    `planned` hears, before anything is written, which VMs the plan keeps for their
    guests (source key → VM id) and which VMs existed: the run starts the reads of
    their components then, so that those overlap the VMs' writes.

    A plan that creates and adopts no VM knows every id before it writes: its updates
    and deletes are then left in flight (`VmOutcomes.rows`), for the components' writes
    to go beside them (`stages.vm_rows` says which may); the caller awaits them."""
    current = await netbox.virtual_machines(placement.cluster_id)
    the_plan = await restricted(
        netbox.client, VIRTUAL_MACHINES, plan(guests, current, placement, unreadable)
    )
    wanted = {source_key(cluster_source(placement.cluster_id), g) for g in guests}
    existing = frozenset(vm["id"] for vm in current)
    kept = {**the_plan.unchanged, **{u.key: u.id for u in the_plan.updates}}
    if planned is not None:
        planned({key: vm_id for key, vm_id in kept.items() if key in wanted}, existing)
    writes = write_plan(netbox.client, VIRTUAL_MACHINES, the_plan, tally)
    if not the_plan.creates and not any(u.adopts for u in the_plan.updates):
        # What `write_plan` would answer: updated and unchanged VMs keep their ids.
        ids, rows = kept, VmRowWrites(writes)
    else:
        ids, rows = await writes, SETTLED
    outcomes = VmOutcomes(
        existing=existing,
        unchanged=frozenset(the_plan.unchanged.values()),
        primaries=current_primaries(current),
        rows=rows,
    )
    return {k: v for k, v in ids.items() if k in wanted}, outcomes
