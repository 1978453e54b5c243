"""Runs the backend's live-sync watcher started, recorded as sync Jobs of the endpoint
(`POST …/endpoints/proxmox/{id}/live-runs/`)."""

from __future__ import annotations

from core.choices import JobStatusChoices
from core.models import Job
from django.test import TestCase
from django.urls import reverse
from rest_framework.test import APIClient
from users.models import Token, User

from netbox_proxbox.sync.jobs import SyncEndpointJob

from .base import auth_header, grant, make_endpoint
from .test_sync_now import CHANGE

RUN = "0123456789abcdef0123456789abcdef"
REPORT = {
    "ok": True,
    "status": "completed",
    "counters": {"virtualization.virtualmachine": {"created": 1, "updated": 2, "failed": 0}},
    "failures": [],
    "warnings": ["qemu/100: no runtime addresses: agent not running"],
    "read_failures": [],
    "error": None,
    "inventory_writes": 3,
}
TRIGGER = {"watch": {"guests": ["qemu/100"], "nodes": [], "reasons": ["qmstop 100"]}}


def live_runs_url(endpoint_or_pk) -> str:
    pk = getattr(endpoint_or_pk, "pk", endpoint_or_pk)
    return reverse("plugins-api:netbox_proxbox-api:proxmoxendpoint-live-runs", kwargs={"pk": pk})


