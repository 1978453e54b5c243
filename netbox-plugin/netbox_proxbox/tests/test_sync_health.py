"""Sync health without opening Jobs: the endpoint list's columns and the dashboard widget,
read from the endpoints' sync Jobs as NetBox records them."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta

from core.choices import JobStatusChoices
from core.models import Job, ObjectType
from django.db import connection
from django.test import Client, TestCase
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from extras.models import Dashboard
from users.models import User

from netbox_proxbox.models import ProxmoxEndpoint
from netbox_proxbox.sync.health import SyncHealth, with_sync_health
from netbox_proxbox.sync.jobs import SyncEndpointJob
from netbox_proxbox.widgets import SyncHealthWidget

from .base import grant, make_endpoint

COMPLETED = JobStatusChoices.STATUS_COMPLETED
ERRORED = JobStatusChoices.STATUS_ERRORED
FAILED = JobStatusChoices.STATUS_FAILED
NOW = timezone.now()


def sync_job(endpoint, status, minutes_ago, *, error="", interval=None, scheduled=None):
    """A sync Job of `endpoint` as NetBox keeps it once its worker is done with it."""
    at = NOW - timedelta(minutes=minutes_ago)
    finished = status in (COMPLETED, ERRORED, FAILED)
    job = Job.objects.create(
        name=SyncEndpointJob.name,
        object_type=ObjectType.objects.get_for_model(ProxmoxEndpoint),
        object_id=endpoint.pk,
        status=status,
        started=at - timedelta(seconds=20) if finished else None,
        completed=at if finished else None,
        error=error,
        interval=interval,
        scheduled=scheduled,
        job_id=uuid.uuid4(),
    )
    # `created` is set on insert (auto_now_add); a Job of the past was created back then.
    Job.objects.filter(pk=job.pk).update(created=at - timedelta(seconds=30))
    job.refresh_from_db()
    return job


def health(endpoint) -> SyncHealth:
    return SyncHealth.of(with_sync_health(ProxmoxEndpoint.objects.filter(pk=endpoint.pk)).get())


class SyncHealthTest(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.healthy = make_endpoint("pve-healthy")
        sync_job(cls.healthy, ERRORED, 90, error="old trouble")
        cls.last_success = sync_job(cls.healthy, COMPLETED, 30).completed
        cls.next_run = NOW + timedelta(minutes=5)
        sync_job(
            cls.healthy, JobStatusChoices.STATUS_SCHEDULED, 0, interval=60, scheduled=cls.next_run
        )
        cls.failing = make_endpoint("pve-failing")
        sync_job(cls.failing, COMPLETED, 120)
        sync_job(cls.failing, ERRORED, 60, error="Proxmox refused the token")
        cls.latest_failure = sync_job(cls.failing, FAILED, 10, error="NetBox said 503")
        cls.never = make_endpoint("pve-never")
        cls.off = make_endpoint("pve-off", enabled=False)
        sync_job(cls.off, COMPLETED, 600)

    def test_health_counts_failures_since_the_last_success(self):
        ok = health(self.healthy)
        self.assertEqual((ok.state, ok.failures_in_a_row, ok.last_error), ("healthy", 0, ""))
        self.assertEqual(ok.last_success, self.last_success)
        self.assertEqual(ok.next_run, self.next_run)
        bad = health(self.failing)
        self.assertEqual((bad.state, bad.failures_in_a_row), ("failing", 2))
        self.assertEqual(bad.last_error, "NetBox said 503")
        self.assertEqual(bad.last_job, self.latest_failure.pk)
        self.assertEqual(health(self.never).state, "never")
        self.assertEqual(health(self.off).state, "disabled")

    def test_a_failure_whose_worker_died_counts_and_a_later_success_clears_it(self):
        endpoint = make_endpoint("pve-died")
        died = sync_job(endpoint, ERRORED, 5, error="The RQ worker running this Job stopped")
        died.completed = None
        died.save()
        self.assertEqual(
            (health(endpoint).state, health(endpoint).failures_in_a_row), ("failing", 1)
        )
        sync_job(endpoint, COMPLETED, 1)
        self.assertEqual(
            (health(endpoint).state, health(endpoint).failures_in_a_row), ("healthy", 0)
        )

    def test_endpoint_list_shows_each_endpoints_state_in_a_fixed_number_of_queries(self):
        client = Client()
        client.force_login(User.objects.create_superuser("admin", "a@example.com", "pw"))
        url = reverse("plugins:netbox_proxbox:proxmoxendpoint_list")
        with CaptureQueriesContext(connection) as four:
            page = client.get(url).content.decode()
        rows = {
            name: row
            for name, row in re.findall(r"<tr[^>]*>.*?>(pve-[a-z]+)<(.*?)</tr>", page, re.S)
        }
        self.assertIn("Failing ×2", rows["pve-failing"])
        self.assertIn('title="NetBox said 503"', rows["pve-failing"])
        self.assertIn("text-bg-green", rows["pve-healthy"])
        self.assertIn("Never synced", rows["pve-never"])
        self.assertIn("Disabled", rows["pve-off"])
        self.assertIn(self.last_success.strftime("%Y-%m-%d %H:%M"), rows["pve-healthy"])
        for n in range(6):
            sync_job(make_endpoint(f"pve-more{n}"), ERRORED, n)
        with CaptureQueriesContext(connection) as ten:
            self.assertEqual(client.get(url).status_code, 200)
        self.assertEqual(len(ten), len(four))

    def test_failing_and_disabled_endpoints_can_be_filtered_from_the_list_columns(self):
        client = Client()
        client.force_login(User.objects.create_superuser("admin", "a@example.com", "pw"))
        url = reverse("plugins:netbox_proxbox:proxmoxendpoint_list")
        response = client.get(url, {"export": "table"})
        self.assertEqual(response.status_code, 200)
        lines = response.content.decode().splitlines()
        header = lines[0].split(",")
        state = {
            line.split(",")[0]: line.split(",")[header.index("Sync health")] for line in lines[1:]
        }
        self.assertEqual(state["pve-failing"], "failing")
        self.assertEqual(state["pve-healthy"], "healthy")


class SyncHealthWidgetTest(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.ours = make_endpoint("pve-able")
        sync_job(cls.ours, COMPLETED, 20)
        cls.broken = make_endpoint("pve-broken")
        sync_job(cls.broken, ERRORED, 3, error="Proxmox answered 401")
        cls.theirs = make_endpoint("pve-theirs")
        sync_job(cls.theirs, FAILED, 1, error="someone else's problem")

    def home(self, user, **config):
        dashboard = Dashboard(user=user)
        # As the "Add widget" form saves it: the title is a plain string.
        widget = SyncHealthWidget(
            title="Proxmox sync health", config={**SyncHealthWidget.default_config, **config}
        )
        dashboard.add_widget(widget)
        dashboard.save()
        client = Client()
        client.force_login(user)
        response = client.get("/")
        self.assertEqual(response.status_code, 200)
        page = response.content.decode()
        self.assertIn("Proxmox sync health", page)
        return page

    def viewer(self, name, **constraints):
        user = User.objects.create_user(username=name)
        grant(user, "netbox_proxbox.view_proxmoxendpoint", constraints=constraints or None)
        return user

    def shown(self, page) -> list[tuple[str, str]]:
        return re.findall(r'data-endpoint="([^"]+)" data-state="([^"]+)"', page)

    def test_failing_endpoints_come_first_and_only_those_the_user_may_view(self):
        page = self.home(self.viewer("ops", name__in=["pve-able", "pve-broken"]))
        self.assertEqual(self.shown(page), [("pve-broken", "failing"), ("pve-able", "healthy")])
        self.assertNotIn("someone else", page)
        self.assertIn("Proxmox answered 401", page)
        self.assertIn(
            reverse("core:job", kwargs={"pk": Job.objects.get(error="Proxmox answered 401").pk}),
            page,
        )

    def test_problems_only_hides_healthy_endpoints(self):
        page = self.home(self.viewer("oncall"), problems_only=True)
        self.assertEqual(self.shown(page), [("pve-broken", "failing"), ("pve-theirs", "failing")])

    def test_a_user_without_view_permission_sees_a_lock_not_endpoints(self):
        page = self.home(User.objects.create_user(username="nobody"))
        self.assertEqual(self.shown(page), [])
        self.assertIn("No permission to view Proxmox endpoints", page)
