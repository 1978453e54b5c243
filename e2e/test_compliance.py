"""Data-protection compliance end to end: a simulator whose guests break each rule, one
sync, then the compliance REST list per rule and the UI in Chromium (the list, the VM's
tab, the dashboard widget).

The `small` seed has a vzdump archive from its boot day for every fifth guest (stale by
now) and a replication job of one guest to another node; its storages are not ZFS, so a
replication run fails as Proxmox's does ("missing replicate feature"). On top: a backup
job for all guests but one, a fresh backup of another, one replication run, and a
Proxmox Backup Server storage holding the newest backup of two more guests, one verified
`failed` and one `ok` by the simulator's lab control (PBS's verify job).
"""

from __future__ import annotations

import ssl
import time

import httpx
import pytest
from browser_support import requires_chromium, signed_in_page
from sync_fixtures import Simulator, create_endpoint, create_site, list_all, run_sync

COMPLIANCE = "/plugins/proxbox/compliance/"


@pytest.fixture(scope="module")
def simulator(sync_workdir):
    sim = Simulator("compliance", "small", 11, sync_workdir, PROXMOX_SIMULATOR_LAB="1")
    try:
        sim.start().renumber("10.103.0")
        yield sim
    finally:
        sim.stop()


def pbs_backup(simulator: Simulator, pve, guest: dict, storage: str, state: str) -> str:
    """Back `guest` up to the PBS storage and have PBS verify the snapshot as `state`."""
    simulator.wait_if_task(
        pve.post(
            f"/nodes/{guest['node']}/vzdump", data={"vmid": guest["vmid"], "storage": storage}
        ),
    )
    [snapshot] = pve.get(
        f"/nodes/{guest['node']}/storage/{storage}/content", params={"vmid": guest["vmid"]}
    ).json()["data"]
    verify = ssl.create_default_context(cafile=simulator.ca_bundle)
    with httpx.Client(base_url=simulator.url, verify=verify, timeout=30) as lab:
        answer = lab.post(
            "/ui/api/pbs/verify",
            json={"storage": storage, "volume": snapshot["volid"], "state": state},
        )
    assert answer.status_code == 200, answer.text
    return snapshot["volid"]


def task_exit(pve, upid: str) -> str:
    """The exit status of a task expected to fail."""
    node = upid.split(":")[1]
    for _ in range(200):
        data = pve.get(f"/nodes/{node}/tasks/{upid}/status").json()["data"]
        if data.get("status") == "stopped":
            return data.get("exitstatus", "")
        time.sleep(0.05)
    raise AssertionError(f"task {upid} still running")


@pytest.fixture(scope="module")
def arranged(netbox_server, simulator):
    """The guests arranged to break one rule each, synced once: name → role."""
    guests = sorted(
        (g["resource"] for g in simulator.inventory()["guests"].values()),
        key=lambda r: r["vmid"],
    )
    with simulator.api() as pve:
        (job,) = pve.get("/cluster/replication").json()["data"]
        replicated = next(g for g in guests if g["vmid"] == int(job["guest"]))
        archived = {
            v["vmid"]
            for node in {g["node"] for g in guests}
            for v in pve.get(
                f"/nodes/{node}/storage/local/content", params={"content": "backup"}
            ).json()["data"]
        }
        stale = next(g for g in guests if g["vmid"] in archived and g is not replicated)
        rest = [g for g in guests if g["vmid"] not in archived and g is not replicated]
        fresh, unjobbed, pbs_failed, pbs_ok = rest[:4]
        simulator.wait_if_task(
            pve.post(
                "/cluster/backup",
                data={
                    "id": "daily",
                    "schedule": "02:00",
                    "storage": "local",
                    "all": 1,
                    "exclude": str(unjobbed["vmid"]),
                },
            ),
        )
        simulator.wait_if_task(
            pve.post(
                f"/nodes/{fresh['node']}/vzdump",
                data={"vmid": fresh["vmid"], "storage": "local", "mode": "snapshot"},
            ),
        )
        added = pve.post(
            "/storage",
            data={
                "storage": "pbs-backups",
                "type": "pbs",
                "server": "pbs1.example.test",
                "datastore": "store1",
                "username": "backup@pbs",
                "password": "secret",
            },
        )
        assert added.status_code == 200, added.text
        pbs_backup(simulator, pve, pbs_failed, "pbs-backups", "failed")
        pbs_backup(simulator, pve, pbs_ok, "pbs-backups", "ok")
        upid = pve.post(f"/nodes/{replicated['node']}/replication/{job['id']}/schedule_now").json()[
            "data"
        ]
        assert "missing replicate feature" in task_exit(pve, upid)
        status = pve.get(f"/nodes/{replicated['node']}/replication/{job['id']}/status").json()
        assert status["data"]["fail_count"] >= 1, status  # the run failed, as on non-ZFS
    site = create_site(netbox_server, "pbsync-compliance")
    endpoint = create_endpoint(netbox_server, "pve-compliance", simulator, site=site)
    report = run_sync(netbox_server, simulator, endpoint["id"])
    assert report.ok, report.as_dict()
    return {
        "endpoint": endpoint,
        "cluster_id": report.cluster["id"],
        "fresh": fresh,
        "unjobbed": unjobbed,
        "stale": stale,
        "replicated": replicated,
        "pbs_failed": pbs_failed,
        "pbs_ok": pbs_ok,
    }


def rows(netbox_server, arranged, **params) -> dict[str, dict]:
    found = list_all(
        netbox_server,
        "/plugins/proxbox/compliance/",
        endpoint_id=arranged["endpoint"]["id"],
        **params,
    )
    return {r["name"]: r for r in found}


