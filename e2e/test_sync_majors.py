"""The sync under every Proxmox VE major the simulator bundles: 6.4, 7.4, 8.4 and 9.2.

One simulator (its laboratory API on, the official 6.4/7.4/8.4 API schemas imported) is
hot-swapped from major to major; before each it is seeded again, so every major starts
from the same cluster. Each major has an endpoint of its own (own site and VRF, so the
four clusters' equal addresses do not collide in the shared NetBox) and goes through:
a first sync; then guests resized, stopped and removed, a node's address and the HA
placement changed, and a change-only (incremental) resync that syncs and writes just
those. NetBox then holds the same cluster under every major (a normalized snapshot,
compared across majors), where the majors answer differently: HA placement is an HA
group up to 8.x and a node-affinity rule on 9.x (each recorded as what it is;
`ha_placement` says how they correspond); a running container's addresses without
`lxc/{vmid}/interfaces` before 8.x.

The tests run in file order: each major's test leaves its snapshot for the comparison.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import pytest
from sync_fixtures import (
    Simulator,
    expected_inventory,
    list_all,
    of_vms,
    server_dsn,
    settings_for,
)

from proxbox_backend.baselines import MemoryBaselines
from proxbox_backend.service import SyncService
from proxmox_simulator.cli import seed_database
from proxmox_simulator.config import Settings as SimulatorSettings
from proxmox_simulator.contracts import sources
from proxmox_simulator.contracts.registry import ContractRegistry

# The official API viewer schemas (`../shared/pve-apidoc`, as the simulator's tests find
# them); 9.2 is the simulator's own.
APIDOC = Path(
    os.environ.get("PROXMOX_SIMULATOR_APIDOC_DIR")
    or Path(__file__).resolve().parents[1] / ".." / "shared" / "pve-apidoc"
)
RELEASES = {6: "6.4-15", 7: "7.4-16", 8: "8.4.5", 9: "9.2.12"}
MAJORS = tuple(RELEASES)
# Two nodes, five guests (seed 3: two running QEMU guests, a stopped one, a container, and
# the showcase's VLAN NIC, replicated HA guest and snapshots): the smallest cluster with
# all the sync reads, since it is synced four times over.
PROFILE, SEED = "pair", 3
NAME = "pbsync-major"  # each major's endpoint, site and VRF: NAME-6 … NAME-9
HA_NODES, HA_NODES_CHANGED = "pve1:2,pve2:1", "pve1:3,pve2:1"
# Each major's snapshot, for the comparison at the end.
SNAPSHOTS: dict[int, dict] = {}
FIRST_SYNCS: dict[int, dict] = {}
TIMINGS: dict[int, dict[str, float]] = {}


class Steps:
    """How long each step of a major took (printed with the comparison)."""

    def __init__(self, major: int):
        self.times = TIMINGS.setdefault(major, {})
        self.last = time.monotonic()

    def __call__(self, step: str) -> None:
        now = time.monotonic()
        self.times[step] = round(now - self.last, 1)
        self.last = now


class MajorsSimulator(Simulator):
    """The laboratory API on (the hot-swap), and every official schema imported."""

    def env(self) -> dict:
        return {**super().env(), "PROXMOX_SIMULATOR_LAB": "1"}

    def import_contracts(self) -> None:
        registry = ContractRegistry(self.data_dir)
        for major, release in RELEASES.items():
            if major == 9:
                continue  # bundled
            path = APIDOC / f"pve-{release}-apidoc.js"
            if not path.exists():
                pytest.fail(f"the official API schema of PVE {release} is missing: {path}")
            artifact = sources.read_file(path)
            registry.store(artifact, sources.parse_artifact(artifact, release))

    def swap(self, major: int) -> None:
        with self.api() as pve:
            response = pve.post(f"{self.url}/ui/api/contract/apply", data={"major": major})
        assert response.status_code == 200, response.text
        assert response.json()["data"]["version"] == RELEASES[major]

    fresh = True  # as seeded at its start

    def reseed(self) -> None:
        """The seeded inventory again (in this process: no interpreter to start)."""
        if not self.fresh:
            settings = SimulatorSettings(
                database_url=server_dsn(self.database), data_dir=self.data_dir
            )
            asyncio.run(seed_database(settings, PROFILE, SEED, None))
        self.fresh = False


@pytest.fixture(scope="module")
def simulator(sync_workdir):
    sim = MajorsSimulator("majors", PROFILE, SEED, sync_workdir)
    try:
        sim.import_contracts()
        yield sim.start()
    finally:
        sim.stop()


# -- what each major runs --------------------------------------------------------------------


def task(sim: Simulator, response) -> None:
    assert response.status_code == 200, response.text
    sim.wait_task(response.json()["data"])


def prepare(sim: MajorsSimulator, major: int) -> dict:
    """The seeded cluster under `major`, with a running container; on 9.x the seeded HA
    group is what PVE 9 turns it into: a node-affinity rule, the group gone."""
    sim.reseed()
    sim.swap(major)
    guests = sorted(
        (g["resource"] for g in sim.inventory()["guests"].values()), key=lambda r: r["vmid"]
    )
    with sim.api() as pve:
        container = next(g for g in guests if g["type"] == "lxc")
        if container["status"] != "running":
            task(sim, pve.post(f"/nodes/{container['node']}/lxc/{container['vmid']}/status/start"))
        (resource,) = pve.get("/cluster/ha/resources").json()["data"]
        group = resource["group"]
        if major >= 9:
            made = pve.post(
                "/cluster/ha/rules",
                data={
                    "type": "node-affinity",
                    "rule": group,
                    "nodes": HA_NODES,
                    "resources": resource["sid"],
                },
            )
            assert made.status_code == 200, made.text
            ungrouped = pve.put(
                f"/cluster/ha/resources/{resource['sid']}", data={"delete": "group"}
            )
            assert ungrouped.status_code == 200, ungrouped.text
            assert pve.delete(f"/cluster/ha/groups/{group}").status_code == 200
    return {"ha_group": group, "ha_sid": resource["sid"], "guests": guests}


def endpoint_for(netbox, sim: Simulator, major: int) -> dict:
    name = f"{NAME}-{major}"
    with netbox.api() as api:
        site = api.post("/dcim/sites/", json={"name": name, "slug": name})
        vrf = api.post("/ipam/vrfs/", json={"name": name})
        assert site.status_code == vrf.status_code == 201, (site.text, vrf.text)
        endpoint = api.post(
            "/plugins/proxbox/endpoints/proxmox/",
            json={
                "name": name,
                "host": "127.0.0.1",
                "port": sim.port,
                "verify_tls": True,
                "token_id": sim.token_id,
                "token_secret": sim.token_secret,
                "mode": "cluster",
                "site": site.json()["id"],
                "vrf": vrf.json()["id"],
            },
        )
        assert endpoint.status_code == 201, endpoint.text
    return {**endpoint.json(), "site_id": site.json()["id"], "vrf_id": vrf.json()["id"]}


def change(sim: MajorsSimulator, major: int, prepared: dict) -> dict:
    """Resize one running guest, stop another, remove a stopped one; readdress a node's
    bridge; move the HA placement's priorities (a group up to 8.x, a rule on 9.x)."""
    guests = prepared["guests"]
    ha_vmid = int(prepared["ha_sid"].split(":")[1])
    running = [
        g
        for g in guests
        if g["type"] == "qemu" and g["status"] == "running" and g["vmid"] != ha_vmid
    ]
    resized, stopped = running[0], running[1]
    gone = next(g for g in guests if g["status"] == "stopped" and g["type"] == "qemu")
    with sim.api() as pve:
        base = f"/nodes/{resized['node']}/qemu/{resized['vmid']}"
        assert pve.put(f"{base}/config", data={"memory": 3072}).status_code == 200
        task(sim, pve.post(f"/nodes/{stopped['node']}/qemu/{stopped['vmid']}/status/stop"))
        task(sim, pve.delete(f"/nodes/{gone['node']}/qemu/{gone['vmid']}"))
        readdressed = pve.put(
            "/nodes/pve2/network/vmbr1", data={"type": "bridge", "cidr": "10.251.2.1/24"}
        )
        assert readdressed.status_code == 200, readdressed.text
        task(sim, pve.put("/nodes/pve2/network"))
        group = prepared["ha_group"]
        if major >= 9:
            moved = pve.put(
                f"/cluster/ha/rules/{group}",
                data={"type": "node-affinity", "nodes": HA_NODES_CHANGED},
            )
        else:
            moved = pve.put(f"/cluster/ha/groups/{group}", data={"nodes": HA_NODES_CHANGED})
        assert moved.status_code == 200, moved.text
    return {"resized": resized, "stopped": stopped, "gone": gone}


