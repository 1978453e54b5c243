"""Chaos that converges, NetBox's side: its RQ worker killed with SIGKILL (with its work
horse, as on a lost host) mid-validation of a script-project revision and mid-"Sync now".

Real processes: a NetBox (gunicorn) of its own, configured with a short validation lease;
NetBox's `rqworker`; the sync backend's `serve`; the simulator (`serve --tls`) on a
30-guest profile.

- Mid-validation: the lease outlives the worker, so nothing reclaims the revision
  before it expires; after expiry the next upload queues a new Job, which claims the
  revision and records its verdict. In CI.
- Mid-"Sync now": the backend's run does not depend on the worker and finishes; the Job
  shows "running" until RQ declares it abandoned (its heartbeat, at least 60 s, then
  the next worker's maintenance pass), and is then errored, not re-queued (see
  docs/reliability.md). A second "Sync now" converges. RQ adds a fixed 60 s to every
  heartbeat's expiry, so instead of waiting that out the test moves the killed
  executions' expiry in RQ's started registry to the present, which is all the passing
  of that time changes; the next worker's maintenance pass then finds them. In CI.
"""

from __future__ import annotations

import io
import os
import time
import zipfile
from datetime import datetime, timedelta

import pytest
import redis
import sync_fixtures as fixtures
from chaos_support import (
    BackendServer,
    RQWorker,
    assert_consistent,
    assert_converged,
    endpoint_cluster,
    sync_state,
    vm_creates,
)
from proxbox_processes import wait_until
from sync_fixtures import (
    NetBoxServer,
    Simulator,
    change_marker,
    create_endpoint,
    create_site,
    expected_inventory,
)

from proxbox_devstack import redis_databases
from proxbox_devstack.paths import data_dir as default_data_dir
from proxbox_devstack.secrets import load_or_create_secrets

sync_workdir = fixtures.sync_workdir

# Short, but long enough that the upload right after the kill still meets a live lease.
VALIDATION_JOB_TIMEOUT = 10
VALIDATION_LEASE = 12
VALIDATION_JOB = "Script project validation"
PROJECTS = "/plugins/script-projects/projects/"
CONFIGURATION = f"""
from proxbox_devstack.netbox_configuration import *  # noqa: F403

PLUGINS_CONFIG = {{
    **PLUGINS_CONFIG,  # noqa: F405
    "netbox_script_projects": {{
        "validation_job_timeout": {VALIDATION_JOB_TIMEOUT},
        "validation_lease": {VALIDATION_LEASE},
    }},
}}
"""


@pytest.fixture(scope="module")
def workers_dir(sync_workdir):
    path = sync_workdir / "chaos-workers"
    path.mkdir()
    (path / "chaos_netbox_configuration.py").write_text(CONFIGURATION)
    return path


@pytest.fixture(scope="module")
def worker_netbox(workers_dir):
    """A NetBox of its own (with a Redis pair of its own, as every test NetBox): the
    short lease must hold in gunicorn and the worker alike."""
    env = {
        "NETBOX_CONFIGURATION": "chaos_netbox_configuration",
        "PYTHONPATH": str(workers_dir),
    }
    server = NetBoxServer(workers_dir, database=f"chl_netbox_{os.getpid()}", **env)
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture(scope="module")
def workers_simulator(workers_dir):
    simulator = Simulator("workers", "compact", 17, workers_dir)
    try:
        simulator.start().renumber("10.92.0")
        yield simulator
    finally:
        simulator.stop()


@pytest.fixture(scope="module")
def backend(worker_netbox, workers_simulator, workers_dir):
    secrets = load_or_create_secrets(default_data_dir())
    server = BackendServer(
        worker_netbox, workers_dir, secrets["backend_api_token"], workers_simulator.ca_bundle
    )
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture(scope="module")
def worker(worker_netbox, workers_dir, backend):
    """Started by each test (a killed worker is replaced by a new one, like a supervisor).
    It knows the backend from the start: one NetBox start-up fewer than restarting it
    for the sync case."""
    worker = RQWorker(worker_netbox, workers_dir, PROXBOX_BACKEND_URL=backend.url)
    try:
        yield worker
    finally:
        worker.stop()