def test_the_backup_job_is_stored_with_its_selection(netbox_server, arranged):
    (job,) = list_all(
        netbox_server, "/plugins/proxbox/inventory/backup-jobs/", cluster_id=arranged["cluster_id"]
    )
    assert (job["select_all"], job["vmids"], job["exclude"], job["pool"], job["node"]) == (
        True,
        [],
        [arranged["unjobbed"]["vmid"]],
        "",
        "",
    )


def test_each_rule_through_rest(netbox_server, arranged):
    every = rows(netbox_server, arranged)
    fresh = every[arranged["fresh"]["name"]]
    assert fresh["vmid"] == arranged["fresh"]["vmid"]
    assert fresh["backup_job"] is True and fresh["last_backup_at"]
    assert fresh["failed_rules"] == [] and fresh["compliant"] is True

    unjobbed = every[arranged["unjobbed"]["name"]]
    assert unjobbed["backup_job"] is False
    assert "no_backup_job" in unjobbed["failed_rules"] and unjobbed["compliant"] is False

    stale = every[arranged["stale"]["name"]]
    assert stale["backup_job"] is True and stale["last_backup_at"]
    assert "backup_stale" in stale["failed_rules"]

    replicated = every[arranged["replicated"]["name"]]
    assert replicated["replication_state"] == "error" and replicated["replication_failures"] >= 1
    assert "replication_failing" in replicated["failed_rules"]
    assert replicated["ha_state"] == "started"

    assert set(rows(netbox_server, arranged, no_backup_job="true")) == {unjobbed["name"]}
    assert set(rows(netbox_server, arranged, replication_failing="true")) == {replicated["name"]}
    assert stale["name"] in rows(netbox_server, arranged, backup_stale="true")
    assert fresh["name"] not in rows(netbox_server, arranged, compliant="false")


def test_a_failed_pbs_verification_breaks_the_rule_by_default(netbox_server, arranged):
    """backup_require_verified is off: an unverified backup passes, a failed one does not."""
    every = rows(netbox_server, arranged)
    failed = every[arranged["pbs_failed"]["name"]]
    assert failed["last_backup_verification"] == "failed" and failed["last_backup_at"]
    assert failed["failed_rules"] == ["backup_unverified"] and failed["compliant"] is False
    assert set(rows(netbox_server, arranged, backup_unverified="true")) == {failed["name"]}
    verified = every[arranged["pbs_ok"]["name"]]
    assert verified["last_backup_verification"] == "ok"
    assert verified["failed_rules"] == [] and verified["compliant"] is True


def test_unverified_backups_once_the_endpoint_requires_verification(netbox_server, arranged):
    url = f"/plugins/proxbox/endpoints/proxmox/{arranged['endpoint']['id']}/"
    with netbox_server.api() as api:
        refused = api.patch(url, json={"backup_max_age_hours": 0})
        assert refused.status_code == 400 and "backup_max_age_hours" in refused.json()
        answer = api.patch(url, json={"backup_require_verified": True})
        assert answer.status_code == 200, answer.text
    try:
        # A directory storage's archive is never verified; a PBS snapshot verified ok is.
        every = rows(netbox_server, arranged)
        fresh = every[arranged["fresh"]["name"]]
        assert fresh["last_backup_verification"] == "none"
        assert fresh["failed_rules"] == ["backup_unverified"]
        unverified = rows(netbox_server, arranged, backup_unverified="true")
        assert fresh["name"] in unverified
        verified = every[arranged["pbs_ok"]["name"]]
        assert verified["failed_rules"] == [] and verified["name"] not in unverified
    finally:
        with netbox_server.api() as api:
            api.patch(url, json={"backup_require_verified": False})


@requires_chromium()
def test_list_tab_and_widget_in_a_browser(netbox_server, arranged):
    out_of_policy = rows(netbox_server, arranged, compliant="false")
    unjobbed = rows(netbox_server, arranged)[arranged["unjobbed"]["name"]]
    with signed_in_page(netbox_server, name="compliance") as page:
        page.goto(
            f"{COMPLIANCE}?endpoint_id={arranged['endpoint']['id']}&compliant=false",
            wait_until="domcontentloaded",
        )
        table = page.locator("table.object-list").inner_text()
        for name in out_of_policy:
            assert name in table
        assert arranged["fresh"]["name"] not in table
        assert "Data-protection compliance" in page.locator("body").inner_text()

        page.goto(
            f"/virtualization/virtual-machines/{unjobbed['id']}/", wait_until="domcontentloaded"
        )
        page.locator("a.nav-link", has_text="Data protection").click()
        page.wait_for_url("**/data-protection/", wait_until="domcontentloaded")
        rule = page.locator('tr[data-rule="no_backup_job"]')
        assert rule.get_attribute("data-broken") == "true"
        assert page.locator("[data-compliant]").get_attribute("data-compliant") == "false"

        page.goto("/", wait_until="domcontentloaded")
        page.get_by_text("Unlock Dashboard").click()
        page.locator("a.btn", has_text="Add Widget").click()
        page.locator("#id_widget_class").wait_for()
        page.locator("#id_widget_class").select_option("netbox_proxbox.ComplianceWidget")
        page.locator("#id_title").wait_for()
        page.locator('#widget_add_form button:has-text("Save")').click()
        row = page.locator('tr[data-endpoint="pve-compliance"]')
        row.wait_for()
        assert row.get_attribute("data-count") == str(len(out_of_policy))
        assert int(page.locator("[data-out-of-policy]").get_attribute("data-out-of-policy")) >= len(
            out_of_policy
        )