# -- NetBox, normalized -------------------------------------------------------------------------

# Fields that say when, not what; and the run's own bookkeeping.
VOLATILE = {"id", "url", "display_url", "created", "last_updated", "last_seen", "last_sync"}
RECORDS = (
    "storages",
    "backups",
    "backup-jobs",
    "snapshots",
    "replication-jobs",
    "ha-groups",
    "ha-resources",
    "ha-rules",
)
# The record that places the HA guest: its HA group up to 8.x, on 9.x the node-affinity
# rule PVE 9 turns a group into (`ha_placement`).
GROUP, RULE = "netbox_proxbox.proxmoxhagroup", "netbox_proxbox.proxmoxharule"
PLACEMENT = "HA placement (group up to 8.x, node-affinity rule on 9.x)"


def placement_type(major: int) -> str:
    return RULE if major >= 9 else GROUP


def _places(record: dict) -> bool:
    """An HA group, or a node-affinity rule HA applies: what `ha_placement` compares."""
    if "restricted" in record:
        return not record["nofailback"]
    return record["rule_type"]["value"] == "node-affinity" and record["enabled"]


def ha_placement(raw: dict) -> list[dict]:
    """HA groups (up to 8.x) and node-affinity rules (9.x) as one: PVE 9 turns a group
    into a node-affinity rule of the same node priorities that lists the group's
    resources (the ones whose `group` it was), `strict` for `restricted`. A group's
    `nofailback` moved to the resources, so a rule has none: a group with it set has no
    rule of the same meaning and stays in its own section (the seeded one has it off)."""
    groups = [
        {
            "name": g["name"],
            "nodes": g["nodes"],
            "strict": g["restricted"],
            "comment": g["comment"],
            "members": sorted(
                r["sid"]
                for r in raw["ha-resources"]
                if r["group"] is not None and r["group"]["id"] == g["id"]
            ),
        }
        for g in raw["ha-groups"]
        if _places(g)
    ]
    rules = [
        {
            "name": r["name"],
            "nodes": r["nodes"],
            "strict": r["strict"],
            "comment": r["comment"],
            "members": sorted(m["sid"] for m in r["resources"]),
        }
        for r in raw["ha-rules"]
        if _places(r)
    ]
    return groups + rules


