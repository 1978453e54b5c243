"""NetBox gateway: the plugin's endpoint, credentials, claim and sidecar APIs, the
prerequisite objects created once, and the bulk reads the planners compare against."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import Any

from proxbox_backend.clients.http import TransportError
from proxbox_backend.clients.netbox import (
    NetBoxClient,
    NetBoxError,
    describe_error,
    response_body,
)
from proxbox_backend.clients.proxmox import ProxmoxCredentials
from proxbox_backend.domain import prefixes, sdn
from proxbox_backend.domain.assignment import AssignmentRule
from proxbox_backend.domain.counters import Tally
from proxbox_backend.domain.endpoint import Endpoint
from proxbox_backend.domain.models import Platform
from proxbox_backend.domain.tags import ADOPT as ADOPT_TAG
from proxbox_backend.domain.tags import PROXBOX as PROXBOX_TAG
from proxbox_backend.domain.tags import TagDefinition
from proxbox_backend.secrets import Secret

PLUGIN = "/plugins/proxbox"
ENDPOINTS = f"{PLUGIN}/endpoints/proxmox/"
SYNC_STATES = f"{PLUGIN}/cluster-sync-states/"
TRACKING = f"{PLUGIN}/clusters/"
ASSIGNMENT_RULES = f"{PLUGIN}/assignment-rules/"
ASSIGNMENT_RULE_VIEW = "netbox_proxbox.view_proxmoxassignmentrule"

CLUSTERS = "/virtualization/clusters/"
CLUSTER_TYPES = "/virtualization/cluster-types/"
VIRTUAL_MACHINES = "/virtualization/virtual-machines/"
VM_INTERFACES = "/virtualization/interfaces/"
DEVICE_INTERFACES = "/dcim/interfaces/"
VIRTUAL_DISKS = "/virtualization/virtual-disks/"
IP_ADDRESSES = "/ipam/ip-addresses/"
DEVICES = "/dcim/devices/"
DEVICE_ROLES = "/dcim/device-roles/"
DEVICE_TYPES = "/dcim/device-types/"
MANUFACTURERS = "/dcim/manufacturers/"
CUSTOM_FIELDS = "/extras/custom-fields/"
TAGS = "/extras/tags/"
PLATFORMS = "/dcim/platforms/"
VLANS = "/ipam/vlans/"
VLAN_GROUPS = "/ipam/vlan-groups/"
PREFIXES = "/ipam/prefixes/"
IP_RANGES = "/ipam/ip-ranges/"
MAC_ADDRESSES = "/dcim/mac-addresses/"
L2VPNS = "/vpn/l2vpns/"
L2VPN_TERMINATIONS = "/vpn/l2vpn-terminations/"
OBJECT_CHANGES = "/core/object-changes/"
OBJECT_TYPES = "/core/object-types/"
AUTHENTICATION_CHECK = "/authentication-check/"

SOURCE_FIELD = "proxbox_source"
SOURCE_FIELD_TYPES = ["dcim.device", "virtualization.virtualmachine"]
# The date a VM's guest was first found gone (the removed-guest policy "offline, then
# delete after N days" counts from it).
GONE_FIELD = "proxbox_gone_since"
# On a VM interface: its name inside the guest (`ens18` beside `net0`), and the node
# bridge (the node device's interface) it plugs into.
GUEST_INTERFACE_FIELD = "proxbox_guest_interface"
BRIDGE_FIELD = "proxbox_bridge"
VM_INTERFACE_TYPE = "virtualization.vminterface"
# On a node's device: its hardware as /nodes/{node}/status reports it (NodeFacts field →
# custom field name, type, label, description).
NODE_FACT_FIELDS = {
    "cpu_model": ("proxbox_cpu_model", "text", "CPU model", "The CPU model the node reports."),
    "cpu_sockets": ("proxbox_cpu_sockets", "integer", "CPU sockets", "Populated CPU sockets."),
    "cpu_cores": ("proxbox_cpu_cores", "integer", "CPU cores", "Physical cores, all sockets."),
    "cpu_threads": (
        "proxbox_cpu_threads",
        "integer",
        "CPU threads",
        "Logical CPUs (Proxmox's cpus): cores times threads per core.",
    ),
    "memory_mb": ("proxbox_memory_mb", "integer", "Memory (MB)", "Total memory in MiB."),
    "kernel": ("proxbox_kernel", "text", "Kernel", "The running kernel's release."),
    "pve_version": (
        "proxbox_pve_version",
        "text",
        "Proxmox VE version",
        "pve-manager/<version>/<build> as the node reports it.",
    ),
}
# The custom fields every run writes, ensured with the prerequisites (one read for all).
RUN_FIELDS = {
    SOURCE_FIELD: {
        "name": SOURCE_FIELD,
        "label": "Proxbox source",
        "type": "text",
        "object_types": SOURCE_FIELD_TYPES,
        "description": "Proxmox identity: <cluster>/<qemu|lxc>/<vmid>[#<creation id>]"
        " of a guest, <cluster>/node/<name> of a node. Written by the Proxbox sync,"
        " or by an operator to mark an object for adoption.",
        "ui_editable": "no",
        "filter_logic": "exact",
        "required": False,
    },
    GUEST_INTERFACE_FIELD: {
        "name": GUEST_INTERFACE_FIELD,
        "label": "Guest OS interface",
        "type": "text",
        "object_types": [VM_INTERFACE_TYPE],
        # NetBox's limit is 200 characters.
        "description": "The interface's name inside the guest (QEMU guest agent, matched by"
        " MAC; a container's name=). Written by the Proxbox sync.",
        "ui_editable": "no",
        "filter_logic": "exact",
        "required": False,
    },
    BRIDGE_FIELD: {
        "name": BRIDGE_FIELD,
        "label": "Proxmox bridge",
        "type": "object",
        "related_object_type": "dcim.interface",
        "object_types": [VM_INTERFACE_TYPE],
        "description": "The bridge of the guest's node (an interface of its device) this"
        " NIC plugs into, per its bridge=. Written by the Proxbox sync; follows migrations.",
        "ui_editable": "no",
        "required": False,
    },
    **{
        name: {
            "name": name,
            "label": label,
            "type": kind,
            "object_types": ["dcim.device"],
            "group_name": "Proxmox node",
            "description": f"{description} Written by the Proxbox sync"
            " from the node's /nodes/{node}/status.",
            "ui_editable": "no",
            "required": False,
            **({"filter_logic": "exact"} if kind == "text" else {}),
        }
        for name, kind, label, description in NODE_FACT_FIELDS.values()
    },
}

SDN_FIELD = {
    "name": sdn.KEY_FIELD,
    "label": "Proxmox SDN source",
    "type": "text",
    "object_types": [t for t in sdn.OBJECT_TYPES if t != sdn.TERMINATION],
    # NetBox's limit is 200 characters.
    "description": "Proxmox SDN identity: <cluster>/<zone|vnet|subnet|gateway|dhcp>/<id>."
    " Written by the Proxbox sync; an object whose SDN object is gone is deleted.",
    "ui_editable": "no",
    "filter_logic": "exact",
    "required": False,
}

PREFIX_FIELD = {
    "name": prefixes.KEY_FIELD,
    "label": "Proxbox guest network",
    "type": "text",
    "object_types": [prefixes.OBJECT_TYPE],
    # NetBox's limit is 200 characters.
    "description": "<cluster>/<network> of a prefix the Proxbox sync made for its guests'"
    " addresses; it removes the prefix once no address lives in it or another covers it.",
    "ui_editable": "no",
    "filter_logic": "exact",
    "required": False,
}
# What the guest-network planner compares, and what tells whose a prefix is.
PREFIX_FIELDS = "id,prefix,vrf,scope_type,scope_id,status,description,tags,custom_fields"

# Only the fields the planners compare: NetBox serializes far less per object.
VM_FIELDS = "id,name,status,vcpus,memory,disk,device,site,tenant,role,cluster,custom_fields,primary_ip4,primary_ip6,platform,tags,description,comments"
DEVICE_FIELDS = (
    "id,name,status,site,tenant,cluster,role,device_type,tags,custom_fields,primary_ip4,primary_ip6"
)
INTERFACE_FIELDS = (
    "id,name,enabled,description,virtual_machine,primary_mac_address,mode,untagged_vlan,"
    "tagged_vlans,tags,custom_fields"
)
DEVICE_INTERFACE_FIELDS = "id,name,type,enabled,mtu,description,device,parent,lag,bridge,tags"
DISK_FIELDS = "id,name,size,description,virtual_machine,tags"
IP_FIELDS = "id,address,status,vrf,dns_name,assigned_object_type,assigned_object_id,tags"
HYGIENE_FIELDS = "id,address,vrf,role,assigned_object_type,assigned_object_id,assigned_object"
MAC_HYGIENE_FIELDS = "id,mac_address,assigned_object_type,assigned_object_id,assigned_object"
CHANGE_FIELDS = (
    "id,time,action,changed_object_type,changed_object_id,prechange_data,postchange_data"
)
# A source key is ~40 characters: 40 of them keep a URL within gunicorn's request line.
SOURCE_KEYS_PER_READ = 40


class EndpointNotFound(LookupError):
    pass


class NoCredentials(Exception):
    """Neither the credentials API nor the backend's settings give usable credentials."""


