"""Sync Jobs run on their own RQ queue, so a long sync never holds NetBox's own worker."""

from __future__ import annotations

from datetime import timedelta

import django_rq
from core.choices import JobStatusChoices
from core.models import Job
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.urls import reverse
from django.utils import timezone
from netbox.jobs import JobRunner
from proxbox_processes import wait_until
from rest_framework.test import APIClient
from rq import Worker

from netbox_proxbox.constants import DEFAULT_SYNC_QUEUE, MIN_SYNC_INTERVAL
from netbox_proxbox.sync.config import sync_queue
from netbox_proxbox.sync.jobs import SyncEndpointJob, ensure_schedule
from proxbox_devstack.components import NETBOX_QUEUES as STACK_NETBOX_QUEUES
from proxbox_devstack.components import SYNC_QUEUE as STACK_SYNC_QUEUE

from .backend import BACKEND_TOKEN, ScriptedSyncService, serve_backend
from .base import auth_header, make_endpoint
from .test_schedules import BlockingSyncService, RealWorkerTestCase, clear_queue
from .test_sync_now import SyncNowTestCase, plugin_config, sync_url

NETBOX_QUEUES = ("high", "default", "low")


class NetBoxHousekeepingStandIn(JobRunner):
    """A job of NetBox's own kind: no object, so NetBox puts it on its "default" queue."""

    class Meta:
        name = "Queue layout probe (NetBox default queue)"

    def run(self, *args, **kwargs):
        self.job.data = {"ran": True}


def queued_ids(name: str) -> set[str]:
    queue = django_rq.get_queue(name)
    return {*queue.get_job_ids(), *queue.scheduled_job_registry.get_job_ids()}


class SyncQueueRoutingTest(SyncNowTestCase):
    def setUp(self):
        super().setUp()
        clear_queue()
        self.addCleanup(clear_queue)

    def test_sync_now_lands_on_the_sync_queue_and_netbox_jobs_stay_on_default(self):
        with self.captureOnCommitCallbacks(execute=True):
            response = self.sync()
            own = NetBoxHousekeepingStandIn.enqueue()
        self.assertEqual(response.status_code, 202, response.content)
        job = Job.objects.get(pk=response.json()["id"])
        self.assertEqual(job.queue_name, DEFAULT_SYNC_QUEUE)
        self.assertIn(str(job.job_id), django_rq.get_queue(DEFAULT_SYNC_QUEUE).get_job_ids())
        for name in NETBOX_QUEUES:
            self.assertNotIn(str(job.job_id), queued_ids(name), name)

        # NetBox's own job keeps NetBox's queue; the sync queue never sees it.
        self.assertEqual(own.queue_name, "default")
        self.assertIn(str(own.job_id), django_rq.get_queue("default").get_job_ids())
        self.assertNotIn(str(own.job_id), queued_ids(DEFAULT_SYNC_QUEUE))

    def test_a_schedule_and_the_occurrence_netbox_reschedules_stay_on_the_sync_queue(self):
        self.endpoint.sync_interval = MIN_SYNC_INTERVAL
        self.endpoint.save()
        with self.captureOnCommitCallbacks(execute=True):
            scheduled = ensure_schedule(self.endpoint)
        self.assertEqual(scheduled.queue_name, DEFAULT_SYNC_QUEUE)
        registry = django_rq.get_queue(DEFAULT_SYNC_QUEUE).scheduled_job_registry
        self.assertIn(str(scheduled.job_id), registry.get_job_ids())
        self.assertNotIn(str(scheduled.job_id), queued_ids("default"))
        registry.remove(str(scheduled.job_id), delete_job=True)

        # JobRunner.handle enqueues the successor of a recurring run itself, naming no queue;
        # called here as the worker calls it (RQ keeps its job_id, handle() gets the Job).
        with (
            serve_backend(ScriptedSyncService()) as url,
            plugin_config(backend_url=url, backend_token=BACKEND_TOKEN, sync_poll_interval=0.05),
            self.captureOnCommitCallbacks(execute=True),
        ):
            scheduled.status = JobStatusChoices.STATUS_PENDING
            scheduled.save()
            SyncEndpointJob.handle(job=scheduled)
        scheduled.refresh_from_db()
        self.assertEqual(scheduled.status, JobStatusChoices.STATUS_COMPLETED, scheduled.error)
        successor = SyncEndpointJob.get_jobs(self.endpoint).exclude(pk=scheduled.pk).get()
        self.assertEqual(successor.status, JobStatusChoices.STATUS_SCHEDULED)
        self.assertEqual(successor.queue_name, DEFAULT_SYNC_QUEUE)
        self.assertIn(str(successor.job_id), registry.get_job_ids())

    def test_sync_now_warns_when_no_worker_serves_the_sync_queue(self):
        self.client.force_login(self.operator)
        action = reverse("plugins:netbox_proxbox:proxmoxendpoint_sync_now", args=[self.endpoint.pk])
        warning = f"No RQ worker serves the queue {DEFAULT_SYNC_QUEUE}"
        with self.captureOnCommitCallbacks(execute=True):
            page = self.client.post(action, follow=True).content.decode()
        self.assertIn(warning, page)
        self.assertIn(f"manage.py rqworker {DEFAULT_SYNC_QUEUE}", page)

        # A live worker registered in Redis for the sync queue: no warning. One serving
        # only NetBox's queues does not count.
        connection = django_rq.get_connection(DEFAULT_SYNC_QUEUE)
        for queues, shown in ((NETBOX_QUEUES, True), ((DEFAULT_SYNC_QUEUE,), False)):
            worker = Worker(list(queues), connection=connection, name=f"layout-{queues[0]}")
            worker.register_birth()
            self.addCleanup(worker.register_death)
            Job.objects.all().delete()
            with self.captureOnCommitCallbacks(execute=True):
                page = self.client.post(action, follow=True).content.decode()
            self.assertIn("queued as", page)
            self.assertEqual(warning in page, shown, queues)
            worker.register_death()

    def test_sync_queue_may_name_netbox_default_for_a_single_worker(self):
        with plugin_config(sync_queue="default"), self.captureOnCommitCallbacks(execute=True):
            response = self.sync()
        job = Job.objects.get(pk=response.json()["id"])
        self.assertEqual(job.queue_name, "default")
        self.assertIn(str(job.job_id), django_rq.get_queue("default").get_job_ids())

    def test_an_unknown_queue_is_refused_naming_the_setting(self):
        with plugin_config(sync_queue="proxbox-nowhere"):
            with self.assertRaisesMessage(ImproperlyConfigured, '["sync_queue"]') as caught:
                sync_queue()
            self.assertIn("'proxbox-nowhere'", str(caught.exception))
            self.assertIn(DEFAULT_SYNC_QUEUE, str(caught.exception))