def nested(value: dict):
    """A nested object by what names it (an interface with its device or VM)."""
    name = next(
        (value[k] for k in ("name", "address", "mac_address", "sid", "slug") if k in value),
        value.get("display"),
    )
    owner = value.get("device") or value.get("virtual_machine")
    return f"{owner['name']}/{name}" if isinstance(owner, dict) else name


def normalized(value, top: bool = True):
    """Ids and timestamps dropped, a nested object by what names it."""
    if isinstance(value, list):
        return sorted((normalized(v, top=False) for v in value), key=repr)
    if isinstance(value, dict):
        if not top and "id" in value:
            return nested(value)
        return {
            k: normalized(v, top=False)
            for k, v in sorted(value.items())
            if k not in VOLATILE and not (k.endswith("_id") and isinstance(v, int))
        }
    return value


def snapshot(netbox, endpoint: dict, cluster_id: int) -> dict:
    """Every object the endpoint's sync owns, normalized: the same cluster gives the same
    snapshot whichever major it was read from."""
    vms = list_all(netbox, "/virtualization/virtual-machines/", cluster_id=cluster_id)
    names = {vm["id"]: vm["name"] for vm in vms}
    found = {
        "devices": list_all(netbox, "/dcim/devices/", site_id=endpoint["site_id"]),
        "device_interfaces": list_all(netbox, "/dcim/interfaces/", site_id=endpoint["site_id"]),
        "addresses": list_all(netbox, "/ipam/ip-addresses/", vrf_id=endpoint["vrf_id"]),
        "vms": vms,
        "vm_interfaces": list_all(netbox, "/virtualization/interfaces/", cluster_id=cluster_id),
        "disks": of_vms(netbox, "/virtualization/virtual-disks/", names),
        **{
            kind: list_all(netbox, f"/plugins/proxbox/inventory/{kind}/", cluster_id=cluster_id)
            for kind in RECORDS
        },
    }
    return {"major": endpoint["major"], "cluster_id": cluster_id, "raw": found}


def comparable(taken: dict) -> dict[str, str]:
    """A snapshot as text per section, without what names the endpoint (its site and
    VRF) rather than the cluster, and without the ids of this NetBox's rows. HA groups and
    node-affinity rules are compared as the HA placement they both are (`ha_placement`,
    the resources' own `group` included); whatever else they hold, in their sections."""
    raw = dict(taken["raw"])
    # What a node runs is the major's own (`assert_node_facts`): its kernel and release.
    raw["devices"] = [
        {**d, "custom_fields": {k: v for k, v in d["custom_fields"].items() if k not in RUNS}}
        for d in raw["devices"]
    ]
    raw["ha-placement"] = ha_placement(raw)
    raw["ha-groups"] = [g for g in raw["ha-groups"] if not _places(g)]
    raw["ha-rules"] = [r for r in raw["ha-rules"] if not _places(r)]
    raw["ha-resources"] = [
        {k: v for k, v in r.items() if k != "group"} for r in raw["ha-resources"]
    ]
    sections = {}
    for section, objects in raw.items():
        text = json.dumps(
            sorted((normalized(o) for o in objects), key=repr), indent=1, sort_keys=True
        )
        text = text.replace(f"{NAME}-{taken['major']}", f"{NAME}-N")
        sections[section] = text.replace(f"cluster-{taken['cluster_id']}/", "cluster-N/")
    return sections


