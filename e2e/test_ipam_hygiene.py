"""IPAM hygiene against a real NetBox, the sync backend (`proxbox-sync serve`), an RQ
worker and the simulator: guests and NetBox data arranged to break each rule (a
duplicate address in the endpoint's VRF, a device interface holding a guest's MAC, no
prefix covering the guests' network, a VLAN of the guests' id under another name in the
sync's group). The REST preview lists every conflict with its severity and writes
nothing; the preview page lists them in a browser, "Apply" runs the sync and its Job's
page shows the same findings as a table.

A NetBox of its own: its web process must reach this module's backend (the preview page
asks it). The tests run in file order and build on each other.
"""

from __future__ import annotations

import re

import pytest
from browser_support import requires_chromium, signed_in_page
from chaos_support import BackendServer, RQWorker, endpoint_cluster
from proxbox_processes import WaitTimeout, wait_until
from sync_fixtures import (
    NetBoxServer,
    Simulator,
    change_marker,
    create_endpoint,
    create_site,
    list_all,
    object_changes_since,
    props,
    run_sync,
)

from proxbox_devstack.paths import data_dir as default_data_dir
from proxbox_devstack.secrets import load_or_create_secrets

pytestmark = requires_chromium()

NETWORK = "10.104.0"  # the renumber below (e2e/test_fixture_networks.py)
MAC = re.compile(r"^[0-9A-F]{2}(:[0-9A-F]{2}){5}$", re.I)
CLASH_VID, CLASH_NAME = 31, "hygiene-storage"


@pytest.fixture(scope="module")
def hygiene_dir(sync_workdir):
    path = sync_workdir / "ipam-hygiene"
    path.mkdir()
    return path


@pytest.fixture(scope="module")
def simulator(hygiene_dir):
    simulator = Simulator("ipam", "pair", 38, hygiene_dir)
    try:
        simulator.start().renumber("10.104.0")
        yield simulator
    finally:
        simulator.stop()


@pytest.fixture(scope="module")
def stack(hygiene_dir, simulator):
    """NetBox (web and worker) reaching the backend, and the backend reaching NetBox."""
    netbox = NetBoxServer(hygiene_dir)
    secrets = load_or_create_secrets(default_data_dir())
    backend = BackendServer(netbox, hygiene_dir, secrets["backend_api_token"], simulator.ca_bundle)
    netbox.extra_env["PROXBOX_BACKEND_URL"] = backend.url
    worker = RQWorker(netbox, hygiene_dir)
    try:
        netbox.start()
        backend.start()
        worker.start()
        yield netbox
    finally:
        worker.stop()
        backend.stop()
        netbox.stop()


def logs_of(netbox: NetBoxServer) -> list:
    return sorted(netbox.workdir.glob("*.log"))


def guest_nic(guest: dict) -> tuple[str, dict]:
    config = guest["config"]
    return "net0", props(config["net0"])


def mac_of(guest: dict) -> str:
    _key, nic = guest_nic(guest)
    return next(v for v in nic.values() if MAC.match(v)).upper()


def set_vlan(simulator: Simulator, guest: dict, vid: int) -> None:
    key, nic = guest_nic(guest)
    nic["tag"] = str(vid)
    r = guest["resource"]
    with simulator.api() as pve:
        answer = pve.put(
            f"/nodes/{r['node']}/{r['type']}/{r['vmid']}/config",
            data={key: ",".join(f"{k}={v}" for k, v in nic.items())},
        )
        assert answer.status_code == 200, answer.text


def post(api, path: str, body: dict) -> dict:
    answer = api.post(path, json=body)
    assert answer.status_code == 201, answer.text
    return answer.json()