class LiveRunTest(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.endpoint = make_endpoint("pve-live")
        cls.backend = User.objects.create_user(username="backend")
        for name in CHANGE:
            grant(cls.backend, name)
        cls.token = Token.objects.create(user=cls.backend, write_enabled=True)
        cls.viewer = User.objects.create_user(username="viewer")
        grant(cls.viewer, "netbox_proxbox.view_proxmoxendpoint")
        cls.viewer_token = Token.objects.create(user=cls.viewer, write_enabled=True)

    def post(self, token=None, **body):
        payload = {
            "backend_run": RUN,
            "started": "2026-12-05T06:00:00Z",
            "completed": "2026-12-05T06:00:02Z",
            "report": REPORT,
            "trigger": TRIGGER,
            **body,
        }
        return APIClient().post(
            live_runs_url(self.endpoint), payload, format="json", **auth_header(token or self.token)
        )

    def test_a_run_becomes_a_finished_sync_job_of_the_endpoint_once(self):
        answer = self.post()
        self.assertEqual(answer.status_code, 201, answer.content)
        job = SyncEndpointJob.get_jobs(self.endpoint).get()
        self.assertEqual(answer.json()["id"], job.pk)
        self.assertEqual(job.status, JobStatusChoices.STATUS_COMPLETED)
        self.assertEqual((job.user, job.error), (self.backend, ""))
        self.assertEqual(job.data["trigger"], TRIGGER)
        self.assertEqual((job.data["backend_run"], job.data["report"]), (RUN, REPORT))
        self.assertEqual(job.execution_time.total_seconds(), 2)
        self.assertEqual(job.created, job.started)
        messages = [entry["message"] for entry in job.log_entries]
        self.assertIn("virtualization.virtualmachine: created 1, updated 2, failed 0", messages)
        self.assertIn("qemu/100: no runtime addresses: agent not running", messages)
        # The backend sending it again (its answer lost): the same Job, not a second.
        again = self.post()
        self.assertEqual((again.status_code, again.json()["id"]), (200, job.pk))
        self.assertEqual(Job.objects.count(), 1)

    def test_a_failed_run_is_a_failed_job_saying_why(self):
        failed = {**REPORT, "ok": False, "status": "failed", "error": "Proxmox unreachable"}
        answer = self.post(report=failed)
        self.assertEqual(answer.status_code, 201, answer.content)
        job = Job.objects.get(pk=answer.json()["id"])
        self.assertEqual(job.status, JobStatusChoices.STATUS_FAILED)
        self.assertEqual(job.error, "Sync failed: Proxmox unreachable")

    def test_recording_takes_the_permission_sync_now_takes(self):
        refused = self.post(token=self.viewer_token)
        self.assertEqual(refused.status_code, 403, refused.content)
        self.assertFalse(Job.objects.exists())
        unknown = APIClient().post(
            live_runs_url(999999),
            {"backend_run": RUN, "started": "2026-12-05T06:00:00Z",
             "completed": "2026-12-05T06:00:02Z", "report": REPORT},
            format="json",
            **auth_header(self.token),
        )  # fmt: skip
        self.assertEqual(unknown.status_code, 404, unknown.content)
        self.assertFalse(Job.objects.exists())

    def test_bad_bodies_are_refused_naming_the_field(self):
        for field, body in (
            ("backend_run", {"backend_run": "not-a-run"}),
            ("report", {"report": {"status": "completed"}}),
            ("report", {"report": ["ok"]}),
            ("completed", {"completed": "2026-12-05T05:59:59Z"}),
            ("trigger", {"trigger": "qmstop"}),
            ("report", {"report": {**REPORT, "warnings": ["a\x00b"]}}),
        ):
            with self.subTest(body=body):
                answer = self.post(**body)
                self.assertEqual(answer.status_code, 400, answer.content)
                self.assertIn(field, answer.json())
        self.assertFalse(Job.objects.exists())


class LiveLagTest(TestCase):
    """The endpoint list and the dashboard widget say how far NetBox trailed Proxmox in
    the latest live-sync run: the watcher's wait before the run plus the run."""

    @classmethod
    def setUpTestData(cls):
        cls.endpoint = make_endpoint("pve-lagging")
        cls.quiet = make_endpoint("pve-quiet")
        cls.admin = User.objects.create_superuser("admin", "a@example.com", "pw")
        cls.token = Token.objects.create(user=cls.admin, write_enabled=True)

    def record(self, run, started, completed, waited):
        answer = APIClient().post(
            live_runs_url(self.endpoint),
            {
                "backend_run": run,
                "started": started,
                "completed": completed,
                "report": REPORT,
                "trigger": {**TRIGGER, "waited_s": waited},
            },
            format="json",
            **auth_header(self.token),
        )
        self.assertEqual(answer.status_code, 201, answer.content)

    def lag_column(self):
        from django.test import Client

        client = Client()
        client.force_login(self.admin)
        url = reverse("plugins:netbox_proxbox:proxmoxendpoint_list")
        # Every column, the optional lag among them.
        answer = client.get(url, {"export": ""})
        self.assertEqual(answer.status_code, 200)
        import csv
        import io

        rows = list(csv.DictReader(io.StringIO(answer.content.decode())))
        return {row["Name"]: row["Live sync lag"] for row in rows}

    def test_the_latest_live_runs_wait_and_duration_are_the_lag(self):
        self.assertEqual(self.lag_column(), {"pve-lagging": "", "pve-quiet": ""})
        self.record(RUN, "2026-12-05T06:00:00Z", "2026-12-05T06:00:12Z", 9.5)
        self.record("f" * 32, "2026-12-05T06:05:00Z", "2026-12-05T06:05:01.5Z", 2.25)
        self.assertEqual(self.lag_column(), {"pve-lagging": "3.8", "pve-quiet": ""})
        # A Sync now finishing afterwards is no live run: the lag stays the watcher's.
        import uuid

        from core.models import ObjectType
        from django.utils import timezone

        Job.objects.create(
            name=SyncEndpointJob.name,
            object_type=ObjectType.objects.get_for_model(self.endpoint),
            object_id=self.endpoint.pk,
            status=JobStatusChoices.STATUS_COMPLETED,
            started=timezone.now(),
            completed=timezone.now(),
            data={"report": REPORT},
            job_id=uuid.uuid4(),
        )
        self.assertEqual(self.lag_column()["pve-lagging"], "3.8")

    def test_the_widget_shows_the_lag(self):
        from django.template.loader import render_to_string

        from netbox_proxbox.sync.health import SyncHealth, with_sync_health

        self.record(RUN, "2026-12-05T06:00:00Z", "2026-12-05T06:00:03Z", 1.0)
        endpoint = with_sync_health(type(self.endpoint).objects.filter(pk=self.endpoint.pk)).get()
        health = SyncHealth.of(endpoint)
        self.assertEqual(health.live_lag, 4.0)
        html = render_to_string(
            "netbox_proxbox/widgets/sync_health.html",
            {"allowed": True, "rows": [(endpoint, health)], "hidden": 0, "failing": 0},
        )
        self.assertIn("4.0 s", html)