def assert_matches_proxmox(sim: Simulator, raw: dict) -> None:
    """The snapshot holds the simulator's inventory (guests, NICs, addresses, disks, and
    every node address from its network)."""
    expected = expected_inventory(sim.inventory())
    names = {vm["id"]: vm["name"] for vm in raw["vms"]}
    assert {
        (vm["name"], vm["status"]["value"], float(vm["vcpus"]), vm["memory"], vm["device"]["name"])
        for vm in raw["vms"]
    } == expected["vms"]
    assert {
        (
            names[i["virtual_machine"]["id"]],
            i["name"],
            (i["primary_mac_address"] or {}).get("mac_address"),
        )
        for i in raw["vm_interfaces"]
    } == expected["interfaces"]
    assert {
        (names[d["virtual_machine"]["id"]], d["name"], d["size"]) for d in raw["disks"]
    } == expected["disks"]
    vm_ips = {
        (names[ip["assigned_object"]["virtual_machine"]["id"]], ip["assigned_object"]["name"])
        + (ip["address"],)
        for ip in raw["addresses"]
        if ip["assigned_object_type"] == "virtualization.vminterface"
    }
    assert expected["ips"] <= vm_ips
    node_ips = {
        (ip["assigned_object"]["device"]["name"], ip["assigned_object"]["name"], ip["address"])
        for ip in raw["addresses"]
        if ip["assigned_object_type"] == "dcim.interface"
    }
    with sim.api() as pve:
        cidrs = {
            (node, entry["iface"], entry[key])
            for node in expected["nodes"]
            for entry in pve.get(f"/nodes/{node}/network").json()["data"]
            for key in ("cidr", "cidr6")
            if entry.get(key)
        }
    assert cidrs and node_ips == cidrs


# A node device's facts that name what the node runs, which each major reports its way:
# 6.4 and 7.4 the kernel in `kversion` alone, 8 on also as `current-kernel`.
RUNS = ("proxbox_kernel", "proxbox_pve_version")


def assert_node_facts(sim: Simulator, major: int, devices: list[dict]) -> None:
    """Each node device's facts are what the node's status says under this major."""
    with sim.api() as pve:
        for device in devices:
            status = pve.get(f"/nodes/{device['name']}/status").json()["data"]
            facts = device["custom_fields"]
            kernel = status["kversion"].split()[1]
            if major >= 8:
                assert status["current-kernel"]["release"] == kernel
            else:
                assert "current-kernel" not in status, status
            assert (facts["proxbox_kernel"], facts["proxbox_pve_version"]) == (
                kernel,
                status["pveversion"],
            )
            assert facts["proxbox_pve_version"].startswith(f"pve-manager/{RELEASES[major]}/")
            assert facts["proxbox_cpu_threads"] == status["cpuinfo"]["cpus"]
            assert facts["proxbox_memory_mb"] == status["memory"]["total"] // 1024**2


def created(report) -> dict[str, int]:
    """What a first sync created of the cluster's own objects (not the shared ones an
    earlier run of the session may have created: tags, roles, platforms, types)."""
    shared = {"extras.tag", "dcim.devicerole", "dcim.platform", "dcim.manufacturer"}
    shared |= {"dcim.devicetype", "virtualization.clustertype", "extras.customfield"}
    return {
        PLACEMENT if object_type in (GROUP, RULE) else object_type: counters.created
        for object_type, counters in report.tally.counters.items()
        if object_type not in shared and counters.created
    }


# -- the matrix ---------------------------------------------------------------------------------


def syncing(netbox, sim: Simulator, endpoint: dict):
    """Runs of the endpoint that keep a baseline: after the first (full) run, a run syncs
    only what changed, as the schedule's runs do. Removed guests are deleted."""
    service = SyncService(
        settings_for(netbox, sim, disappeared="delete"), baselines=MemoryBaselines()
    )
    return lambda: asyncio.run(service.run(endpoint["id"]))