class WorkerLayoutTest(RealWorkerTestCase):
    """NetBox's worker (high, default, low) and the sync worker, each its own process."""

    def test_netbox_jobs_complete_while_a_sync_runs_on_its_own_worker(self):
        service = BlockingSyncService()
        self.addCleanup(service.release.set)
        endpoint = make_endpoint("pve-layout")
        client = APIClient()
        with serve_backend(service) as url:
            self.start_worker(url, *NETBOX_QUEUES)
            self.start_worker(url, DEFAULT_SYNC_QUEUE)
            response = client.post(sync_url(endpoint), **auth_header(self.token))
            self.assertEqual(response.status_code, 202, response.content)
            sync = Job.objects.get(pk=response.json()["id"])
            wait_until(lambda: service.calls, 180, "the sync to reach the backend")

            started = timezone.now()
            own = NetBoxHousekeepingStandIn.enqueue()
            wait_until(
                lambda: Job.objects.get(pk=own.pk).status == JobStatusChoices.STATUS_COMPLETED,
                60,
                "NetBox's own job to complete on NetBox's worker",
            )
            own.refresh_from_db()
            self.assertEqual(own.data, {"ran": True})
            self.assertLess(own.completed - started, timedelta(seconds=60))
            # ...while the sync still holds its own worker.
            sync.refresh_from_db()
            self.assertEqual(sync.status, JobStatusChoices.STATUS_RUNNING)

            service.release.set()
            wait_until(
                lambda: Job.objects.get(pk=sync.pk).status == JobStatusChoices.STATUS_COMPLETED,
                60,
                "the sync to finish",
            )
        self.assertEqual(service.calls, [endpoint.pk])


def test_the_stacks_workers_serve_queues_netbox_knows_and_the_sync_queue_apart():
    """`proxbox up` names the queues without importing NetBox: they must match its settings."""
    assert STACK_SYNC_QUEUE == DEFAULT_SYNC_QUEUE
    assert {*STACK_NETBOX_QUEUES, STACK_SYNC_QUEUE} <= set(settings.RQ_QUEUES)
    assert tuple(STACK_NETBOX_QUEUES) == NETBOX_QUEUES