@pytest.fixture(scope="module")
def world(stack, simulator):
    """The endpoint in a VRF that does not enforce unique addresses (the duplicate can be
    documented there), three guests (A: duplicate address, B: MAC collision, C: VLAN),
    synced once before the conflicts are arranged."""
    guests = [g for _k, g in sorted(simulator.inventory()["guests"].items())]
    a, b, c = guests[:3]
    set_vlan(simulator, c, 30)
    site = create_site(stack, "pbsync-ipam-hygiene")
    with stack.api() as api:
        vrf = post(api, "/ipam/vrfs/", {"name": "hygiene", "enforce_unique": False})
        endpoint = create_endpoint(stack, "pve-hygiene", simulator, site=site)
        answer = api.patch(
            f"/plugins/proxbox/endpoints/proxmox/{endpoint['id']}/", json={"vrf": vrf["id"]}
        )
        assert answer.status_code == 200, answer.text
    return {
        "endpoint": endpoint,
        "site": site,
        "vrf": vrf["id"],
        "a": a,
        "b": b,
        "c": c,
        "address_a": f"{NETWORK}.10/24",
    }


def findings_of(report: dict, rule: str) -> list[dict]:
    return [f for f in report["hygiene"] if f["rule"] == rule]


def label(guest: dict) -> str:
    r = guest["resource"]
    return f"{r['name']} ({r['type']}/{r['vmid']})"


def test_a_clean_sync_reports_only_the_guests_network_outside_any_prefix(stack, simulator, world):
    report = run_sync(stack, simulator, world["endpoint"]["id"])
    assert report.ok, (report.error, report.read_failures, report.tally.failures)
    found = report.as_dict()["hygiene"]
    # Its own addresses, MACs and VLANs (just written) are no conflict.
    assert {f["rule"] for f in found} == {"outside_prefix"}, found
    outside = {f["value"]: f for f in found}
    assert outside[world["address_a"]]["prefix"] == f"{NETWORK}.0/24"
    assert outside[world["address_a"]]["severity"] == "warning"


@pytest.fixture(scope="module")
def conflicts(stack, simulator, world):
    """A device interface holding guest A's address (in the VRF) and guest B's MAC; guest
    C's NIC moved to VLAN 31, which the sync's group has under another name."""
    with stack.api() as api:
        maker = post(api, "/dcim/manufacturers/", {"name": "hyg-maker", "slug": "hyg-maker"})
        kind = post(
            api,
            "/dcim/device-types/",
            {"manufacturer": maker["id"], "model": "hyg-switch", "slug": "hyg-switch"},
        )
        role = post(api, "/dcim/device-roles/", {"name": "hyg-role", "slug": "hyg-role"})
        device = post(
            api,
            "/dcim/devices/",
            {
                "name": "hyg-sw1",
                "device_type": kind["id"],
                "role": role["id"],
                "site": world["site"],
            },
        )
        port = post(
            api,
            "/dcim/interfaces/",
            {"device": device["id"], "name": "ge-0/0/1", "type": "1000base-t"},
        )
        on_port = {"assigned_object_type": "dcim.interface", "assigned_object_id": port["id"]}
        post(
            api,
            "/ipam/ip-addresses/",
            {"address": f"{NETWORK}.10/32", "vrf": world["vrf"], **on_port},
        )
        post(api, "/dcim/mac-addresses/", {"mac_address": mac_of(world["b"]), **on_port})
        cluster = endpoint_cluster(stack, world["endpoint"]["id"])
        group = api.get("/ipam/vlan-groups/", params={"slug": f"proxbox-cluster-{cluster}"})
        (group,) = group.json()["results"]
        post(api, "/ipam/vlans/", {"vid": CLASH_VID, "name": CLASH_NAME, "group": group["id"]})
    set_vlan(simulator, world["c"], CLASH_VID)
    return {"device": "hyg-sw1", "port": "ge-0/0/1", "group": group["slug"]}