@pytest.fixture(scope="module")
def killed_jobs() -> list[int]:
    """NetBox Jobs whose worker was killed under them, for the abandonment check."""
    return []


def _job(netbox: NetBoxServer, job_id: int) -> dict:
    with netbox.api() as api:
        return api.get(f"/core/jobs/{job_id}/").json()


def _validation_jobs(netbox: NetBoxServer, revision_id: int) -> list[dict]:
    with netbox.api() as api:
        jobs = api.get("/core/jobs/", params={"name": VALIDATION_JOB, "limit": 1000}).json()
    return sorted(
        (j for j in jobs["results"] if (j["data"] or {}).get("revision") == revision_id),
        key=lambda j: j["id"],
    )


def _slow_once_source(marker) -> bytes:
    """A Script whose first import (the first validation) blocks, leaving a marker."""
    return (
        "import os\nimport time\n\nfrom extras.scripts import Script\n\n"
        f"if not os.path.exists({str(marker)!r}):\n"
        f"    open({str(marker)!r}, 'w').close()\n"
        "    time.sleep(600)\n\n\n"
        "class SlowOnce(Script):\n    def run(self, data, commit):\n        pass\n"
    ).encode()


def test_validation_killed_midway_is_reclaimed_after_lease_expiry(
    worker_netbox, worker, workers_dir, killed_jobs
):
    marker = workers_dir / "validation-started"
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("scripts/slow.py", _slow_once_source(marker))
    with worker_netbox.api() as api:
        project = api.post(
            PROJECTS, json={"name": "chaos", "key": "chaos", "activation_policy": "manual"}
        )
        assert project.status_code == 201, project.text
        project = project.json()
        selected = api.post(
            "/plugins/script-projects/script-files/",
            json={"project": project["id"], "path": "scripts/slow.py"},
        )
        assert selected.status_code == 201, selected.text

        def upload() -> dict:
            response = api.post(
                f"{PROJECTS}{project['id']}/upload/",
                files={"file": ("chaos.zip", archive.getvalue(), "application/zip")},
            )
            assert response.status_code in (200, 201), response.text
            return response.json()["revision"]

        def revision_status(revision_id: int) -> str:
            revision = api.get(f"/plugins/script-projects/project-revisions/{revision_id}/")
            return revision.json()["status"]["value"]

        revision = upload()
        [first] = _validation_jobs(worker_netbox, revision["id"])
        worker.start()
        wait_until(marker.exists, 120, "the validation's import")
        assert revision_status(revision["id"]) == "validating"
        worker.kill9()
        killed_jobs.append(first["id"])

        # The lease is live: an upload resolving to the revision queues nothing.
        upload()
        assert [j["id"] for j in _validation_jobs(worker_netbox, revision["id"])] == [first["id"]]
        assert revision_status(revision["id"]) == "validating"

        def requeued() -> list[dict]:
            upload()
            return _validation_jobs(worker_netbox, revision["id"])[1:]

        # Each poll is an upload: once a second is enough to see the lease run out.
        [second] = wait_until(requeued, 60, "a new validation Job after the lease", interval=1)
        # Queued only once the lease had run out (it was taken after the first Job started).
        started = datetime.fromisoformat(_job(worker_netbox, first["id"])["started"])
        assert datetime.fromisoformat(second["created"]) >= started + timedelta(
            seconds=VALIDATION_LEASE
        )
        assert second["status"]["value"] == "pending"

        worker.start()
        verdict = wait_until(
            lambda: (
                revision_status(revision["id"]) in ("valid", "invalid")
                and revision_status(revision["id"])
            ),
            120,
            "the verdict",
            interval=0.5,
        )
        assert verdict == "valid", api.get(
            f"/plugins/script-projects/project-revisions/{revision['id']}/"
        ).json()
        done = _job(worker_netbox, second["id"])
        assert done["status"]["value"] == "completed", done
        files = api.get(
            "/plugins/script-projects/script-files/", params={"project_id": project["id"]}
        ).json()["results"]
        assert [f["discovery_status"]["value"] for f in files] == ["discovered"]
        # Exactly one Job after the expiry: the later uploads found the revision claimed.
        assert len(_validation_jobs(worker_netbox, revision["id"])) == 2


