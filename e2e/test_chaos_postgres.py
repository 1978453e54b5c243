"""Chaos that converges, the database's side: NetBox's PostgreSQL restarted (fast
shutdown, then the same data dir on the same port) while `proxbox-sync run` is writing.
The run finishes or fails cleanly — one report, no traceback, no secret, a failed state
recorded when NetBox can take it — NetBox holds no duplicate or dangling object, and a
rerun reaches the state an undisturbed sync reaches.

Real processes: the dev stack's embedded PostgreSQL on a port and data dir of its own
(never the server the other suites share), NetBox (gunicorn) on it, the simulator
(`serve --tls`, the 30-guest `compact` profile) and `proxbox-sync run --json`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest
import sync_fixtures as fixtures
from chaos_support import (
    INVENTORY_TYPES,
    PrivatePostgres,
    assert_consistent,
    assert_converged,
    endpoint_cluster,
    sync_command,
    sync_midway,
    sync_state,
)
from sync_fixtures import (
    NetBoxServer,
    Simulator,
    create_endpoint,
    create_site,
    expected_inventory,
    object_changes_since,
)

sync_workdir = fixtures.sync_workdir


class PrivateNetBox(NetBoxServer):
    """NetBox on a PostgreSQL of its own, its database restored from the shared template
    (the one with the admin user, as every test NetBox's)."""

    def __init__(self, workdir, postgres: PrivatePostgres):
        super().__init__(workdir, database="chaos_pg_netbox", PROXBOX_DATABASE_URL=postgres.url)
        self.postgres = postgres

    def create_database(self) -> None:
        from django.db import connections

        source = connections["default"].settings_dict
        template = fixtures.admin_template(source)
        self.postgres.restore(source, template, self.database, self.workdir)

    def remove_database(self) -> None:
        """The whole server goes with the test's temp dir."""


@pytest.fixture(scope="module")
def postgres(sync_workdir):
    server = PrivatePostgres(sync_workdir)
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture(scope="module")
def netbox(sync_workdir, postgres):
    server = PrivateNetBox(sync_workdir, postgres)
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture(scope="module")
def pg_simulator(sync_workdir):
    simulator = Simulator("pgchaos", "compact", 19, sync_workdir)
    try:
        simulator.start().renumber("10.97.0")
        yield simulator
    finally:
        simulator.stop()


def test_postgres_restart_during_a_sync_converges_on_rerun(netbox, postgres, pg_simulator):
    site = create_site(netbox, "pbsync-chaos-pg")
    endpoint = create_endpoint(netbox, "pve-chaos-pg", pg_simulator, site=site)
    expected = expected_inventory(pg_simulator.inventory())
    argv, env = sync_command(netbox, pg_simulator, endpoint["name"])
    since = fixtures.change_marker(netbox)
    run = sync_midway(netbox, pg_simulator, endpoint["name"])
    try:
        down = postgres.restart()
        # Whether the run outlived the outage depends on what it was sending when the
        # restart cut NetBox off (a create is not repeated) and on how long the restart
        # took on a loaded machine: either way it must end as checked below.
        ended_during_outage = run.poll() is not None
        stdout, stderr = run.communicate(timeout=600)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    print(
        f"PostgreSQL down {down:.1f}s; the run exited {run.returncode}"
        f"{' during the outage' if ended_during_outage else ''}",
        file=sys.stderr,
    )
    # NetBox reconnects by itself: no request meets a session the restart cut off (each
    # of gunicorn's threads kept one), fresh connections to reach as many threads as can be.
    for _ in range(12):
        with netbox.api() as api:
            response = api.get(f"/plugins/proxbox/endpoints/proxmox/{endpoint['id']}/")
        assert response.status_code == 200, response.text[-2000:]

    # Finished or failed cleanly: its report, no traceback, no secret.
    stderr = stderr.decode()
    assert run.returncode in (0, 1), stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    for secret in (netbox.admin_token, pg_simulator.token_secret):
        assert secret not in stderr and secret not in stdout.decode()
    report = json.loads(stdout)
    print(f"run: {report['status']}, sync state {report['sync_state']}", file=sys.stderr)
    assert report["ok"] == (run.returncode == 0), report
    cluster_id = endpoint_cluster(netbox, endpoint["id"])
    partial = assert_consistent(netbox, cluster_id)
    # A failed state when NetBox could take it; a run that ended while NetBox was still
    # without its database says so and leaves the state the claim wrote.
    state = sync_state(netbox, cluster_id)["status"]["value"]
    if report["sync_state"] == "recorded":
        outcome = "failed" if report["error"] else "degraded" if not report["ok"] else "succeeded"
        assert state == outcome, state
    else:
        assert not report["ok"] and state == "never", (report["sync_state"], state)
        assert report["sync_state"].startswith("not recorded: "), report["sync_state"]
    # Honest counters: nothing counted as created that NetBox's change log does not show.
    # A write NetBox committed but answered 500 for (the restart cut its request off) is
    # counted as failed: the backend cannot know, and the rerun finds the object.
    changes = Counter(
        c["changed_object_type"]
        for c in object_changes_since(netbox, since)
        if c["action"]["value"] == "create"
    )
    for object_type in INVENTORY_TYPES:
        counted = report["counters"].get(object_type, {})
        created, failed = counted.get("created", 0), counted.get("failed", 0)
        assert created <= changes[object_type] <= created + failed, (object_type, counted)

    rerun = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    counters = json.loads(rerun.stdout)["counters"]
    assert_converged(netbox, cluster_id, expected, partial, counters)
