"""IPAM hygiene findings (the backend's `domain.hygiene`) through the real backend app:
the preview page and the REST preview list them before Apply, a sync Job keeps them in
its data and its page shows them as a table. Against a real NetBox, the simulator and a
browser: e2e/test_ipam_hygiene.py."""

from __future__ import annotations

from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from netbox_proxbox.sync.hygiene import hygiene_context
from netbox_proxbox.sync.jobs import SyncEndpointJob
from proxbox_backend.domain.hygiene import ERROR, INFO, WARNING, Finding

from .backend import PlanningSyncService, planned_report, report
from .base import auth_header
from .test_preview import preview_api_url, preview_url
from .test_sync_now import SyncNowTestCase, backend

FINDINGS = [
    Finding(
        "outside_prefix",
        WARNING,
        "web (qemu/101)",
        "10.9.0.5/24",
        "10.9.0.5/24 on eth0 lies in no prefix of the global table; "
        "the prefixes rule (prefixes_mode) would create 10.9.0.0/24",
        prefix="10.9.0.0/24",
    ),
    Finding(
        "duplicate_address",
        ERROR,
        "web (qemu/101)",
        "10.9.0.5/24",
        "10.9.0.5/24 on eth0 duplicates 10.9.0.5/32 in the global table",
        "device sw1 interface ge-0/0/1",
    ),
    Finding("vlan_clash", WARNING, "db (qemu/102)", "20", "VLAN id 20 is 'mgmt'", "VLAN mgmt"),
    Finding("mac_collision", INFO, "db (qemu/102)", "BC:24:11:00:00:01", "the MAC of net0", "x"),
]


class HygienePlanningService(PlanningSyncService):
    """Previews with the findings; a sync reports them too."""

    def __init__(self, findings, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.findings = [f.as_dict() for f in findings]
        self.report = {**self.report, "hygiene": self.findings}

    async def run(self, endpoint_id, emit, target=None, dry_run=False):
        if dry_run:
            self.previews.append(int(endpoint_id))
            planned = planned_report(int(endpoint_id))
            planned.hygiene = list(self.findings)
            return planned
        return await super().run(endpoint_id, emit, target)


def hygiene_card(page: str) -> str:
    return page.split('id="ipam-hygiene"', 1)[1].split("</table>", 1)[0]


class HygieneTest(SyncNowTestCase):
    def operator_client(self) -> Client:
        client = Client()
        client.force_login(self.operator)
        return client

    def test_the_preview_page_lists_every_finding_errors_first_before_apply(self):
        with backend(HygienePlanningService(FINDINGS)):
            page = self.operator_client().get(preview_url(self.endpoint)).content.decode()
        card = hygiene_card(page)
        rows = card.split('class="hygiene-finding"')[1:]
        rules = [row.split('data-rule="', 1)[1].split('"', 1)[0] for row in rows]
        self.assertEqual(rules[0], "duplicate_address")  # the error first
        self.assertEqual(sorted(rules), sorted(f.rule for f in FINDINGS))
        self.assertIn("device sw1 interface ge-0/0/1", rows[0])
        self.assertIn("Duplicate address", rows[0])
        self.assertIn("would create 10.9.0.0/24", card)
        self.assertIn("1 error, 2 warning, 1 info", " ".join(card.split()))
        # Listed before the plan and its Apply form.
        self.assertLess(page.index('id="ipam-hygiene"'), page.index('id="preview-plan"'))

    def test_the_rest_preview_answers_the_findings(self):
        with backend(HygienePlanningService(FINDINGS)):
            response = APIClient().post(preview_api_url(self.endpoint), **auth_header(self.token))
        self.assertEqual(response.status_code, 200, response.content)
        body = response.json()
        self.assertEqual(body["hygiene"], [f.as_dict() for f in FINDINGS])

    def test_a_sync_job_keeps_the_findings_and_its_page_shows_them(self):
        with backend(HygienePlanningService(FINDINGS[1:3], report())):
            self.assertEqual(self.operator_client().post(self.sync_now_url()).status_code, 302)
        job = SyncEndpointJob.get_jobs(self.endpoint).get()
        self.assertEqual(
            [f["rule"] for f in job.data["report"]["hygiene"]], ["duplicate_address", "vlan_clash"]
        )
        logged = [entry["message"] for entry in job.log_entries]
        self.assertIn(
            "IPAM duplicate_address web (qemu/101): 10.9.0.5/24 on eth0 duplicates "
            "10.9.0.5/32 in the global table (device sw1 interface ge-0/0/1)",
            logged,
        )
        page = self.operator_client().get(job.get_absolute_url()).content.decode()
        card = page.split('id="sync-job-report"', 1)[1]
        self.assertIn('data-rule="duplicate_address"', hygiene_card(card))
        self.assertIn('data-rule="vlan_clash"', hygiene_card(card))

    def test_no_finding_says_so_and_a_report_without_checks_shows_no_card(self):
        with backend(HygienePlanningService([])):
            page = self.operator_client().get(preview_url(self.endpoint)).content.decode()
        self.assertIn('id="ipam-hygiene-clean"', page)
        self.assertNotIn('class="hygiene-finding"', page)
        # A report of a backend without the checks: no card, rather than "no conflict".
        self.assertFalse(hygiene_context({"status": "previewed"})["checked"])
        self.assertTrue(hygiene_context({"hygiene": []})["checked"])

    def sync_now_url(self):
        return reverse("plugins:netbox_proxbox:proxmoxendpoint_sync_now", args=[self.endpoint.pk])