class CredentialsWithheld(Exception):
    """NetBox answered the credentials API with 403: the token's user lacks the plugin's
    `reveal_credentials` action on the endpoint (a superuser flag does not grant it)."""

    def __init__(self, endpoint: Endpoint, detail: str):
        super().__init__(
            f"NetBox withheld the credentials of endpoint {endpoint.name!r} from this token "
            f"({detail or 'HTTP 403'}): give the token's user an ObjectPermission with the "
            "custom action 'reveal_credentials' on the endpoint (superusers need it too)"
        )


CHANGE_LOG_FORBIDDEN = "the NetBox token may not read the change log (core.objectchange view)"


class ChangeLogUnreadable(Exception):
    """The token may not read NetBox's change log: every run is a full one."""


@dataclass(frozen=True)
class Prerequisites:
    cluster_type_id: int
    device_role_id: int
    device_type_id: int


@dataclass(frozen=True)
class SyncStateSidecar:
    """Where a run is recorded: the sidecar's id, or why the run cannot be."""

    id: int | None
    problem: str = ""


@dataclass(frozen=True)
class ClaimResult:
    http_status: int
    cluster: dict
    tracking_id: int | None
    created: bool
    changed: bool

    @property
    def cluster_id(self) -> int:
        return self.cluster["id"]


