"""A cluster's sync state tells the truth about the last run: `degraded` (reads or writes
failed, counted and named) and `failed` (with the reason, also when the run stopped at its
first Proxmox read), in REST, on the endpoint page and on NetBox's Cluster page."""

from __future__ import annotations

import io

from core.choices import JobStatusChoices
from django.core.management import call_command
from django.test import Client, TestCase
from django.urls import reverse
from proxbox_processes import free_port
from rest_framework.test import APIClient
from users.models import Token, User
from virtualization.models import Cluster

from netbox_proxbox.models import ProxboxClusterSyncState, ProxmoxEndpoint
from netbox_proxbox.sync.jobs import SyncEndpointJob
from proxbox_backend.clients.http import RetryPolicy
from proxbox_backend.clients.proxmox import ProxmoxClient
from proxbox_backend.config import Settings
from proxbox_backend.secrets import Secret
from proxbox_backend.service import SyncService

from .backend import ScriptedSyncService, report
from .base import api_url, auth_header, grant, make_endpoint, make_references
from .test_sync_now import CHANGE, backend, sync_url

READ_FAILURES = [
    f"node pve1: backups on store-{n} unreadable: Proxmox GET → 500" for n in range(11)
]
DEGRADED_MESSAGE = "\n".join(
    [
        "11 Proxmox read(s) failed, 0 NetBox write(s) failed",
        *(f"read failed: {failure}" for failure in READ_FAILURES),
    ]
)
SIDECAR_VIEW = "netbox_proxbox.view_proxboxclustersyncstate"
SIDECAR_CHANGE = "netbox_proxbox.change_proxboxclustersyncstate"