def clean(report) -> None:
    assert report.ok, (report.error, report.as_dict())
    assert report.warnings == [] and report.read_failures == [], report.as_dict()
    assert report.tally.failed == 0, report.tally.failures


@pytest.mark.parametrize("major", MAJORS, ids=[RELEASES[m] for m in MAJORS])
def test_the_sync_under_each_major(netbox_server, simulator, major):
    step = Steps(major)
    prepared = prepare(simulator, major)
    endpoint = {**endpoint_for(netbox_server, simulator, major), "major": major}
    step("prepare")

    sync = syncing(netbox_server, simulator, endpoint)
    first = sync()
    step("first sync")
    clean(first)
    cluster_id = first.cluster["id"]
    FIRST_SYNCS[major] = created(first)
    with netbox_server.api() as api:
        tracking = api.get(f"/plugins/proxbox/clusters/{first.cluster['tracking_id']}/").json()
    assert tracking["version"] == RELEASES[major]
    (ha_resource,) = list_all(
        netbox_server, "/plugins/proxbox/inventory/ha-resources/", cluster_id=cluster_id
    )
    groups, rules = (
        list_all(netbox_server, f"/plugins/proxbox/inventory/{kind}/", cluster_id=cluster_id)
        for kind in ("ha-groups", "ha-rules")
    )
    assert ha_resource["sid"] == prepared["ha_sid"]
    if major >= 9:
        # The group PVE 9 turned into a rule is a rule, not (also) a group.
        assert groups == []
        (rule,) = rules
        assert (rule["name"], rule["nodes"], rule["rule_type"]["value"]) == (
            prepared["ha_group"],
            HA_NODES,
            "node-affinity",
        )
        assert [m["id"] for m in rule["resources"]] == [ha_resource["id"]]
        assert ha_resource["group"] is None
    else:
        assert rules == []
        (ha_group,) = groups
        assert (ha_group["name"], ha_group["nodes"]) == (prepared["ha_group"], HA_NODES)
        assert ha_resource["group"]["id"] == ha_group["id"]

    changed = change(simulator, major, prepared)
    step("change")
    resync = sync()
    step("resync")
    clean(resync)
    # Change-only: the changed guests, the one gone, nothing else read of the guests.
    assert resync.run_mode == {
        "mode": "incremental",
        "guests_synced": 2,
        "guests_unchanged": len(prepared["guests"]) - 3,
        "guests_gone": 1,
    }
    vms = resync.tally.of("virtualization.virtualmachine")
    # The resized guest, the stopped one (offline); the removed one deleted.
    assert (vms.created, vms.updated, vms.deleted) == (0, 2, 1), vms
    placements = resync.tally.of(placement_type(major))
    assert (placements.created, placements.updated, placements.deleted) == (0, 1, 0)
    # Only what changed: the guests, the node address, the HA placement (and the removed
    # guest's own objects, deleted with it).
    untouched = {
        object_type
        for object_type, counters in resync.tally.counters.items()
        if counters.created == counters.updated == counters.deleted == 0
    }
    assert {
        "dcim.device",
        "dcim.interface",
        "netbox_proxbox.proxmoxharesource",
        "netbox_proxbox.proxmoxreplicationjob",
    } <= untouched, resync.tally.as_dict()

    taken = snapshot(netbox_server, endpoint, cluster_id)
    assert_matches_proxmox(simulator, taken["raw"])
    assert_node_facts(simulator, major, taken["raw"]["devices"])
    step("snapshot")
    by_name = {vm["name"]: vm for vm in taken["raw"]["vms"]}
    assert by_name[changed["resized"]["name"]]["memory"] == 3072
    assert by_name[changed["stopped"]["name"]]["status"]["value"] == "offline"
    assert changed["gone"]["name"] not in by_name
    (placement,) = ha_placement(taken["raw"])
    assert (placement["nodes"], placement["members"]) == (HA_NODES_CHANGED, [prepared["ha_sid"]])
    SNAPSHOTS[major] = taken


def test_netbox_ends_identical_under_every_major():
    assert set(SNAPSHOTS) == set(MAJORS), "every major's test ran"
    newest = max(MAJORS)
    reference = comparable(SNAPSHOTS[newest])
    for major in MAJORS:
        assert FIRST_SYNCS[major] == FIRST_SYNCS[newest], major
        sections = comparable(SNAPSHOTS[major])
        for section, text in reference.items():
            assert sections[section] == text, (RELEASES[major], section)
    for major, steps in TIMINGS.items():
        print(f"PVE {RELEASES[major]}: {sum(steps.values()):.1f}s {steps}")
