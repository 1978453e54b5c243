"""Realm sync, realm-sync jobs and the schedule analysis over HTTP.

The simulator models no LDAP/AD server: a sync passes PVE's checks, starts its
task, and the task fails where PVE would connect, leaving users and groups alone.
"""

from __future__ import annotations

import time
import uuid

import pytest
from simtest_support import expect_data, expect_error, official_apidoc

from proxmox_simulator.contracts import sources
from proxmox_simulator.domain import realm_sync_service
from proxmox_simulator.domain.errors import ParameterError

JAN_1_2026 = 1767225600  # a Thursday, 00:00 UTC


@pytest.fixture
def ldap_realm(root):
    realm = f"dir{uuid.uuid4().hex[:6]}"
    created = root.post(
        "/access/domains",
        data={
            "realm": realm,
            "type": "ldap",
            "server1": "ldap.example.test",
            "base_dn": "dc=example,dc=test",
            "user_attr": "uid",
        },
    )
    assert created.status_code == 200, created.text
    yield realm
    root.delete(f"/access/domains/{realm}")


def _users(root) -> list[str]:
    return sorted(u["userid"] for u in root.get("/access/users").json()["data"])


def test_sync_starts_a_task_that_fails_at_the_directory_server(root, ldap_realm):
    before = _users(root)
    missing = root.post(f"/access/domains/{ldap_realm}/sync", data={})
    expect_error(missing, 400, "Not passed as parameter and not defined in realm default")
    assert "scope" in missing.json()["errors"]

    upid = expect_data(
        root.post(f"/access/domains/{ldap_realm}/sync", data={"scope": "both", "dry-run": 1}),
        "/access/domains/{realm}/sync",
        "POST",
    )
    status = root.wait(upid)
    assert (status["type"], status["id"]) == ("auth-realm-sync-test", ldap_realm)
    assert "ldap.example.test" in status["exitstatus"]
    log = [
        line["t"] for line in root.get(f"/nodes/{status['node']}/tasks/{upid}/log").json()["data"]
    ]
    assert log[0] == f"(dry test run) starting sync for realm {ldap_realm}"
    assert log[-1] == f"TASK ERROR: {status['exitstatus']}"

    # The realm's sync-defaults-options supply what the request leaves out.
    root.put(
        f"/access/domains/{ldap_realm}", data={"sync-defaults-options": "scope=users"}
    ).raise_for_status()
    upid = expect_data(root.post(f"/access/domains/{ldap_realm}/sync", data={}))
    assert root.wait(upid)["type"] == "auth-realm-sync"
    assert _users(root) == before


def test_sync_refuses_unknown_and_non_directory_realms(root):
    expect_error(root.post("/access/domains/nosuch/sync", data={"scope": "users"}), 400, "Realm")
    refused = root.post("/access/domains/pve/sync", data={"scope": "users"})
    expect_error(refused, 500, "Cannot sync realm type 'pve'! Only LDAP/AD realms can be synced.")


def test_sync_options_follow_each_majors_schema():
    """6.x requires full and purge too; from 7.x remove-vanished replaced them."""
    six = sources.parse_artifact(
        sources.read_file(official_apidoc("6.4-15")), "6.4-15"
    ).contract.endpoint("/access/domains/{realm}/sync", "POST")
    declared = {p.name: p.default for p in six.parameters}
    with pytest.raises(ParameterError) as raised:
        realm_sync_service.sync_options(declared, {"scope": "users"}, {})
    assert set(raised.value.errors) == {"full"}
    options = realm_sync_service.sync_options(
        declared, {"scope": "users"}, {"sync-defaults-options": "full=1,purge=0"}
    )
    assert options == {"enable-new": "1", "full": "1", "purge": "0", "scope": "users"}