class SyncStateOutcomeTest(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.cluster_type, _site, _tenant = make_references()
        cls.endpoint = make_endpoint("pve-outcome")
        cls.cluster = Cluster.objects.create(name="outcome-native", type=cls.cluster_type)
        cls.endpoint.netbox_cluster = cls.cluster
        cls.endpoint.save(assign_native_cluster=True)
        cls.state = ProxboxClusterSyncState.objects.create(
            cluster=cls.cluster, status="succeeded", objects_created=40
        )
        cls.writer = User.objects.create_user(username="sync-state-writer")
        for name in (SIDECAR_VIEW, SIDECAR_CHANGE):
            grant(cls.writer, name)
        cls.writer_token = Token.objects.create(user=cls.writer, write_enabled=True)

    def record(self, **reflection):
        """What the backend sends at the end of a run."""
        response = APIClient().patch(
            api_url("proxboxclustersyncstate", self.state.pk),
            reflection,
            format="json",
            **auth_header(self.writer_token),
        )
        return response

    def viewer(self, *perms):
        user = User.objects.create_user(username=f"viewer{User.objects.count()}")
        for name in perms:
            grant(user, name)
        client = Client()
        client.force_login(user)
        return client

    def test_degraded_is_stored_listed_and_filtered_in_rest(self):
        response = self.record(status="degraded", errors=11, message=DEGRADED_MESSAGE)
        self.assertEqual(response.status_code, 200, response.content)
        body = response.json()
        self.assertEqual(body["status"], {"value": "degraded", "label": "Degraded"})
        self.assertEqual((body["errors"], body["message"]), (11, DEGRADED_MESSAGE))
        listed = APIClient().get(
            api_url("proxboxclustersyncstate") + "?status=degraded",
            **auth_header(self.writer_token),
        )
        self.assertEqual([s["id"] for s in listed.json()["results"]], [self.state.pk])
        succeeded = APIClient().get(
            api_url("proxboxclustersyncstate") + "?status=succeeded",
            **auth_header(self.writer_token),
        )
        self.assertEqual(succeeded.json()["count"], 0)

    def test_an_unknown_status_is_refused_naming_the_field(self):
        response = self.record(status="partially-ok")
        self.assertEqual(response.status_code, 400)
        self.assertEqual(list(response.json()), ["status"])
        self.state.refresh_from_db()
        self.assertEqual(self.state.status, "succeeded")

    def test_endpoint_page_shows_the_outcome_with_counts_and_reason(self):
        self.record(status="degraded", errors=11, message=DEGRADED_MESSAGE)
        client = self.viewer("netbox_proxbox.view_proxmoxendpoint", SIDECAR_VIEW)
        page = client.get(self.endpoint.get_absolute_url()).content.decode()
        outcome = page.split('id="sync-outcome"', 1)[1].split("</span>\n", 1)[0]
        self.assertIn("Degraded", outcome)
        self.assertIn("11 errors", outcome)
        self.assertIn("11 Proxmox read(s) failed, 0 NetBox write(s) failed", outcome)
        self.assertIn(self.state.get_absolute_url(), outcome)

        self.record(status="failed", errors=0, message="Proxmox GET /cluster/status → 503")
        page = client.get(self.endpoint.get_absolute_url()).content.decode()
        outcome = page.split('id="sync-outcome"', 1)[1]
        self.assertIn("Failed", outcome)
        self.assertIn("Proxmox GET /cluster/status → 503", outcome)

    def test_endpoint_page_hides_the_outcome_from_viewers_of_the_endpoint_only(self):
        self.record(status="degraded", errors=11, message=DEGRADED_MESSAGE)
        client = self.viewer("netbox_proxbox.view_proxmoxendpoint")
        page = client.get(self.endpoint.get_absolute_url()).content.decode()
        self.assertIn('id="sync-outcome"', page)
        self.assertNotIn("Degraded", page)
        self.assertNotIn("Proxmox read(s) failed", page)

    def test_cluster_page_panel_shows_the_outcome(self):
        self.record(status="degraded", errors=11, message=DEGRADED_MESSAGE)
        client = self.viewer(
            "netbox_proxbox.view_proxmoxendpoint", SIDECAR_VIEW, "virtualization.view_cluster"
        )
        page = client.get(reverse("virtualization:cluster", args=[self.cluster.pk]))
        page = page.content.decode()
        outcome = page.split('id="proxbox-sync-outcome"', 1)[1].split("</td>", 1)[0]
        self.assertIn("Degraded", outcome)
        problem = page.split('id="proxbox-sync-problem"', 1)[1].split("</td>", 1)[0]
        self.assertEqual(problem, ">11: 11 Proxmox read(s) failed, 0 NetBox write(s) failed")

        self.record(status="succeeded", errors=0, message="")
        page = client.get(reverse("virtualization:cluster", args=[self.cluster.pk]))
        self.assertNotIn('id="proxbox-sync-problem"', page.content.decode())

    def test_a_degraded_run_fails_its_job_naming_the_failed_reads(self):
        operator = User.objects.create_user(username="outcome-operator")
        for name in (*CHANGE, "core.view_job"):
            grant(operator, name)
        token = Token.objects.create(user=operator, write_enabled=True)
        degraded = report(
            counters={"virtualization.virtualmachine": {"updated": 2}},
            read_failures=READ_FAILURES,
        )
        with backend(ScriptedSyncService(degraded)):
            response = APIClient().post(sync_url(self.endpoint), **auth_header(token))
        self.assertEqual(response.status_code, 202, response.content)
        job = SyncEndpointJob.get_jobs(self.endpoint).get()
        self.assertEqual(job.status, JobStatusChoices.STATUS_FAILED)
        self.assertEqual(
            job.error, f"Sync degraded: 11 Proxmox read(s) failed; first: {READ_FAILURES[0]}"
        )
        logged = [entry["message"] for entry in job.log_entries]
        self.assertIn(f"Proxmox read failed: {READ_FAILURES[10]}", logged)
        self.assertEqual(job.data["report"]["status"], "completed_with_errors")

    def test_no_model_change_is_missing_a_migration(self):
        out = io.StringIO()
        call_command("makemigrations", "netbox_proxbox", "--check", "--dry-run", stdout=out)
        self.assertIn("No changes detected", out.getvalue())


def test_a_run_failing_at_its_first_proxmox_read_marks_the_state_failed_everywhere(
    live_netbox, committed_inventory
):
    """The backend's real SyncService against a live NetBox; Proxmox is a closed port. The
    sidecar showed the previous run's success: afterwards REST and both pages say failed."""
    inv = committed_inventory
    cluster = Cluster.objects.create(name=f"outcome-native-{inv.tag}", type=inv.cluster_type)
    endpoint = ProxmoxEndpoint(
        name=f"outcome-{inv.tag}",
        host="127.0.0.1",
        port=free_port(),
        token_id="proxbox@pve!sync",
        verify_tls=False,
    )
    endpoint.token_secret = "outcome-secret-0123456789"
    endpoint.save()
    inv.endpoints.append(endpoint)
    endpoint.netbox_cluster = cluster
    endpoint.save(assign_native_cluster=True)
    state = ProxboxClusterSyncState.objects.create(cluster=cluster, status="succeeded")

    backend_user, backend_token = inv.user(
        (
            "netbox_proxbox.view_proxmoxendpoint",
            "netbox_proxbox.view_proxmoxassignmentrule",  # read with the endpoint
            "virtualization.view_cluster",  # the endpoint's native cluster shows only then
            SIDECAR_VIEW,
            SIDECAR_CHANGE,
        )
    )
    grant(backend_user, "netbox_proxbox.view_proxmoxendpoint", actions=["reveal_credentials"])
    operator, operator_token = inv.user((*CHANGE, "core.view_job", SIDECAR_VIEW))
    grant(operator, "virtualization.view_cluster")
    service = SyncService(
        Settings(
            netbox_url=live_netbox,
            netbox_token=Secret(f"nbt_{backend_token.key}.{backend_token.token}"),
            retry=RetryPolicy(attempts=1),
        ),
        proxmox_factory=lambda ep, credentials: ProxmoxClient(
            ep.url, credentials, verify_tls=False, timeout=5, retry=RetryPolicy(attempts=1)
        ),
    )
    with backend(service):
        response = APIClient().post(sync_url(endpoint), **auth_header(operator_token))
    assert response.status_code == 202, response.content
    job = SyncEndpointJob.get_jobs(endpoint).get()
    assert job.status == JobStatusChoices.STATUS_FAILED
    reason = job.data["report"]["error"]
    assert reason and "/cluster/status" in reason, job.data["report"]
    assert job.data["report"]["sync_state"] == "recorded"

    shown = (
        APIClient()
        .get(api_url("proxboxclustersyncstate", state.pk), **auth_header(operator_token))
        .json()
    )
    assert shown["status"]["value"] == "failed"
    assert shown["message"].splitlines()[0] == reason
    client = Client()
    client.force_login(operator)
    endpoint_page = client.get(endpoint.get_absolute_url()).content.decode()
    outcome = endpoint_page.split('id="sync-outcome"', 1)[1].split("</div>", 1)[0]
    assert "Failed" in outcome and "/cluster/status" in outcome
    cluster_page = client.get(reverse("virtualization:cluster", args=[cluster.pk])).content
    assert "Failed" in cluster_page.decode().split('id="proxbox-sync-outcome"', 1)[1]
    assert "outcome-secret-0123456789" not in repr(job.data) + job.error + shown["message"]
