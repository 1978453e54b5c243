"""Scheduled syncs: REST/UI validation, real RQ workers running the schedule, no overlap."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from datetime import timedelta

import django_rq
from core.choices import JobStatusChoices
from core.models import Job
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import TestCase, TransactionTestCase
from django.urls import reverse
from proxbox_processes import wait_until
from rest_framework.test import APIClient
from users.models import Token, User

from netbox_proxbox.constants import DEFAULT_SYNC_QUEUE, MIN_SYNC_INTERVAL
from netbox_proxbox.models import ProxmoxEndpoint
from netbox_proxbox.sync.jobs import SyncEndpointJob
from netbox_proxbox.sync.schedules import SyncScheduleKeeperJob
from proxbox_devstack import warm_netbox

from .backend import BACKEND_TOKEN, ScriptedSyncService, report, serve_backend
from .base import api_url, auth_header, grant, make_endpoint
from .test_sync_now import CHANGE, backend, sync_url

WORKER_TIMEOUT = 300  # a burst worker starts NetBox first: over 100 s on a loaded 2-core machine


def clear_queue():
    """Nothing of another test (or run) left in the RQ queues or their scheduled registries."""
    for name in ("default", DEFAULT_SYNC_QUEUE):
        queue = django_rq.get_queue(name)
        queue.empty()
        for job_id in queue.scheduled_job_registry.get_job_ids():
            queue.scheduled_job_registry.remove(job_id, delete_job=True)
        # RQ 2's started registry holds executions and refuses remove(); a test that
        # failed while a job ran leaves one there, which must not fail the next test.
        started = queue.started_job_registry
        for job_id, _execution in started.get_job_and_execution_ids(cleanup=False):
            job = queue.fetch_job(job_id)
            if job is not None:
                job.delete()
        queue.connection.delete(started.key)


class BlockingSyncService(ScriptedSyncService):
    """A backend run that stays in progress until the test releases it."""

    def __init__(self):
        super().__init__(report(counters={"virtualization.virtualmachine": {"created": 1}}))
        self.release = threading.Event()

    async def run(self, endpoint_id, emit, target=None):
        self.calls.append(int(endpoint_id))
        emit({"event": "stage", "stage": "guests", "state": "started", "total": 1})
        await asyncio.to_thread(self.release.wait, 60)
        emit({"event": "stage", "stage": "guests", "state": "finished", "done": 1})
        emit({"event": "finished", "report": self.report})


class ScheduleRestTest(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.endpoint = make_endpoint("pve-s")
        cls.operator = User.objects.create_user(username="operator")
        for name in (*CHANGE, "core.view_job"):
            grant(cls.operator, name)
        cls.token = Token.objects.create(user=cls.operator, write_enabled=True)

    def patch(self, **body):
        return APIClient().patch(
            api_url("proxmoxendpoint", self.endpoint.pk),
            body,
            format="json",
            **auth_header(self.token),
        )

    def test_interval_below_the_minimum_is_refused_naming_the_field(self):
        for bad in (MIN_SYNC_INTERVAL - 1, 0, -5, "often"):
            response = self.patch(sync_interval=bad)
            self.assertEqual(response.status_code, 400, response.content)
            self.assertIn("sync_interval", response.json())
        self.endpoint.refresh_from_db()
        self.assertIsNone(self.endpoint.sync_interval)
        self.assertFalse(SyncEndpointJob.get_jobs(self.endpoint).exists())

    def test_setting_an_interval_schedules_a_recurring_job_and_shows_the_next_run(self):
        with self.captureOnCommitCallbacks(execute=True):
            response = self.patch(sync_interval=MIN_SYNC_INTERVAL)
        self.assertEqual(response.status_code, 200, response.content)
        job = SyncEndpointJob.get_jobs(self.endpoint).get()
        self.assertEqual(job.status, JobStatusChoices.STATUS_SCHEDULED)
        self.assertEqual(job.interval, MIN_SYNC_INTERVAL)
        body = APIClient().get(
            api_url("proxmoxendpoint", self.endpoint.pk), **auth_header(self.token)
        )
        self.assertEqual(body.json()["sync_interval"], MIN_SYNC_INTERVAL)
        self.assertIsNotNone(body.json()["next_sync"])
        self.assertIsNone(body.json()["schedule_note"])

        # A different interval replaces the schedule; none removes it.
        with self.captureOnCommitCallbacks(execute=True):
            self.patch(sync_interval=60)
        jobs = SyncEndpointJob.get_jobs(self.endpoint)
        self.assertEqual([j.interval for j in jobs], [60])
        with self.captureOnCommitCallbacks(execute=True):
            self.patch(sync_interval=None)
        self.assertFalse(SyncEndpointJob.get_jobs(self.endpoint).exists())

    def test_a_disabled_endpoint_keeps_no_schedule_and_says_why(self):
        with self.captureOnCommitCallbacks(execute=True):
            self.patch(sync_interval=30)
        with self.captureOnCommitCallbacks(execute=True):
            self.patch(enabled=False)
        body = (
            APIClient()
            .get(api_url("proxmoxendpoint", self.endpoint.pk), **auth_header(self.token))
            .json()
        )
        self.assertIsNone(body["next_sync"])
        self.assertIn("disabled", body["schedule_note"])
        self.assertFalse(SyncEndpointJob.get_jobs(self.endpoint).exists())

        self.client.force_login(self.operator)
        page = self.client.get(self.endpoint.get_absolute_url()).content.decode()
        self.assertIn("Every 30 min", page)
        self.assertIn("Scheduled syncs do not run: the endpoint is disabled.", page)

        with self.captureOnCommitCallbacks(execute=True):
            self.patch(enabled=True)
        self.assertEqual(SyncEndpointJob.get_jobs(self.endpoint).get().interval, 30)

    def test_the_edit_form_refuses_a_short_interval(self):
        grant(self.operator, "netbox_proxbox.add_proxmoxendpoint")
        self.client.force_login(self.operator)
        url = reverse("plugins:netbox_proxbox:proxmoxendpoint_edit", args=[self.endpoint.pk])
        response = self.client.post(
            url,
            {
                "name": self.endpoint.name,
                "host": self.endpoint.host,
                "port": 8006,
                "token_id": self.endpoint.token_id,
                "mode": "cluster",
                "enabled": "on",
                "sync_interval": "1",
            },
        )
        self.assertEqual(response.status_code, 200)
        self.assertIn(
            f"Ensure this value is greater than or equal to {MIN_SYNC_INTERVAL}",
            response.content.decode(),
        )
        self.endpoint.refresh_from_db()
        self.assertIsNone(self.endpoint.sync_interval)

    def test_a_scheduled_occurrence_of_a_disabled_endpoint_fails_saying_why_and_stops(self):
        ProxmoxEndpoint.objects.filter(pk=self.endpoint.pk).update(enabled=False)
        job = SyncEndpointJob.enqueue(instance=self.endpoint, interval=30, immediate=True)
        job.refresh_from_db()
        self.assertEqual(job.status, JobStatusChoices.STATUS_FAILED)
        self.assertIn("is disabled", job.error)
        # No successor: the chain ends until the endpoint is enabled again.
        self.assertEqual(SyncEndpointJob.get_jobs(self.endpoint).count(), 1)

    def test_the_management_command_records_a_job_and_fails_loudly(self):
        with backend(ScriptedSyncService()):
            out = _call("proxbox_sync", "--endpoint", self.endpoint.name)
        job = SyncEndpointJob.get_jobs(self.endpoint).get()
        self.assertEqual(job.status, JobStatusChoices.STATUS_COMPLETED)
        self.assertIn(f"{self.endpoint.name}: job {job.pk} completed", out)

        ProxmoxEndpoint.objects.filter(pk=self.endpoint.pk).update(enabled=False)
        with self.assertRaisesMessage(CommandError, "1 of 1 endpoint sync(s) did not complete"):
            _call("proxbox_sync", "--endpoint", self.endpoint.name)
        with self.assertRaisesMessage(CommandError, "no Proxmox endpoint named 'nope'"):
            _call("proxbox_sync", "--endpoint", "nope")


def _call(*args) -> str:
    import io

    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


class RealWorkerTestCase(TransactionTestCase):
    """Jobs run by NetBox's own rqworker in a separate process, against committed rows."""

    def setUp(self):
        super().setUp()
        clear_queue()
        self.addCleanup(clear_queue)
        self.workers = []
        self.addCleanup(self.stop_workers)
        self.operator = User.objects.create_user(username="operator")
        for name in (*CHANGE, "core.view_job"):
            grant(self.operator, name)
        self.token = Token.objects.create(user=self.operator, write_enabled=True)

    def worker_env(self, backend_url) -> dict:
        env = dict(os.environ)
        env["PROXBOX_NETBOX_DATABASE"] = connection.settings_dict["NAME"]
        env["PROXBOX_TEST_PLUGIN_CONFIG"] = json.dumps(
            {"backend_url": backend_url, "backend_token": BACKEND_TOKEN, "sync_poll_interval": 0.05}
        )
        return env

    def drain(self, backend_url, *queues):
        # Forked from a process that has NetBox loaded already (a new one costs seconds of CPU).
        completed = warm_netbox.run(
            "netbox_proxbox.tests.rq_worker",
            ["--burst", *queues],
            self.worker_env(backend_url),
            WORKER_TIMEOUT,
        )
        if completed.returncode != 0:
            raise AssertionError(f"worker failed:\n{completed.stdout}\n{completed.stderr}")

    def start_worker(self, backend_url, *queues):
        process = subprocess.Popen(
            [sys.executable, "-m", "netbox_proxbox.tests.rq_worker", *queues],
            env=self.worker_env(backend_url),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.workers.append(process)

    def stop_workers(self):
        for process in self.workers:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()


class ScheduledSyncWorkerTest(RealWorkerTestCase):
    def test_a_schedule_runs_on_its_interval_and_survives_a_restart(self):
        service = ScriptedSyncService()
        endpoint = make_endpoint("pve-w")
        with serve_backend(service) as url:
            # Set without the save signal, as if configured while no worker ran (or Redis
            # was flushed): the system job NetBox's rqworker schedules at start restores it.
            ProxmoxEndpoint.objects.filter(pk=endpoint.pk).update(sync_interval=10)
            self.drain(url)
            keeper = SyncScheduleKeeperJob.get_jobs().filter(
                status=JobStatusChoices.STATUS_COMPLETED
            )
            self.assertEqual(keeper.get().data["scheduled_endpoints"], 1)
            first = SyncEndpointJob.get_jobs(endpoint).get()
            self.assertEqual(first.interval, 10)
            self.assertEqual(first.status, JobStatusChoices.STATUS_SCHEDULED)

            self.drain(url)  # the scheduler enqueues the due occurrence; the worker runs it
            first.refresh_from_db()
            self.assertEqual(first.status, JobStatusChoices.STATUS_COMPLETED, first.error)
            self.assertEqual(service.calls, [endpoint.pk])
            successor = SyncEndpointJob.get_jobs(endpoint).exclude(pk=first.pk).get()
            self.assertEqual(successor.status, JobStatusChoices.STATUS_SCHEDULED)
            self.assertEqual(successor.interval, 10)
            self.assertEqual(successor.scheduled, first.scheduled + timedelta(minutes=10))
            # Exactly one occurrence waits: the one the run scheduled after itself.
            waiting = SyncEndpointJob.get_jobs(endpoint).filter(
                status__in=JobStatusChoices.ENQUEUED_STATE_CHOICES
            )
            self.assertEqual(list(waiting), [successor])

    def test_no_two_runs_of_one_endpoint_overlap(self):
        service = BlockingSyncService()
        endpoint = make_endpoint("pve-o")
        client = APIClient()
        with serve_backend(service) as url:
            self.start_worker(url)
            response = client.post(sync_url(endpoint), **auth_header(self.token))
            self.assertEqual(response.status_code, 202, response.content)
            first = Job.objects.get(pk=response.json()["id"])
            wait_until(lambda: service.calls, 180, "the first run to reach the backend")

            # Live progress: the running Job's log and data show the stage in progress.
            def job_api():
                return client.get(f"/api/core/jobs/{first.pk}/", **auth_header(self.token)).json()

            wait_until(
                lambda: (
                    "Stage guests: started, 1 to process"
                    in [e["message"] for e in job_api()["log_entries"]]
                ),
                60,
                "the stage to appear in the running Job's log",
            )
            running = job_api()
            self.assertEqual(running["status"]["value"], JobStatusChoices.STATUS_RUNNING)
            self.assertEqual(
                running["data"]["progress"],
                {"stage": "guests", "done": 0, "total": 1, "percent": 0},
            )

            second = client.post(sync_url(endpoint), **auth_header(self.token))
            self.assertEqual(second.status_code, 409)
            self.assertEqual(second.json()["code"], "sync_in_progress")
            self.assertIn(f"job {first.pk}", second.json()["detail"])

            # A scheduled occurrence falling due meanwhile is coalesced, in another worker.
            ProxmoxEndpoint.objects.filter(pk=endpoint.pk).update(sync_interval=30)
            occurrence = SyncEndpointJob.enqueue(instance=endpoint, interval=30)
            self.drain(url)
            occurrence.refresh_from_db()
            self.assertEqual(occurrence.status, JobStatusChoices.STATUS_COMPLETED)
            self.assertEqual(occurrence.data["coalesced_into"], first.pk)
            self.assertIn(
                "coalesced into it", " ".join(e["message"] for e in occurrence.log_entries)
            )
            # ...and the schedule goes on.
            self.assertTrue(
                SyncEndpointJob.get_jobs(endpoint)
                .filter(status=JobStatusChoices.STATUS_SCHEDULED, interval=30)
                .exists()
            )

            service.release.set()
            wait_until(
                lambda: Job.objects.get(pk=first.pk).status == JobStatusChoices.STATUS_COMPLETED,
                60,
                "the first run to finish",
            )
        self.assertEqual(service.calls, [endpoint.pk])