class ClaimRefused(Exception):
    """The claim action said no (403 permission, 409 ownership/uniqueness, 400 input)."""

    def __init__(self, error: NetBoxError):
        self.error = error
        super().__init__(str(error))


def claim_should_retry(response) -> bool:
    """Only a race is worth repeating: an ownership or uniqueness verdict stands until an
    operator acts, so the run reports it at once."""
    if response.status_code in (429, 503):
        return True
    if response.status_code != 409:
        return False
    return isinstance(body := _body(response), dict) and body.get("code") == "retry"


class NetBoxGateway:
    def __init__(self, client: NetBoxClient):
        self.client = client
        # An incremental run's guests: the VMs (and their interfaces) read are theirs only.
        self.scope: GuestScope | None = None

    # -- the plugin --------------------------------------------------------------------

    def explain(self, object_type: str, obj_id: int, fields: set[str], why: str) -> None:
        """Why the run writes these fields of an object: a preview shows it, a run that
        writes has nothing to add to NetBox's own change log."""

    async def endpoint_exists(self, endpoint_id: int) -> bool:
        """Whether NetBox has the endpoint: one brief, filtered list page."""
        page = await self.client.get(ENDPOINTS, id=endpoint_id, brief=1, limit=1)
        return bool(page["count"])

    async def watched_endpoints(self) -> dict[int, int]:
        """Endpoint id → poll interval (s) of every enabled endpoint whose live sync is
        on; a plugin without the field watches none."""
        found = await self.client.list(
            ENDPOINTS, {"enabled": "true", "fields": "id,enabled,watch_interval"}
        )
        return {
            int(e["id"]): int(e["watch_interval"])
            for e in found
            if e.get("enabled", True) and e.get("watch_interval")
        }

    async def endpoint(self, ref: str | int) -> Endpoint:
        """The endpoint record with its assignment rules."""
        text = str(ref)
        if text.isdigit():
            # By id (every run the service or the watcher starts): the rules in the same
            # round trip, not one after the other.
            record, rules = await asyncio.gather(
                self.client.get(f"{ENDPOINTS}{int(text)}/"),
                self.assignment_rules(int(text)),
                return_exceptions=True,
            )
            if isinstance(record, NetBoxError) and record.status == 404:
                raise EndpointNotFound(f"no Proxmox endpoint with id {text}") from record
            for outcome in (record, rules):
                if isinstance(outcome, BaseException):
                    raise outcome
            return replace(Endpoint.from_api(record), assignment_rules=rules)
        else:
            found = await self.client.list(ENDPOINTS, {"name": text})
            if len(found) != 1:
                raise EndpointNotFound(f"no Proxmox endpoint named {text!r}")
            record = found[0]
        endpoint = Endpoint.from_api(record)
        return replace(endpoint, assignment_rules=await self.assignment_rules(endpoint.id))

    async def assignment_rules(self, endpoint_id: int) -> tuple[AssignmentRule, ...]:
        """The endpoint's assignment rules in order; none from a plugin without them."""
        try:
            found = await self.client.list(ASSIGNMENT_RULES, {"endpoint_id": endpoint_id})
        except NetBoxError as exc:
            if exc.status == 403:
                # Rules the backend cannot see would be silently ignored: say what to grant.
                raise NetBoxError(
                    403,
                    "GET",
                    ASSIGNMENT_RULES,
                    "the backend's NetBox user may not view assignment rules "
                    f"(grant {ASSIGNMENT_RULE_VIEW})",
                ) from exc
            if exc.status != 404:
                raise
            return ()
        rules = (AssignmentRule.from_api(entry) for entry in found)
        return tuple(sorted(rules, key=lambda rule: (rule.weight, rule.id)))

    async def credentials(self, endpoint: Endpoint) -> ProxmoxCredentials | None:
        """The endpoint's token from the backend-only credentials API; None where the
        plugin has no such API (the caller falls back). CredentialsWithheld when NetBox
        refuses it to this token, so the caller can say which permission is missing."""
        response = await self.client.request("GET", f"{ENDPOINTS}{endpoint.id}/credentials/")
        if response.status_code == 403:
            raise CredentialsWithheld(endpoint, describe_error(response_body(response)))
        if response.status_code in (404, 405):  # a plugin without the credentials API
            return None
        if not response.is_success:
            raise NetBoxError(response.status_code, "GET", "credentials", response.text[:200])
        data = response.json()
        if not data.get("token_id") or not data.get("token_secret"):
            return None
        return ProxmoxCredentials(data["token_id"], Secret(data["token_secret"]))

    async def proxmox_credentials(self, endpoint: Endpoint, settings) -> ProxmoxCredentials:
        """The endpoint's credentials from the plugin, else the backend's fallback
        (`Settings.fallback_credentials`); NoCredentials saying why there are none."""
        withheld = None
        try:
            try:
                credentials = await self.credentials(endpoint)
            except CredentialsWithheld as exc:
                credentials, withheld = None, exc
            credentials = credentials or settings.fallback_credentials(endpoint.token_id)
        except ValueError as exc:
            raise NoCredentials(
                f"unusable Proxmox credentials for endpoint {endpoint.name!r}: {exc}"
            ) from exc
        if credentials is None:
            reason = withheld or "the credentials API did not provide them"
            raise NoCredentials(
                f"no Proxmox credentials for endpoint {endpoint.name!r}: {reason}; "
                f"{settings.why_no_fallback()}"
            )
        return credentials

    async def claim(self, endpoint: Endpoint, body: dict) -> ClaimResult:
        response = await self.client.request(
            "POST",
            f"{ENDPOINTS}{endpoint.id}/sync-cluster/",
            json=body,
            should_retry=claim_should_retry,
        )
        data = response.json() if response.content else None
        if response.status_code not in (200, 201):
            raise ClaimRefused(NetBoxError(response.status_code, "POST", "sync-cluster", data))
        return ClaimResult(
            http_status=response.status_code,
            cluster=data["cluster"],
            tracking_id=data.get("proxmox_cluster"),
            created=bool(data.get("created")),
            changed=bool(data.get("changed")),
        )

    async def tracking_record(self, tracking_id: int) -> dict:
        return await self.client.get(f"{TRACKING}{tracking_id}/")

    async def update_tracking_record(self, tracking_id: int, changes: dict) -> dict:
        return await self.client.call("PATCH", f"{TRACKING}{tracking_id}/", json=changes)

    async def record_broken_off(self, endpoint: Endpoint, metadata: dict) -> str:
        """A run that broke off before its stages recorded it (no credentials, Proxmox
        unreachable at its first read, a refused claim): the native cluster the endpoint
        already owns must not keep showing the previous run's success."""
        if endpoint.netbox_cluster_id is None:
            return "not recorded: the endpoint owns no native cluster yet"
        try:
            sidecar = await self.sync_state_sidecar(endpoint.netbox_cluster_id)
            return await self.write_sync_state(sidecar, metadata)
        except (NetBoxError, TransportError) as write_failed:
            return f"not recorded: {write_failed}"

    async def sync_state_sidecar(self, cluster_id: int) -> SyncStateSidecar:
        """The cluster's typed sidecar (created by the claim), looked up while the run
        writes, so that recording the run at its end takes one request."""
        response = await self.client.request(
            "GET", SYNC_STATES, params={"cluster_id": cluster_id, "fields": "id"}
        )
        if response.status_code == 404:
            return SyncStateSidecar(None, "not recorded: this NetBox has no sync-state API")
        if not response.is_success:
            return SyncStateSidecar(
                None, f"not recorded: sidecar lookup answered HTTP {response.status_code}"
            )
        results = response.json().get("results", [])
        if not results:
            return SyncStateSidecar(None, "not recorded: the cluster has no sync-state sidecar")
        return SyncStateSidecar(results[0]["id"])

    async def record_live_run(self, endpoint_id: int, run: dict) -> str:
        """A run the watcher started, recorded as a sync Job of the endpoint (the plugin's
        `live-runs` action; idempotent per run); says what became of it."""
        response = await self.client.request(
            "POST", f"{ENDPOINTS}{endpoint_id}/live-runs/", json=run
        )
        if response.status_code in (200, 201):
            return f"job {_body(response).get('id')}"
        return f"not recorded: HTTP {response.status_code}: {describe_error(_body(response))}"

    async def write_sync_state(self, sidecar: SyncStateSidecar, reflection: dict) -> str:
        """Record the run on the cluster's sidecar; say how it went.

        Reflection metadata only: the ownership link is the claim's business.
        """
        if sidecar.id is None:
            return sidecar.problem
        update = await self.client.request("PATCH", f"{SYNC_STATES}{sidecar.id}/", json=reflection)
        if not update.is_success:
            return f"not recorded: HTTP {update.status_code}: {describe_error(_body(update))}"
        return "recorded"

    # -- prerequisites, created once ------------------------------------------------------

    async def _get_or_create(
        self, path: str, lookup: dict, payload: dict, tally: Tally, object_type: str
    ) -> int:
        # Only its id: NetBox spends less on an answer it need not render in full.
        found = await self.client.list(path, {**lookup, "fields": "id"})
        if found:
            return found[0]["id"]
        return await self._create(path, lookup, payload, tally, object_type)

    async def _create(
        self, path: str, lookup: dict, payload: dict, tally: Tally, object_type: str
    ) -> int:
        """Create the object `lookup` did not find; its id."""
        result = await self.client.bulk_create(path, [payload])
        if 0 in result.succeeded:
            tally.add(object_type, "created")
            return result.succeeded[0]["id"]
        # Another backend may have created it between our read and our write.
        found = await self.client.list(path, {**lookup, "fields": "id"})
        if found:
            return found[0]["id"]
        raise NetBoxError(400, "POST", path, result.failed.get(0))

    async def prerequisites(self, tally: Tally) -> Prerequisites:
        await self.ensure_run_fields(tally)
        await self.ensure_tag(PROXBOX_TAG, tally)
        cluster_type = await self._get_or_create(
            CLUSTER_TYPES,
            {"slug": "proxmox-ve"},
            {"name": "Proxmox VE", "slug": "proxmox-ve"},
            tally,
            "virtualization.clustertype",
        )
        role = await self._get_or_create(
            DEVICE_ROLES,
            {"slug": "proxmox-ve-node"},
            {
                "name": "Proxmox VE node",
                "slug": "proxmox-ve-node",
                "color": "e57000",
                "vm_role": False,
            },
            tally,
            "dcim.devicerole",
        )
        manufacturer = await self._get_or_create(
            MANUFACTURERS,
            {"slug": "proxmox"},
            {"name": "Proxmox", "slug": "proxmox"},
            tally,
            "dcim.manufacturer",
        )
        device_type = await self._get_or_create(
            DEVICE_TYPES,
            {"slug": "proxmox-ve-node"},
            {
                "manufacturer": manufacturer,
                "model": "Proxmox VE node",
                "slug": "proxmox-ve-node",
                "u_height": 0,
            },
            tally,
            "dcim.devicetype",
        )
        return Prerequisites(cluster_type, role, device_type)

    async def ensure_run_fields(self, tally: Tally) -> None:
        """The custom fields every run writes (`RUN_FIELDS`): one read for all of them,
        one create of those missing."""
        found = {
            field["name"]: field
            for field in await self.client.list(CUSTOM_FIELDS, {"name": sorted(RUN_FIELDS)})
        }
        source = found.get(SOURCE_FIELD)
        # A source field made by an earlier version covers VMs only: a device's key is an
        # operator's adoption marker too.
        missing_types = set(SOURCE_FIELD_TYPES) - set((source or {}).get("object_types") or ())
        if source is not None and missing_types:
            types = sorted({*source["object_types"], *missing_types})
            result = await self.client.bulk_update(
                CUSTOM_FIELDS, [{"id": source["id"], "object_types": types}]
            )
            tally.add("extras.customfield", "updated", len(result.succeeded))
        missing = [name for name in RUN_FIELDS if name not in found]
        if not missing:
            return
        result = await self.client.bulk_create(CUSTOM_FIELDS, [RUN_FIELDS[n] for n in missing])
        tally.add("extras.customfield", "created", len(result.succeeded))
        if not result.failed:
            return
        # Another backend may have created them between our read and our write.
        failed = [missing[position] for position in result.failed]
        made = {f["name"] for f in await self.client.list(CUSTOM_FIELDS, {"name": failed})}
        for position, reason in result.failed.items():
            if missing[position] not in made:
                raise NetBoxError(400, "POST", CUSTOM_FIELDS, reason)

    async def ensure_gone_field(self, tally: Tally) -> None:
        await self._get_or_create(
            CUSTOM_FIELDS,
            {"name": GONE_FIELD},
            {
                "name": GONE_FIELD,
                "label": "Gone from Proxmox since",
                "type": "date",
                "object_types": ["virtualization.virtualmachine"],
                # NetBox's limit is 200 characters.
                "description": "When the Proxbox sync first found this VM's guest gone from"
                " Proxmox; 'offline, then delete after N days' deletes it N days later.",
                "ui_editable": "yes",
                "required": False,
            },
            tally,
            "extras.customfield",
        )

    async def ensure_tag(self, tag: TagDefinition, tally: Tally) -> int:
        """The tag's id, creating it the first time the sync needs it."""
        return await self._get_or_create(
            TAGS, {"slug": tag.slug}, tag.payload(), tally, "extras.tag"
        )

    async def ensure_tags(self, wanted: list[TagDefinition], tally: Tally) -> set[str]:
        """The slugs of `wanted` that exist now, creating the missing tags."""
        payloads = {tag.slug: tag.payload() for tag in wanted}
        return await self._ensure_by_slug(TAGS, "extras.tag", payloads, tally)

    async def ensure_platforms(self, wanted: list[Platform], tally: Tally) -> set[str]:
        """The slugs of `wanted` that exist now, creating the missing platforms."""
        payloads = {p.slug: {"name": p.name, "slug": p.slug} for p in wanted}
        return await self._ensure_by_slug(PLATFORMS, "dcim.platform", payloads, tally)

    async def _ensure_by_slug(
        self, path: str, object_type: str, payloads: dict[str, dict], tally: Tally
    ) -> set[str]:
        """One read for all of them, one bulk create for the missing ones; a create that
        failed because another backend made it first still counts as existing."""
        if not payloads:
            return set()
        params = {"fields": "id,slug"}
        present = _slugs(await self.client.list_by_ids(path, "slug", list(payloads), params))
        missing = sorted(set(payloads) - present)
        if not missing:
            return present
        result = await self.client.bulk_create(path, [payloads[slug] for slug in missing])
        tally.add(object_type, "created", len(result.succeeded))
        present |= {missing[position] for position in result.succeeded}
        if result.failed:
            failed = [missing[position] for position in result.failed]
            present |= _slugs(await self.client.list_by_ids(path, "slug", failed, params))
            for position, reason in result.failed.items():
                if missing[position] not in present:
                    tally.fail(object_type, payloads[missing[position]]["name"], reason)
        return present

    # -- current state ------------------------------------------------------------------

    async def update_cluster(self, cluster_id: int, changes: dict) -> dict:
        return await self.client.call("PATCH", f"{CLUSTERS}{cluster_id}/", json=changes)

    async def devices(self, cluster_id: int) -> list[dict]:
        return await self.client.list(DEVICES, {"cluster_id": cluster_id, "fields": DEVICE_FIELDS})

    async def site_devices(self, site_id: int) -> list[dict]:
        """The devices at a site (adoption looks for marked ones among them)."""
        return await self.client.list(DEVICES, {"site_id": site_id, "fields": DEVICE_FIELDS})

    async def virtual_machines(self, cluster_id: int) -> list[dict]:
        if self.scope is not None:
            return await self._scoped_virtual_machines(cluster_id, self.scope)
        return await self.client.list(
            VIRTUAL_MACHINES, {"cluster_id": cluster_id, "fields": VM_FIELDS}
        )

    async def _scoped_virtual_machines(self, cluster_id: int, scope: GuestScope) -> list[dict]:
        """The scope's VMs by id, and the VMs of the cluster carrying a new guest's key (a
        guest the baseline does not know may still have a VM, from a run it did not see)."""
        params = {"fields": VM_FIELDS}
        by_id, by_key = await asyncio.gather(
            self.client.list_by_ids(VIRTUAL_MACHINES, "id", sorted(scope.vm_ids), params),
            self.client.list_by_ids(
                VIRTUAL_MACHINES,
                f"cf_{SOURCE_FIELD}",
                sorted(scope.source_keys),
                {**params, "cluster_id": cluster_id},
                chunk=SOURCE_KEYS_PER_READ,
            ),
        )
        return list({vm["id"]: vm for vm in [*by_id, *by_key]}.values())

    async def interfaces(self, cluster_id: int, vm_ids: list[int] | None = None) -> list[dict]:
        """The cluster's VM interfaces; in an incremental run those of `vm_ids` only."""
        if self.scope is not None and vm_ids is not None:
            return await self.client.list_by_ids(
                VM_INTERFACES, "virtual_machine_id", vm_ids, {"fields": INTERFACE_FIELDS}
            )
        return await self.client.list(
            VM_INTERFACES, {"cluster_id": cluster_id, "fields": INTERFACE_FIELDS}
        )

    async def disks(self, vm_ids: list[int]) -> list[dict]:
        return await self.client.list_by_ids(
            VIRTUAL_DISKS, "virtual_machine_id", vm_ids, {"fields": DISK_FIELDS}
        )

    async def named_device_interfaces(self, device_ids: list[int], names: list[str]) -> list[dict]:
        """The interfaces of these devices with one of these names (id, name, device)."""
        params = {"name": sorted(set(names)), "fields": "id,name,device"}
        return await self.client.list_by_ids(DEVICE_INTERFACES, "device_id", device_ids, params)

    async def device_interfaces(self, device_ids: list[int]) -> list[dict]:
        return await self.client.list_by_ids(
            DEVICE_INTERFACES, "device_id", device_ids, {"fields": DEVICE_INTERFACE_FIELDS}
        )

    async def vlan_group_id(self, slug: str) -> int | None:
        """The id of the VLAN group with `slug`, None while there is none."""
        found = await self.client.list(VLAN_GROUPS, {"slug": slug, "fields": "id"})
        return found[0]["id"] if found else None

    async def vlan_group(self, slug: str, payload: dict, tally: Tally) -> int:
        """The id of the VLAN group with `slug`, creating it the first time it is needed."""
        found = await self.vlan_group_id(slug)
        if found is not None:
            return found
        return await self.create_vlan_group(payload, tally)

    async def create_vlan_group(self, payload: dict, tally: Tally) -> int:
        return await self._create(
            VLAN_GROUPS, {"slug": payload["slug"]}, payload, tally, "ipam.vlangroup"
        )

    async def ensure_sdn_field(self, tally: Tally) -> None:
        """The SDN sync's source-key field (`domain.sdn.KEY_FIELD`), made the first
        time the sync has SDN objects to write."""
        await self._get_or_create(
            CUSTOM_FIELDS, {"name": sdn.KEY_FIELD}, SDN_FIELD, tally, "extras.customfield"
        )

    async def sdn_objects(self, path: str, cluster_id: int, fields: str) -> list[dict]:
        """The objects of `path` whose SDN source key is this cluster's; asked only once
        the field exists (NetBox ignores a filter on a custom field it does not know, and
        would list them all)."""
        params = {f"cf_{sdn.KEY_FIELD}__isw": sdn.key_prefix(cluster_id), "fields": fields}
        return await self.client.list(path, params)

    async def prefix_field_exists(self) -> bool:
        return bool(
            await self.client.list(CUSTOM_FIELDS, {"name": prefixes.KEY_FIELD, "fields": "id"})
        )

    async def ensure_prefix_field(self, tally: Tally) -> None:
        """The guest-network prefixes' source-key field (`domain.prefixes.KEY_FIELD`),
        made the first time the sync has such a prefix to write."""
        await self._get_or_create(
            CUSTOM_FIELDS, {"name": prefixes.KEY_FIELD}, PREFIX_FIELD, tally, "extras.customfield"
        )

    async def own_prefixes(self, cluster_id: int) -> list[dict]:
        """The prefixes carrying this cluster's guest-network key; asked only once the
        field exists (NetBox ignores a filter on a custom field it does not know)."""
        params = {f"cf_{prefixes.KEY_FIELD}__isw": prefixes.key_prefix(cluster_id)}
        return await self.client.list(PREFIXES, {**params, "fields": PREFIX_FIELDS})

    async def covering_prefixes(self, vrf_id: int | None, networks: list[str]) -> list[dict]:
        """The VRF's prefixes (None: the global table) that contain or equal one of the
        networks: asked by their exact prefixes (`domain.prefixes.supernets`), a bounded
        URL at a time."""
        params = {"vrf_id": "null" if vrf_id is None else vrf_id, "fields": PREFIX_FIELDS}
        return await self.client.list_by_ids(
            PREFIXES, "prefix", prefixes.supernets(networks), params, chunk=50
        )

    async def vm_addresses_within(self, vrf_id: int | None, networks: list[str]) -> list[dict]:
        """The addresses on VM interfaces in the VRF that lie in one of the networks."""
        params = {
            "vrf_id": "null" if vrf_id is None else vrf_id,
            "assigned_object_type": VM_INTERFACE_TYPE,
            "fields": "id,address",
        }
        return await self.client.list_by_ids(IP_ADDRESSES, "parent", networks, params, chunk=50)

    async def l2vpn_terminations(self, l2vpn_ids: list[int]) -> list[dict]:
        return await self.client.list_by_ids(
            L2VPN_TERMINATIONS,
            "l2vpn_id",
            l2vpn_ids,
            {"fields": "id,l2vpn,assigned_object_type,assigned_object_id,tags"},
        )

    async def vlans(self, group_slug: str) -> list[dict]:
        """The VLANs of the group with `group_slug`; none while there is no such group
        (NetBox refuses a filter naming a group it does not know)."""
        try:
            return await self.client.list(VLANS, {"group": group_slug, "fields": "id,vid,tags"})
        except NetBoxError as exc:
            if unknown_group(exc):
                return []
            raise

    async def ip_addresses(self, vm_ids: list[int]) -> list[dict]:
        return await self.client.list_by_ids(
            IP_ADDRESSES, "virtual_machine_id", vm_ids, {"fields": IP_FIELDS}
        )

    async def device_ip_addresses(self, device_ids: list[int]) -> list[dict]:
        return await self.client.list_by_ids(
            IP_ADDRESSES, "device_id", device_ids, {"fields": IP_FIELDS}
        )

    async def marked_ip_addresses(self, vrf_id: int | None) -> list[dict]:
        """The addresses in a VRF (None: the global table) an operator marked for adoption."""
        # NetBox refuses a filter on a tag that does not exist: then nothing is marked.
        if not await self.client.list(TAGS, {"slug": ADOPT_TAG.slug, "fields": "id"}):
            return []
        params = {"tag": ADOPT_TAG.slug, "vrf_id": "null" if vrf_id is None else vrf_id}
        return await self.client.list(IP_ADDRESSES, {**params, "fields": IP_FIELDS})

    # -- the change log (incremental runs) ------------------------------------------------

    async def user_id(self) -> int:
        """The id of the NetBox user this run's token belongs to."""
        return (await self.client.get(AUTHENTICATION_CHECK))["id"]

    async def newest_change(self) -> tuple[int, str] | None:
        """(id, time) of the newest change-log entry; None for an empty change log."""
        response = await self.client.request(
            "GET", OBJECT_CHANGES, params={"ordering": "-id", "limit": 1, "fields": "id,time"}
        )
        if response.status_code in (401, 403):
            raise ChangeLogUnreadable(CHANGE_LOG_FORBIDDEN)
        if not response.is_success:
            raise NetBoxError(response.status_code, "GET", OBJECT_CHANGES, _body(response))
        results = response.json().get("results") or []
        return (results[0]["id"], results[0]["time"]) if results else None

    async def changes(self, **filters) -> list[dict]:
        """The change-log entries matching `filters`, oldest first (stable pages while
        new entries arrive)."""
        try:
            return await self.client.list(
                OBJECT_CHANGES, {**filters, "ordering": "id", "fields": CHANGE_FIELDS}
            )
        except NetBoxError as exc:
            if exc.status in (401, 403):
                raise ChangeLogUnreadable(CHANGE_LOG_FORBIDDEN) from exc
            raise

    async def object_type_id(self, label: str) -> int | None:
        """The id NetBox gives an object type (`app_label.model`), as the change log's
        data names the type of a generic relation."""
        app_label, _, model = label.partition(".")
        found = await self.client.list(
            OBJECT_TYPES, {"app_label": app_label, "model": model, "fields": "id"}
        )
        return found[0]["id"] if found else None

    async def interface_vms(self, interface_ids: list[int]) -> dict[int, int]:
        """VM interface id → its VM, for the interfaces that still exist."""
        found = await self.client.list_by_ids(
            VM_INTERFACES, "id", interface_ids, {"fields": "id,virtual_machine"}
        )
        return {i["id"]: nested_id(i["virtual_machine"]) for i in found}

    # -- IPAM hygiene (`proxbox_backend.hygiene`): many values per request ------------------

    async def addresses_at(self, vrf_id: int | None, hosts: list[str]) -> list[dict]:
        """The VRF's IP addresses (None: the global table) with one of these host
        addresses, whatever their mask (NetBox's `address` filter on a bare host)."""
        params = {"vrf_id": "null" if vrf_id is None else vrf_id, "fields": HYGIENE_FIELDS}
        return await self.client.list_by_ids(IP_ADDRESSES, "address", hosts, params, chunk=50)

    async def mac_address_objects(self, macs: list[str]) -> list[dict]:
        """The MAC address objects with one of these MACs, and what they are assigned to."""
        params = {"fields": MAC_HYGIENE_FIELDS}
        return await self.client.list_by_ids(MAC_ADDRESSES, "mac_address", macs, params, chunk=50)

    async def vm_clusters(self, vm_ids: list[int]) -> dict[int, str]:
        """VM id → the name of its cluster ("" for none)."""
        found = await self.client.list_by_ids(
            VIRTUAL_MACHINES, "id", vm_ids, {"fields": "id,cluster"}
        )
        return {vm["id"]: (vm.get("cluster") or {}).get("name", "") for vm in found}

    async def group_vlans(self, group_slug: str, vids: list[int]) -> list[dict]:
        """The VLANs of the group with these ids (none while there is no such group)."""
        try:
            return await self.client.list_by_ids(
                VLANS, "vid", vids, {"group": group_slug, "fields": "id,vid,name"}
            )
        except NetBoxError as exc:
            if unknown_group(exc):
                return []
            raise


@dataclass(frozen=True)
class GuestScope:
    """What an incremental run reads of the cluster's VMs: these by id, and any carrying
    one of these source keys."""

    vm_ids: frozenset[int]
    source_keys: frozenset[str]


def _body(response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text[:200]


def unknown_group(exc: NetBoxError) -> bool:
    """NetBox's 400 for a VLAN filter naming a group it does not know (yet)."""
    return exc.status == 400 and isinstance(exc.body, dict) and "group" in exc.body


def _slugs(objects: list[dict]) -> set[str]:
    return {obj["slug"] for obj in objects}


def nested_id(value: Any) -> int | None:
    if isinstance(value, dict):
        return value.get("id")
    return value