def test_realm_sync_jobs(root, ldap_realm):
    job = f"rs{uuid.uuid4().hex[:6]}"
    path = f"/cluster/jobs/realm-sync/{job}"
    expect_error(root.get(path), 400, f"No such job '{job}'")
    expect_error(root.post(path, data={"schedule": "sun 03:00", "realm": ldap_realm}), 400, "scope")
    expect_error(
        root.post(path, data={"schedule": "sun 03:00", "realm": "pam", "scope": "users"}),
        400,
        "Only LDAP/AD realms can be synced.",
    )
    expect_error(
        root.post(path, data={"schedule": "sun 03:00", "realm": "nosuch", "scope": "users"}),
        400,
        "No such realm 'nosuch'",
    )
    bad = root.post(path, data={"schedule": "someday", "realm": ldap_realm, "scope": "users"})
    expect_error(bad, 400, "schedule")
    assert "invalid calendar event 'someday'" in bad.json()["errors"]["schedule"]

    data = {"schedule": "sun 03:00", "realm": ldap_realm, "scope": "users", "comment": "weekly"}
    root.post(path, data=data).raise_for_status()
    expect_error(root.post(path, data=data), 500, f"Job '{job}' already exists")
    # Backup jobs share jobs.cfg, and so the IDs.
    backup = {"id": job, "vmid": "100", "storage": "local", "schedule": "02:30"}
    expect_error(root.post("/cluster/backup", data=backup), 500, f"Job '{job}' already exists")
    entry = expect_data(root.get(path))
    assert entry == {"type": "realm-sync", **data}

    (listed,) = [j for j in root.get("/cluster/jobs/realm-sync").json()["data"] if j["id"] == job]
    assert "last-run" not in listed  # the simulator schedules no job runs
    assert listed["next-run"] > time.time()
    run = time.gmtime(listed["next-run"])
    assert (run.tm_wday, run.tm_hour, run.tm_min) == (6, 3, 0)  # Sunday 03:00 (node in UTC)

    root.put(path, data={"schedule": "*/30", "delete": "comment"}).raise_for_status()
    entry = expect_data(root.get(path))
    assert entry["schedule"] == "*/30" and "comment" not in entry
    expect_error(root.put(path, data={"schedule": "*/30", "delete": "scope"}), 500, "scope")
    root.delete(path).raise_for_status()
    expect_error(root.delete(path), 400, f"No such job '{job}'")
    expect_error(root.put(path, data={"schedule": "daily"}), 500, "no such realm-sync job")


@pytest.mark.parametrize(
    ("schedule", "expected"),
    [
        ("*/15", ["Thu Jan  1 00:15:00 2026", "Thu Jan  1 00:30:00 2026"]),
        ("mon..fri 02:00", ["Thu Jan  1 02:00:00 2026", "Fri Jan  2 02:00:00 2026"]),
        ("sat,sun 02:00", ["Sat Jan  3 02:00:00 2026", "Sun Jan  4 02:00:00 2026"]),
        ("sat *-1..7 15:00", ["Sat Jan  3 15:00:00 2026", "Sat Feb  7 15:00:00 2026"]),
        ("quarterly", ["Wed Apr  1 00:00:00 2026", "Wed Jul  1 00:00:00 2026"]),
        ("2025-06-01", []),  # a date in the past never comes again
    ],
)
def test_schedule_analyze_evaluates_calendar_events(root, schedule, expected):
    answer = expect_data(
        root.get(
            "/cluster/jobs/schedule-analyze",
            params={"schedule": schedule, "starttime": JAN_1_2026, "iterations": 2},
        ),
        "/cluster/jobs/schedule-analyze",
    )
    assert [e["utc"] for e in answer] == expected
    assert [time.asctime(time.gmtime(e["timestamp"])) for e in answer] == expected


def test_schedule_analyze_counts_and_checks(root):
    answer = root.get("/cluster/jobs/schedule-analyze", params={"schedule": "hourly"}).json()
    times = [e["timestamp"] for e in answer["data"]]
    assert len(times) == 10 and times == sorted(times) and times[0] > time.time() - 5
    assert {b - a for a, b in zip(times, times[1:], strict=False)} == {3600}
    bad = root.get("/cluster/jobs/schedule-analyze", params={"schedule": "25:00"})
    expect_error(bad, 400, "schedule")
    too_many = root.get(
        "/cluster/jobs/schedule-analyze", params={"schedule": "daily", "iterations": 101}
    )
    expect_error(too_many, 400, "iterations")
