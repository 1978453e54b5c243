"""A dry run ("preview") of a sync against a real NetBox and the simulator: it sends no
write to NetBox, and what it plans is what the real run that follows writes.

The tests run in file order and build on each other (one endpoint, one small simulator).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections import Counter, defaultdict

import httpx
import pytest
import sync_fixtures as fixtures
from sync_fixtures import (
    change_marker,
    create_endpoint,
    create_site,
    object_changes_since,
    run_cli,
    settings_for,
)

from proxbox_backend.clients.netbox import NetBoxClient
from proxbox_backend.gateways.preview import collection_of, object_type_of
from proxbox_backend.service import SyncService

# The plugin's reflection metadata (tracking record's last seen, sidecar) and the claim
# action are the run's bookkeeping, not inventory a preview plans.
BOOKKEEPING = ("/plugins/proxbox/clusters/", "/plugins/proxbox/cluster-sync-states/")
CLAIM = "/sync-cluster/"
READS = ("GET", "HEAD", "OPTIONS")


class Recording(httpx.AsyncBaseTransport):
    """Every request the backend sends to NetBox: method, API path, JSON body and the
    JSON answer (of writes)."""

    def __init__(self):
        self.inner = httpx.AsyncHTTPTransport()
        self.requests: list[tuple[str, str, object, object]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        path = request.url.path.removeprefix("/api")
        response = await self.inner.handle_async_request(request)
        answer = None
        if request.method not in READS:
            content = await response.aread()
            answer = json.loads(content) if content else None
            response = httpx.Response(
                response.status_code, headers=response.headers, content=content
            )
        self.requests.append((request.method, path, body, answer))
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()

    @property
    def writes(self) -> list[tuple[str, str, object, object]]:
        return [r for r in self.requests if r[0] not in READS]


def run(netbox, simulator, endpoint_id: int, *, dry_run: bool, **overrides):
    settings = settings_for(netbox, simulator, **overrides)
    recording = Recording()

    async def go():
        client = NetBoxClient(settings.netbox_url, settings.netbox_token, transport=recording)
        try:
            return await SyncService(settings, netbox=client).run(endpoint_id, dry_run=dry_run)
        finally:
            await client.aclose()

    return asyncio.run(go()), recording


def inventory_writes(recording: Recording):
    """What a real run wrote, by object type: created count and the fields the run wrote on
    them afterwards (e.g. a new VM's primary IP), updated (id → fields), deleted ids."""
    created: Counter = Counter()
    new: dict[tuple[str, int], set] = {}
    updated: dict[str, dict[int, set]] = defaultdict(lambda: defaultdict(set))
    deleted: dict[str, set] = defaultdict(set)
    for method, path, body, answer in recording.writes:
        if path.endswith(CLAIM):
            if answer.get("created"):
                created["virtualization.cluster"] += 1
                new[("virtualization.cluster", answer["cluster"]["id"])] = set()
            continue
        if path.startswith(BOOKKEEPING):
            continue
        kind = object_type_of(collection_of(path)[0])
        items = body if isinstance(body, list) else [body]
        if method == "POST":
            created[kind] += len(items)
            new.update({(kind, obj["id"]): set() for obj in answer})
        elif method == "PATCH":
            single = collection_of(path)[1]
            for item in items:
                obj_id = single or item["id"]
                fields = set(item) - {"id"}
                if (kind, obj_id) in new:
                    new[(kind, obj_id)] |= fields
                else:
                    updated[kind][obj_id] |= fields
        elif method == "DELETE":
            deleted[kind] |= {item["id"] for item in items}
    return created, new, updated, deleted


def planned(report):
    plan = report.plan.as_dict()["object_types"]
    created = Counter({kind: p["create"] for kind, p in plan.items() if p["create"]})
    updated = {
        kind: {u["id"]: set(u["changes"]) for u in p["updates"]}
        for kind, p in plan.items()
        if p["updates"]
    }
    deleted = {kind: {d["id"] for d in p["deletes"]} for kind, p in plan.items() if p["deletes"]}
    return created, updated, deleted


def written_counters(report) -> dict:
    return {
        kind: (c.created, c.updated, c.deleted)
        for kind, c in report.tally.counters.items()
        if c.created or c.updated or c.deleted
    }


def assert_preview_matches(preview, real, recording):
    # The counters a preview predicts are the ones the real run reports...
    assert written_counters(preview) == written_counters(real)
    # ...and its plan lists exactly the objects and fields the real run sent.
    created, new, updated, deleted = inventory_writes(recording)
    p_created, p_updated, p_deleted = planned(preview)
    assert p_created == created
    # What the run wrote on an object it had just created is part of the planned create.
    payloads = preview.plan.as_dict()["object_types"]
    for (kind, _id), fields in new.items():
        if fields:
            assert any(fields <= set(c["payload"]) for c in payloads[kind]["creates"]), fields
    assert p_updated == {kind: dict(ids) for kind, ids in updated.items() if ids}
    assert p_deleted == {kind: ids for kind, ids in deleted.items() if ids}


@pytest.fixture(scope="module")
def preview_simulator(sync_workdir):
    simulator = fixtures.Simulator("preview", "single", 6, sync_workdir)
    try:
        simulator.start().renumber("10.81.0")
        yield simulator
    finally:
        simulator.stop()


@pytest.fixture(scope="module")
def endpoint(netbox_server, preview_simulator):
    site = create_site(netbox_server, "pbsync-preview")
    return create_endpoint(netbox_server, "pve-preview", preview_simulator, site=site)


def test_a_first_preview_writes_nothing_and_plans_what_the_first_sync_writes(
    netbox_server, preview_simulator, endpoint
):
    since = change_marker(netbox_server)
    preview, recording = run(netbox_server, preview_simulator, endpoint["id"], dry_run=True)
    assert preview.ok, (preview.error, preview.as_dict())
    assert preview.status == "previewed"
    assert recording.writes == []
    assert preview.netbox_requests["writes"] == 0
    assert object_changes_since(netbox_server, since) == []
    plan = preview.as_dict()["plan"]
    vms = plan["object_types"]["virtualization.virtualmachine"]
    assert vms["create"] == len(preview_simulator.inventory()["guests"])
    # The cluster does not exist yet: everything attached to it uses its placeholder.
    cluster = plan["object_types"]["virtualization.cluster"]["creates"][0]
    assert cluster["placeholder"] < 0 and plan["placeholders"][str(cluster["placeholder"])]
    assert {vm["payload"]["cluster"] for vm in vms["creates"]} == {cluster["placeholder"]}
    assert any("placeholder" in note for note in plan["notes"])

    real, recording = run(netbox_server, preview_simulator, endpoint["id"], dry_run=False)
    assert real.ok, (real.error, real.as_dict())
    assert_preview_matches(preview, real, recording)


def test_a_preview_of_changes_shows_old_and_new_values_and_matches_the_sync(
    netbox_server, preview_simulator, endpoint
):
    guests = preview_simulator.inventory()["guests"]
    ordered = sorted(guests.items())
    resized_guest = next(g for (k, _), g in ordered if k == "qemu")
    resized = resized_guest["resource"]
    gone = next(g["resource"] for _key, g in ordered if g is not resized_guest)
    with preview_simulator.api() as pve:
        answer = pve.put(
            f"/nodes/{resized['node']}/qemu/{resized['vmid']}/config", data={"memory": 3072}
        )
        assert answer.status_code == 200, answer.text
        if gone["status"] == "running":
            stopped = pve.post(f"/nodes/{gone['node']}/{gone['type']}/{gone['vmid']}/status/stop")
            preview_simulator.wait_task(stopped.json()["data"])
        destroyed = pve.delete(f"/nodes/{gone['node']}/{gone['type']}/{gone['vmid']}")
        assert destroyed.status_code == 200, destroyed.text
        preview_simulator.wait_task(destroyed.json()["data"])
        created = pve.post(
            f"/nodes/{resized['node']}/qemu",
            data={
                "vmid": 991,
                "name": "preview-new",
                "memory": 1024,
                "cores": 1,
                "net0": "virtio,bridge=vmbr0",
                "scsi0": "local-lvm:4",
            },
        )
        assert created.status_code == 200, created.text
        preview_simulator.wait_task(created.json()["data"])

    since = change_marker(netbox_server)
    preview, recording = run(
        netbox_server, preview_simulator, endpoint["id"], dry_run=True, disappeared="delete"
    )
    assert preview.ok, (preview.error, preview.as_dict())
    assert recording.writes == [] and object_changes_since(netbox_server, since) == []
    vms = preview.as_dict()["plan"]["object_types"]["virtualization.virtualmachine"]
    update = next(u for u in vms["updates"] if u["label"] == resized["name"])
    assert update["changes"]["memory"] == {
        "old": int(resized_guest["config"]["memory"]),
        "new": 3072,
    }
    assert [d["label"] for d in vms["deletes"]] == [gone["name"]]
    assert [c["label"] for c in vms["creates"]] == ["preview-new"]

    real, recording = run(
        netbox_server, preview_simulator, endpoint["id"], dry_run=False, disappeared="delete"
    )
    assert real.ok, (real.error, real.as_dict())
    assert_preview_matches(preview, real, recording)


def cli(netbox, simulator, *args: str) -> subprocess.CompletedProcess:
    """`proxbox-sync run …`, wide enough that the plan's lines are not wrapped."""
    return run_cli(netbox, simulator, "run", *args, COLUMNS="200")


def test_the_cli_previews_a_cluster_rename_and_the_sync_applies_it(
    netbox_server, preview_simulator, endpoint
):
    preview_simulator.rename("pvesim-preview")
    since = change_marker(netbox_server)
    shown = cli(netbox_server, preview_simulator, "--endpoint", "pve-preview", "--dry-run")
    assert shown.returncode == 0, shown.stderr
    assert "nothing was written" in shown.stdout
    assert "virtualization.cluster: 0 to create, 1 to update, 0 to delete" in shown.stdout
    assert 'name: "pvesim" → "pvesim-preview"' in shown.stdout
    answer = cli(
        netbox_server, preview_simulator, "--endpoint", "pve-preview", "--dry-run", "--json"
    )
    assert answer.returncode == 0, answer.stderr
    report = json.loads(answer.stdout)
    assert report["dry_run"] is True and report["status"] == "previewed"
    assert report["netbox_requests"]["writes"] == 0
    (update,) = report["plan"]["object_types"]["virtualization.cluster"]["updates"]
    assert update["changes"] == {"name": {"old": "pvesim", "new": "pvesim-preview"}}
    assert object_changes_since(netbox_server, since) == []

    real, _recording = run(netbox_server, preview_simulator, endpoint["id"], dry_run=False)
    assert real.ok, (real.error, real.as_dict())
    assert real.cluster["changed"] and real.cluster["name"] == "pvesim-preview"
    assert real.tally.of("virtualization.cluster").updated == 1
    assert written_counters(real) == {"virtualization.cluster": (0, 1, 0)}


def test_a_preview_of_an_unchanged_cluster_plans_nothing(
    netbox_server, preview_simulator, endpoint
):
    since = change_marker(netbox_server)
    preview, recording = run(netbox_server, preview_simulator, endpoint["id"], dry_run=True)
    assert preview.ok, (preview.error, preview.as_dict())
    assert recording.writes == [] and object_changes_since(netbox_server, since) == []
    assert preview.as_dict()["plan"]["object_types"] == {}
