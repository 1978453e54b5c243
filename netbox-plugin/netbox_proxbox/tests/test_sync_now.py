"""Sync now: REST action and UI button enqueue a Job that drives the real sync backend's API."""

from __future__ import annotations

import contextlib
from unittest import mock

import django_rq
import pytest
from core.choices import JobStatusChoices
from core.models import Job
from django.conf import settings
from django.test import Client, TestCase, override_settings
from django.urls import reverse
from proxbox_processes import free_port
from rest_framework.test import APIClient
from rq.timeouts import UnixSignalDeathPenalty
from users.models import Token, User

from netbox_proxbox.models import ProxmoxEndpoint
from netbox_proxbox.sync.jobs import SyncEndpointJob
from proxbox_backend.clients.http import RetryPolicy
from proxbox_backend.clients.proxmox import ProxmoxClient
from proxbox_backend.config import Settings
from proxbox_backend.secrets import Secret
from proxbox_backend.service import SyncService

from .backend import BACKEND_TOKEN, ScriptedSyncService, report, serve_backend
from .base import auth_header, grant, make_endpoint

CHANGE = ("netbox_proxbox.view_proxmoxendpoint", "netbox_proxbox.change_proxmoxendpoint")


def sync_url(endpoint_or_pk) -> str:
    pk = getattr(endpoint_or_pk, "pk", endpoint_or_pk)
    return reverse("plugins-api:netbox_proxbox-api:proxmoxendpoint-sync", kwargs={"pk": pk})


def plugin_config(**values):
    merged = {**settings.PLUGINS_CONFIG["netbox_proxbox"], **values}
    return override_settings(PLUGINS_CONFIG={**settings.PLUGINS_CONFIG, "netbox_proxbox": merged})


@contextlib.contextmanager
def jobs_run_inline():
    """What an RQ worker would do, in this thread: NetBox's own `immediate=True`."""
    enqueue = SyncEndpointJob.enqueue.__func__

    def inline(cls, *args, **kwargs):
        kwargs["immediate"] = True
        return enqueue(cls, *args, **kwargs)

    with mock.patch.object(SyncEndpointJob, "enqueue", classmethod(inline)):
        yield


@contextlib.contextmanager
def backend(service, **config):
    """The real backend app serving `service`, with NetBox configured to reach it."""
    with serve_backend(service) as url:
        options = {"backend_url": url, "backend_token": BACKEND_TOKEN, "sync_poll_interval": 0.05}
        with plugin_config(**{**options, **config}), jobs_run_inline():
            yield url


