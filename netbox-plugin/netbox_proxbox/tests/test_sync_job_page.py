"""A sync Job's page shows its report as tables (not only NetBox's JSON data panel), and
follows the run live: htmx reloads the report card while the Job waits or runs."""

from __future__ import annotations

import uuid

from core.choices import JobStatusChoices
from core.models import Job
from django.contrib.contenttypes.models import ContentType
from django.test import Client, TestCase
from django.urls import reverse
from django.utils import timezone
from users.models import User

from netbox_proxbox.sync.jobs import SyncEndpointJob

from .base import grant, make_endpoint

REPORT = {
    "ok": False,
    "status": "completed_with_errors",
    "counters": {
        "virtualization.virtualmachine": {
            "created": 3,
            "updated": 1,
            "unchanged": 7,
            "deleted": 0,
            "failed": 1,
        },
        "ipam.ipaddress": {"created": 2, "updated": 0, "unchanged": 0, "deleted": 1, "failed": 0},
    },
    "failures": [
        {
            "object_type": "virtualization.virtualmachine",
            "label": "vm-refused-by-netbox",
            "reason": "HTTP 400: name: duplicate",
        }
    ],
    "warnings": ["HA groups could not be read: HTTP 501"],
    "error": None,
    "inventory_writes": 6,
    "duration_s": 4.2,
}


def report_card(page: str) -> str:
    return page.split('id="sync-job-report"', 1)[1].split('<div class="card"', 1)[0]


class SyncJobPageTest(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.endpoint = make_endpoint("pve-jobs")
        cls.viewer = User.objects.create_user(username="job-viewer")
        grant(cls.viewer, "core.view_job")
        grant(cls.viewer, "netbox_proxbox.view_proxmoxendpoint")

    def job(self, **fields) -> Job:
        return Job.objects.create(
            object_type=ContentType.objects.get_for_model(self.endpoint),
            object_id=self.endpoint.pk,
            name=SyncEndpointJob.name,
            job_id=uuid.uuid4(),
            **fields,
        )

    def client_for(self, user) -> Client:
        client = Client()
        client.force_login(user)
        return client

    def test_a_finished_sync_shows_counters_failures_and_warnings_as_tables(self):
        job = self.job(
            status=JobStatusChoices.STATUS_ERRORED,
            completed=timezone.now(),
            data={"endpoint": self.endpoint.pk, "report": REPORT},
        )
        page = self.client_for(self.viewer).get(job.get_absolute_url())
        self.assertEqual(page.status_code, 200)
        card = report_card(page.content.decode())
        vm_row = card.split('data-object-type="virtualization.virtualmachine"', 1)[1]
        vm_row = vm_row.split("</tr>", 1)[0]
        self.assertIn("Virtual machines", vm_row)
        numbers = [cell.split("</td>")[0] for cell in vm_row.split('class="text-end">')[1:]]
        self.assertEqual(numbers, ["3", "1", "7", "0", "1"])
        self.assertIn("IP addresses", card)
        self.assertIn("vm-refused-by-netbox", card.split('id="sync-job-failures"', 1)[1])
        self.assertIn("HTTP 400: name: duplicate", card)
        self.assertIn("HA groups could not be read: HTTP 501", card)
        self.assertIn("6 NetBox writes", card)
        # Finished: no polling.
        self.assertNotIn("hx-trigger", card.split(">", 1)[0])

    def test_a_running_sync_is_followed_live(self):
        job = self.job(
            status=JobStatusChoices.STATUS_RUNNING,
            data={
                "endpoint": self.endpoint.pk,
                "progress": {"stage": "guests", "done": 40, "total": 100, "percent": 40},
            },
        )
        client = self.client_for(self.viewer)
        card = report_card(client.get(job.get_absolute_url()).content.decode())
        fragment_url = reverse("plugins:netbox_proxbox:sync_job_report", args=[job.pk])
        opening = card.split(">", 1)[0]
        self.assertIn(f'hx-get="{fragment_url}"', opening)
        self.assertIn('hx-trigger="every 3s"', opening)
        self.assertIn("Stage guests: 40 of 100", card)
        # The run moves on: the fragment htmx fetches shows it, and stops polling once done.
        job.data = {**job.data, "progress": {"stage": "disks", "done": 5, "total": 9}}
        job.save()
        fragment = client.get(fragment_url).content.decode()
        self.assertIn("Stage disks: 5 of 9", fragment)
        self.assertIn("hx-trigger", fragment.split(">", 1)[0])
        job.status, job.completed = JobStatusChoices.STATUS_COMPLETED, timezone.now()
        job.data = {"endpoint": self.endpoint.pk, "report": {**REPORT, "failures": []}}
        job.save()
        fragment = client.get(fragment_url).content.decode()
        self.assertNotIn("hx-trigger", fragment.split(">", 1)[0])
        self.assertIn('id="sync-job-counters"', fragment)

    def test_the_fragment_needs_view_on_the_job_and_other_jobs_get_no_panel(self):
        job = self.job(status=JobStatusChoices.STATUS_RUNNING, data={"endpoint": self.endpoint.pk})
        outsider = User.objects.create_user(username="no-job-view")
        fragment_url = reverse("plugins:netbox_proxbox:sync_job_report", args=[job.pk])
        self.assertEqual(self.client_for(outsider).get(fragment_url).status_code, 404)
        other = self.job(status=JobStatusChoices.STATUS_COMPLETED, data={"report": REPORT})
        other.name = "Some other job"
        other.save()
        client = self.client_for(self.viewer)
        page = client.get(other.get_absolute_url()).content.decode()
        self.assertNotIn('id="sync-job-report"', page)
        other_url = reverse("plugins:netbox_proxbox:sync_job_report", args=[other.pk])
        self.assertEqual(client.get(other_url).status_code, 404)