def _expire_heartbeat(netbox: NetBoxServer, job_uuid: str) -> None:
    """Let the heartbeat of the Job's execution run out now: its entry in RQ's started
    registry expires at the present instead of up to 90 s later (the score is the only
    thing RQ's maintenance pass compares with the clock). Nothing to do once RQ has
    given the execution up on its own."""
    url = os.environ["PROXBOX_REDIS_URL"].rstrip("/")
    tasks = redis_databases.from_env(netbox.env()).tasks
    if not redis_databases.url_names_database(url):
        url = f"{url}/{tasks}"
    with redis.Redis.from_url(url) as client:
        for key in client.scan_iter("rq:wip:*"):
            for member, score in client.zscan_iter(key):
                if member.decode().startswith(job_uuid) and score > time.time():
                    client.zadd(key, {member: time.time() - 1}, xx=True)


def test_sync_now_killed_midway_is_errored_and_the_rerun_converges(
    worker_netbox, workers_simulator, backend, worker, killed_jobs
):
    expected = expected_inventory(workers_simulator.inventory())
    site = create_site(worker_netbox, "pbsync-chaos-workers")
    endpoint = create_endpoint(worker_netbox, "pve-chaos-workers", workers_simulator, site=site)
    if not worker.running:  # the validation case leaves its replacement worker running
        worker.start()
    since = change_marker(worker_netbox)
    with worker_netbox.api() as api:
        job = api.post(f"/plugins/proxbox/endpoints/proxmox/{endpoint['id']}/sync/")
        assert job.status_code in (200, 201, 202), job.text
        job = job.json()
    # Each poll is a change-log query to the NetBox the sync writes to: a few a second
    # still kill the worker within a create or two of the fifth.
    wait_until(
        lambda: vm_creates(worker_netbox, since) >= 5, 300, "the sync's first VMs", interval=0.25
    )
    worker.kill9()
    killed_jobs.append(job["id"])
    assert _job(worker_netbox, job["id"])["status"]["value"] == "running"

    # The backend's run outlives the worker that asked for it.
    cluster_id = endpoint_cluster(worker_netbox, endpoint["id"])
    wait_until(
        lambda: sync_state(worker_netbox, cluster_id)["status"]["value"] == "succeeded",
        600,
        "the backend's run",
        interval=1,
    )
    before = assert_consistent(worker_netbox, cluster_id)

    # RQ gives the execution up when its heartbeat runs out; a worker starting after that
    # finds it in its first maintenance pass and runs the Job's failure callback.
    for job_id in killed_jobs:
        _expire_heartbeat(worker_netbox, _job(worker_netbox, job_id)["job_id"])
    worker.start()
    for job_id in killed_jobs:
        lost = wait_until(
            lambda job_id=job_id: (
                _job(worker_netbox, job_id)["status"]["value"] != "running"
                and _job(worker_netbox, job_id)
            ),
            120,
            f"Job {job_id} leaving 'running'",
            interval=1,
        )
        assert lost["status"]["value"] == "errored", lost
        assert "stopped before the Job finished" in lost["error"], lost
        if lost["name"] == "Proxbox sync":  # it names the run that went on without it
            assert lost["data"]["backend_run"] in lost["error"], lost

    with worker_netbox.api() as api:
        rerun = api.post(f"/plugins/proxbox/endpoints/proxmox/{endpoint['id']}/sync/").json()
    done = wait_until(
        lambda: (
            _job(worker_netbox, rerun["id"])["status"]["value"]
            in ("completed", "errored", "failed")
            and _job(worker_netbox, rerun["id"])
        ),
        600,
        "the rerun",
        interval=1,
    )
    assert done["status"]["value"] == "completed", (done["error"], done["data"])
    assert_converged(
        worker_netbox, cluster_id, expected, before, done["data"]["report"]["counters"]
    )