class SyncNowTestCase(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.endpoint = make_endpoint("pve-a")
        cls.operator = User.objects.create_user(username="operator")
        for name in (*CHANGE, "core.view_job"):
            grant(cls.operator, name)
        cls.token = Token.objects.create(user=cls.operator, write_enabled=True)

    def sync(self, endpoint=None, token=None):
        return APIClient().post(
            sync_url(endpoint or self.endpoint), **auth_header(token or self.token)
        )

    def job(self) -> Job:
        return SyncEndpointJob.get_jobs(self.endpoint).get()


class SyncNowRestTest(SyncNowTestCase):
    def test_completed_run_stores_its_summary_on_the_job(self):
        run_report = report(counters={"virtualization.virtualmachine": {"created": 3}})
        service = ScriptedSyncService(run_report)
        with backend(service):
            response = self.sync()
        self.assertEqual(response.status_code, 202, response.content)
        body = response.json()
        job = self.job()
        self.assertEqual(body["id"], job.pk)
        self.assertEqual(body["name"], "Proxbox sync")
        self.assertEqual(body["object_id"], self.endpoint.pk)
        self.assertEqual(body["status"]["value"], JobStatusChoices.STATUS_COMPLETED)
        self.assertEqual(service.calls, [self.endpoint.pk])
        self.assertEqual(job.status, JobStatusChoices.STATUS_COMPLETED)
        self.assertEqual(job.user, self.operator)
        self.assertEqual(job.data["report"], run_report)
        self.assertEqual(job.data["endpoint"], self.endpoint.pk)
        self.assertTrue(job.data["backend_run"])
        log = [entry["message"] for entry in job.log_entries]
        self.assertIn("Stage guests: 2 processed", log)
        self.assertIn(
            "virtualization.virtualmachine: created 3, updated 0, unchanged 0, deleted 0, failed 0",
            log,
        )

    def test_run_with_failed_objects_fails_the_job_with_the_reason(self):
        run_report = report(failures=[("virtualization.virtualmachine", "vm-7", "name clash")])
        with backend(ScriptedSyncService(run_report)):
            self.assertEqual(self.sync().status_code, 202)
        job = self.job()
        self.assertEqual(job.status, JobStatusChoices.STATUS_FAILED)
        self.assertIn("vm-7: name clash", job.error)
        self.assertEqual(job.data["report"]["failures"][0]["label"], "vm-7")

    def test_permission_and_state_matrix(self):
        viewer = User.objects.create_user(username="viewer")
        grant(viewer, CHANGE[0])
        constrained = User.objects.create_user(username="constrained")
        grant(constrained, CHANGE[0])
        grant(constrained, CHANGE[1], constraints={"name": "other"})
        disabled = make_endpoint("pve-off", enabled=False)
        cases = [
            ("view without change", Token.objects.create(user=viewer), self.endpoint, 403),
            ("change elsewhere", Token.objects.create(user=constrained), self.endpoint, 403),
            (
                "read-only token",
                Token.objects.create(user=self.operator, write_enabled=False),
                self.endpoint,
                403,
            ),
            (
                "invisible endpoint",
                Token.objects.create(user=User.objects.create_user("x")),
                self.endpoint,
                404,
            ),
            ("unknown endpoint", self.token, 999999, 404),
            ("disabled endpoint", self.token, disabled, 409),
        ]
        for label, token, endpoint, expected in cases:
            with self.subTest(label):
                self.assertEqual(self.sync(endpoint, token).status_code, expected)
        self.assertFalse(Job.objects.filter(name=SyncEndpointJob.name).exists())

    def test_enqueued_without_running_when_no_worker_is_asked(self):
        # Outside the inline switch the Job waits for an RQ worker (queued on commit).
        with self.captureOnCommitCallbacks(execute=False) as callbacks:
            response = self.sync()
        self.assertEqual(response.status_code, 202)
        self.assertEqual(response.json()["status"]["value"], JobStatusChoices.STATUS_PENDING)
        self.assertEqual(len(callbacks), 1)
        self.assertEqual(callbacks[0].keywords["job"], self.job())
        self.assertGreater(callbacks[0].keywords["job_timeout"], 3600)


class SyncNowProblemsTest(SyncNowTestCase):
    def errored(self) -> Job:
        job = self.job()
        self.assertEqual(job.status, JobStatusChoices.STATUS_ERRORED)
        return job

    def test_backend_url_unset(self):
        with plugin_config(backend_url=None), jobs_run_inline():
            self.assertEqual(self.sync().status_code, 202)
        self.assertIn('["backend_url"] is not set', self.errored().error)

    def test_backend_url_malformed(self):
        with plugin_config(backend_url="backend:8000"), jobs_run_inline():
            self.sync()
        self.assertIn("must be an http(s) URL", self.errored().error)

    def test_backend_unreachable(self):
        url = f"http://127.0.0.1:{free_port()}"
        with plugin_config(backend_url=url), jobs_run_inline():
            self.sync()
        error = self.errored().error
        self.assertIn(f"the sync backend at {url} is unreachable", error)

    def test_wrong_backend_token(self):
        with backend(ScriptedSyncService(), backend_token="not-the-token"):
            self.sync()
        error = self.errored().error
        self.assertIn("401", error)
        self.assertIn("PROXBOX_BACKEND_API_TOKEN", error)
        self.assertNotIn("not-the-token", error)

    def test_run_outliving_the_sync_timeout(self):
        service = ScriptedSyncService(finish=False)
        with backend(service, sync_timeout=0.5):
            self.sync()
            # The backend still holds the run: a second request is refused by it (409).
            self.sync()
        first, second = SyncEndpointJob.get_jobs(self.endpoint).order_by("pk")
        self.assertIn("had not finished after 0.5 s", first.error)
        self.assertEqual(first.status, JobStatusChoices.STATUS_ERRORED)
        self.assertIn("already running on the backend", second.error)
        self.assertEqual(service.calls, [self.endpoint.pk])

    @pytest.mark.timeout(60)  # without the deadline, the Job would follow the stream forever
    def test_a_hung_run_between_keep_alives_still_ends_at_the_sync_timeout(self):
        """The backend's event stream sends keep-alive comments while a run is quiet; they
        must not keep the Job waiting past its sync timeout."""
        import fastapi.routing

        service = ScriptedSyncService(finish=False)
        with (
            mock.patch.object(fastapi.routing, "_PING_INTERVAL", 0.1),
            backend(service, sync_timeout=1.5),
        ):
            self.sync()
        job = self.job()
        self.assertEqual(job.status, JobStatusChoices.STATUS_ERRORED)
        self.assertIn("had not finished after 1.5 s", job.error)

    def test_sync_timeout_malformed(self):
        with backend(ScriptedSyncService(), sync_timeout="soon"):
            self.sync()
        self.assertIn('["sync_timeout"] must be a positive number', self.errored().error)


class SyncNowButtonTest(SyncNowTestCase):
    def page(self, client, endpoint=None):
        return client.get((endpoint or self.endpoint).get_absolute_url()).content.decode()

    def client_for(self, user):
        client = Client()
        client.force_login(user)
        return client

    def test_button_runs_a_sync_and_the_page_lists_it(self):
        client = self.client_for(self.operator)
        action = reverse("plugins:netbox_proxbox:proxmoxendpoint_sync_now", args=[self.endpoint.pk])
        self.assertIn(f'action="{action}"', self.page(client))
        counters = {
            "virtualization.virtualmachine": {"created": 3, "updated": 2, "unchanged": 5},
            "ipam.ipaddress": {"created": 4, "deleted": 1},
        }
        service = ScriptedSyncService(report(counters=counters))
        with backend(service):
            response = client.post(action, follow=True)
        job = self.job()
        self.assertEqual(job.status, JobStatusChoices.STATUS_COMPLETED)
        self.assertEqual(service.calls, [self.endpoint.pk])
        self.assertContains(
            response, f'queued as <a href="{job.get_absolute_url()}">job {job.pk}</a>'
        )
        page = self.page(client)
        self.assertIn('id="recent-syncs"', page)
        self.assertIn(f'href="{job.get_absolute_url()}"', page)
        # The run's counters, summed over object types, next to its status.
        row = page[page.index(f'href="{job.get_absolute_url()}"') :].split("</tr>")[0]
        self.assertIn("Completed", row)
        self.assertIn("7 created, 2 updated, 1 deleted, 0 failed", row)
        jobs_tab = reverse("plugins:netbox_proxbox:proxmoxendpoint_jobs", args=[self.endpoint.pk])
        self.assertEqual(client.get(jobs_tab).status_code, 200)

    def test_button_needs_change_permission_csrf_and_post(self):
        viewer = User.objects.create_user(username="viewer")
        grant(viewer, CHANGE[0])
        client = self.client_for(viewer)
        action = reverse("plugins:netbox_proxbox:proxmoxendpoint_sync_now", args=[self.endpoint.pk])
        self.assertNotIn(f'action="{action}"', self.page(client))
        response = client.post(action, follow=True)
        self.assertContains(response, "you may not sync it")
        self.assertEqual(self.client_for(self.operator).get(action).status_code, 405)
        strict = Client(enforce_csrf_checks=True)
        strict.force_login(self.operator)
        self.assertEqual(strict.post(action).status_code, 403)
        self.assertFalse(SyncEndpointJob.get_jobs(self.endpoint).exists())

    def test_disabled_endpoint_shows_a_disabled_button_and_refuses(self):
        disabled = make_endpoint("pve-off", enabled=False)
        client = self.client_for(self.operator)
        action = reverse("plugins:netbox_proxbox:proxmoxendpoint_sync_now", args=[disabled.pk])
        self.assertNotIn(f'action="{action}"', self.page(client, disabled))
        response = client.post(action, follow=True)
        self.assertContains(response, "is disabled")
        self.assertFalse(SyncEndpointJob.get_jobs(disabled).exists())


def test_real_backend_reads_the_credentials_api_and_reports_the_failed_run(
    live_netbox, committed_inventory
):
    """The backend's real SyncService against a live NetBox: it reads the endpoint and, with
    `reveal_credentials`, its token; Proxmox is a closed port, so the run fails honestly."""
    inv = committed_inventory
    endpoint = ProxmoxEndpoint(
        name=f"real-{inv.tag}",
        host="127.0.0.1",
        port=free_port(),
        token_id="proxbox@pve!sync",
        verify_tls=False,
    )
    endpoint.token_secret = "the-real-secret"
    endpoint.save()
    backend_user, backend_token = inv.user(
        ("netbox_proxbox.view_proxmoxendpoint", "netbox_proxbox.view_proxmoxassignmentrule")
    )
    _, operator_token = inv.user((*CHANGE, "core.view_job"))

    handed_to_proxmox = []

    def proxmox_client(ep, credentials):
        handed_to_proxmox.append((ep.id, credentials.token_id, credentials.token_secret.reveal()))
        return ProxmoxClient(
            ep.url, credentials, verify_tls=False, timeout=5, retry=RetryPolicy(attempts=1)
        )

    service = SyncService(
        Settings(
            netbox_url=live_netbox,
            netbox_token=Secret(f"nbt_{backend_token.key}.{backend_token.token}"),
            retry=RetryPolicy(attempts=1),
        ),
        proxmox_factory=proxmox_client,
    )

    def sync_now() -> Job:
        response = APIClient().post(sync_url(endpoint), **auth_header(operator_token))
        assert response.status_code == 202, response.content
        return Job.objects.get(pk=response.json()["id"])

    with backend(service):
        # Without the action the credentials API answers 403 and the backend has no token.
        refused = sync_now()
        grant(backend_user, "netbox_proxbox.view_proxmoxendpoint", actions=["reveal_credentials"])
        attempted = sync_now()

    assert refused.status == JobStatusChoices.STATUS_FAILED
    assert "no Proxmox credentials" in refused.error
    assert handed_to_proxmox == [(endpoint.pk, "proxbox@pve!sync", "the-real-secret")]
    assert attempted.status == JobStatusChoices.STATUS_FAILED
    assert attempted.error.startswith("Sync failed: ")
    assert attempted.data["report"]["endpoint"] == {"id": endpoint.pk, "name": endpoint.name}
    assert attempted.data["report"]["ok"] is False
    for job in (refused, attempted):
        assert "the-real-secret" not in repr(job.data) + job.error + repr(job.log_entries)


class SyncJobLostTest(SyncNowTestCase):
    """A worker killed mid-Job never lets `JobRunner.handle` record it: RQ's failure
    callback does (e2e/test_chaos_workers.py kills a real worker)."""

    def test_rq_holds_the_callback_that_errors_a_lost_job(self):
        from rq.exceptions import AbandonedJobError
        from rq.job import Job as RQJob

        from netbox_proxbox.sync.jobs import job_lost
        from netbox_proxbox.sync.service import request_sync

        with self.captureOnCommitCallbacks(execute=True):
            job = request_sync(self.operator, self.endpoint)
        rq_job = RQJob.fetch(str(job.job_id), connection=django_rq.get_connection(job.queue_name))
        self.addCleanup(rq_job.delete)
        self.assertIs(rq_job.failure_callback, job_lost)

        job.start()
        job.data = {"endpoint": self.endpoint.pk, "backend_run": "run-42"}
        job.save()
        rq_job.execute_failure_callback(
            UnixSignalDeathPenalty, AbandonedJobError, AbandonedJobError(), None
        )
        job.refresh_from_db()
        self.assertEqual(job.status, JobStatusChoices.STATUS_ERRORED)
        self.assertIn("stopped before the Job finished (AbandonedJobError)", job.error)
        self.assertIn("run-42", job.error)

        # An outcome handle() recorded stands.
        job.status, job.error = JobStatusChoices.STATUS_COMPLETED, ""
        job.save()
        job_lost(rq_job, None, AbandonedJobError, AbandonedJobError(), None)
        job.refresh_from_db()
        self.assertEqual(job.status, JobStatusChoices.STATUS_COMPLETED)