def assert_every_rule(found: list[dict], world, conflicts) -> None:
    where = f"device {conflicts['device']} interface {conflicts['port']}"
    (duplicate,) = [f for f in found if f["rule"] == "duplicate_address"]
    assert (duplicate["guest"], duplicate["value"]) == (label(world["a"]), world["address_a"])
    assert (duplicate["severity"], duplicate["where"]) == ("error", where)
    (mac,) = [f for f in found if f["rule"] == "mac_collision"]
    assert (mac["guest"], mac["value"], mac["severity"]) == (
        label(world["b"]),
        mac_of(world["b"]),
        "error",
    )
    assert mac["where"] == where
    outside = [f for f in found if f["rule"] == "outside_prefix"]
    assert {f["prefix"] for f in outside} == {f"{NETWORK}.0/24"}
    assert {f["severity"] for f in outside} == {"warning"}
    (clash,) = [f for f in found if f["rule"] == "vlan_clash"]
    assert (clash["guest"], clash["value"], clash["severity"]) == (
        label(world["c"]),
        str(CLASH_VID),
        "warning",
    )
    assert CLASH_NAME in clash["where"] and conflicts["group"] in clash["where"]
    # Errors first.
    assert [f["severity"] for f in found][:2] == ["error", "error"]


def test_the_rest_preview_lists_each_conflict_with_its_severity_and_writes_nothing(
    stack, world, conflicts
):
    since = change_marker(stack)
    with stack.api() as api:
        answer = api.post(f"/plugins/proxbox/endpoints/proxmox/{world['endpoint']['id']}/preview/")
    assert answer.status_code == 200, answer.text
    report = answer.json()
    assert report["status"] == "previewed", report
    assert_every_rule(report["hygiene"], world, conflicts)
    assert report["netbox_requests"]["writes"] == 0
    assert object_changes_since(stack, since) == []


def test_the_preview_page_lists_them_and_the_jobs_page_after_apply_too(stack, world, conflicts):
    endpoint_id = world["endpoint"]["id"]
    since = change_marker(stack)
    with signed_in_page(stack, name="ipam-hygiene") as page:
        page.goto(f"/plugins/proxbox/endpoints/{endpoint_id}/", wait_until="domcontentloaded")
        page.locator("#preview-sync").click()  # the backend plans while the page loads
        rows = page.locator("#ipam-hygiene tr.hygiene-finding")
        rows.first.wait_for(timeout=180_000)
        rules = [rows.nth(i).get_attribute("data-rule") for i in range(rows.count())]
        assert set(rules) >= {"duplicate_address", "mac_collision", "outside_prefix", "vlan_clash"}
        assert rules[:2] == ["duplicate_address", "mac_collision"]  # the errors first
        duplicate = page.locator('#ipam-hygiene tr[data-rule="duplicate_address"]')
        assert (
            f"device {conflicts['device']} interface {conflicts['port']}" in duplicate.inner_text()
        )
        assert object_changes_since(stack, since) == []  # the page wrote nothing

        page.locator("#apply-sync button[type=submit]").click()
        page.wait_for_load_state("domcontentloaded")
        try:
            jobs = wait_until(
                lambda: [
                    j
                    for j in list_all(
                        stack, "/core/jobs/", object_id=endpoint_id, name="Proxbox sync"
                    )
                    if j["status"]["value"] in ("completed", "errored", "failed")
                ],
                600,
                "the applied sync's Job",
                interval=1,
            )
        except WaitTimeout:
            # What the Job, the worker and the backend said, before the workdir goes.
            jobs = list_all(stack, "/core/jobs/", object_id=endpoint_id)
            logs = {p.name: p.read_text(errors="replace")[-3000:] for p in logs_of(stack)}
            raise AssertionError((page.url, [j["status"] for j in jobs], logs)) from None
        (job,) = jobs
        assert job["status"]["value"] == "completed", job
        assert_every_rule(job["data"]["report"]["hygiene"], world, conflicts)
        page.goto(f"/core/jobs/{job['id']}/")
        table = page.locator("#sync-job-report #ipam-hygiene")
        table.wait_for(timeout=60_000)
        shown = {
            table.locator("tr.hygiene-finding").nth(i).get_attribute("data-rule")
            for i in range(table.locator("tr.hygiene-finding").count())
        }
        assert shown == {"duplicate_address", "mac_collision", "outside_prefix", "vlan_clash"}
