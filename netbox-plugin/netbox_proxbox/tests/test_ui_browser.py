"""The endpoint page's relations (with and without view permission) and Sync now, its
schedule and policy form, its sync preview and assignment rules, a running sync Job's
live log and a populated inventory list, in headless
Chromium (Debian's /usr/bin/chromium through Playwright; no browser download).

Skipped where that browser is missing, except under CI (`CI` set), where it is a failure.
One browser for the whole class; a failed test keeps screenshots of its pages.
"""

from __future__ import annotations

import os
import threading

from core.choices import JobStatusChoices
from dcim.models import DeviceRole
from django.contrib.auth import get_user_model
from django.contrib.staticfiles.testing import StaticLiveServerTestCase
from django.db import connection
from django.test import Client
from proxbox_processes import wait_until
from tenancy.models import Tenant
from virtualization.models import Cluster

from netbox_proxbox.models import (
    ProxboxClusterSyncState,
    ProxmoxAssignmentRule,
    ProxmoxBackup,
    ProxmoxCluster,
    ProxmoxEndpoint,
    ProxmoxStorage,
)
from netbox_proxbox.sync.jobs import SyncEndpointJob
from proxbox_devstack.browser import ScreenshotsOnFailure, launch, requires_chromium

from .backend import BACKEND_TOKEN, PlanningSyncService, serve_backend
from .base import grant, make_endpoint, make_references
from .test_schedules import BlockingSyncService, clear_queue
from .test_sync_health import sync_job
from .test_sync_now import plugin_config

pytestmark = requires_chromium()


class EndpointOperatorBrowserTest(ScreenshotsOnFailure, StaticLiveServerTestCase):
    host = "127.0.0.1"

    @classmethod
    def setUpClass(cls):
        # Playwright's sync API runs an event loop in this thread; the ORM calls the test
        # makes between page actions are still synchronous.
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
        super().setUpClass()
        from playwright.sync_api import sync_playwright

        cls.playwright = sync_playwright().start()
        cls.browser = launch(cls.playwright)

    @classmethod
    def tearDownClass(cls):
        cls.browser.close()
        cls.playwright.stop()
        super().tearDownClass()
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)

    def setUp(self):
        super().setUp()
        clear_queue()
        self.addCleanup(clear_queue)
        self.admin = get_user_model().objects.create_superuser("admin", "a@example.com", "pw")
        self.endpoint = make_endpoint("pve-ui")

    def page(self, user=None):
        client = Client()
        client.force_login(user or self.admin)
        context = self.browser.new_context(base_url=self.live_server_url)
        context.add_cookies(
            [
                {
                    "name": "sessionid",
                    "value": client.cookies["sessionid"].value,
                    "url": self.live_server_url,
                }
            ]
        )
        self.addCleanup(context.close)
        return self.keep_screenshot(context.new_page())

    def link_native_cluster(self):
        """The endpoint owns a native cluster that has a typed sync state."""
        cluster_type, _site, _tenant = make_references()
        cluster = Cluster.objects.create(name="native-ui", type=cluster_type)
        self.endpoint.netbox_cluster = cluster
        self.endpoint.save(assign_native_cluster=True)
        sync_state = ProxboxClusterSyncState.objects.create(cluster=cluster)
        return cluster, sync_state

    def viewer(self, *perms):
        user = get_user_model().objects.create_user(f"viewer{get_user_model().objects.count()}")
        for name in perms:
            grant(user, name)
        return user

    def test_endpoint_and_native_cluster_pages_link_each_other(self):
        cluster, sync_state = self.link_native_cluster()
        tracking = ProxmoxCluster.objects.create(
            endpoint=self.endpoint, name="pve-cl", cluster_id="cl-42"
        )
        page = self.page()
        page.goto(self.endpoint.get_absolute_url())
        # The tracking records table is fetched by HTMX after the page loaded.
        records = page.locator(".card", has_text="Tracking records")
        records.locator(f'a[href="{tracking.get_absolute_url()}"]').wait_for()
        assert "cl-42" in records.inner_text()
        native = page.locator("#native-cluster a")
        assert native.inner_text() == "native-ui"
        assert page.locator("#cluster-sync-state a").get_attribute("href") == (
            sync_state.get_absolute_url()
        )
        native.click()
        page.wait_for_url(f"**{cluster.get_absolute_url()}")
        panel = page.locator("#proxbox-endpoint-panel")
        assert panel.locator(f'a[href="{self.endpoint.get_absolute_url()}"]').inner_text() == (
            "pve-ui"
        )
        panel.locator(f'a[href="{sync_state.get_absolute_url()}"]').click()
        page.wait_for_url(f"**{sync_state.get_absolute_url()}")
        assert page.locator(f'a[href="{cluster.get_absolute_url()}"]').count() > 0

    def test_relations_stay_hidden_from_viewers_without_permission(self):
        cluster, _sync_state = self.link_native_cluster()
        # May see the cluster, not the endpoint: its page neither shows nor names the endpoint.
        page = self.page(self.viewer("virtualization.view_cluster"))
        page.goto(cluster.get_absolute_url())
        assert "native-ui" in page.locator("h1.page-title").inner_text()
        assert page.locator("#proxbox-endpoint-panel").count() == 0
        assert "pve-ui" not in page.locator("body").inner_text()
        assert page.locator(f'a[href="{self.endpoint.get_absolute_url()}"]').count() == 0
        # May see the endpoint, not the cluster: no link, no name, and no sync buttons.
        page = self.page(self.viewer("netbox_proxbox.view_proxmoxendpoint"))
        page.goto(self.endpoint.get_absolute_url())
        assert page.locator("#native-cluster").inner_text().strip() == "—"
        assert "native-ui" not in page.content()
        assert page.locator(f'a[href="{cluster.get_absolute_url()}"]').count() == 0
        assert page.locator("#sync-now, #preview-sync").count() == 0

    def test_sync_now_posts_with_csrf_and_queues_the_job(self):
        page = self.page()
        page.goto(self.endpoint.get_absolute_url())
        page.locator("#sync-now button[type=submit]").click()
        page.wait_for_url(f"**{self.endpoint.get_absolute_url()}")
        job = SyncEndpointJob.get_jobs(self.endpoint).get()
        self.assertEqual(job.user, self.admin)
        assert f"queued as job {job.pk}" in page.locator("body").inner_text()
        # The queued run is listed on the page it was started from.
        recent = page.locator("#recent-syncs")
        assert recent.locator(f'a[href="{job.get_absolute_url()}"]').count() == 1

    def test_policy_and_schedule_form_refuses_bad_values_then_saves(self):
        page = self.page()
        page.goto(f"/plugins/proxbox/endpoints/{self.endpoint.pk}/edit/")
        page.fill("input[name=sync_interval]", "2")
        page.fill("input[name=exclude_vmids]", "100-300, 200")
        page.locator("form.object-edit button[type=submit][name=_update]").click()
        page.wait_for_load_state()
        body = page.locator("body").inner_text()
        assert "Ensure this value is greater than or equal to 5" in body
        assert "ranges overlap at 200-200" in body
        self.endpoint.refresh_from_db()
        self.assertIsNone(self.endpoint.sync_interval)

        page.fill("input[name=sync_interval]", "30")
        page.fill("input[name=exclude_vmids]", "900-999")
        page.select_option("select[name=guests_mode]", "create_only")
        # NetBox's multiple select (TomSelect shows it; the form posts the select's values).
        page.select_option("select[name=protected_fields]", ["name"], force=True)
        page.locator("form.object-edit button[type=submit][name=_update]").click()
        page.wait_for_url(f"**/plugins/proxbox/endpoints/{self.endpoint.pk}/")
        assert "Every 30 min" in page.locator("#sync-schedule").inner_text()
        # The recurring Job exists once the save committed; the page names its next run.
        assert page.locator("#next-sync").inner_text().strip() not in ("", "—")
        endpoint = ProxmoxEndpoint.objects.get(pk=self.endpoint.pk)
        self.assertEqual(
            (endpoint.sync_interval, endpoint.exclude_vmids, endpoint.guests_mode),
            (30, "900-999", "create_only"),
        )
        self.assertEqual(endpoint.protected_fields, ["name"])
        self.assertEqual(SyncEndpointJob.get_jobs(endpoint).get().interval, 30)

    def test_the_job_page_shows_progress_while_the_sync_runs(self):
        service = BlockingSyncService()
        with (
            serve_backend(service) as url,
            plugin_config(backend_url=url, backend_token=BACKEND_TOKEN, sync_poll_interval=0.05),
        ):
            job = SyncEndpointJob.enqueue(instance=self.endpoint, user=self.admin)
            # What a worker would do, in a thread with its own database connection.
            worker = threading.Thread(target=self._run_job, args=(job.pk,))
            worker.start()
            try:
                wait_until(lambda: service.calls, 60, "the run to reach the backend")
                page = self.page()
                page.goto(f"/core/jobs/{job.pk}/log/")
                wait_until(
                    lambda: (
                        page.reload() is not None
                        and "Stage guests: started, 1 to process" in page.content()
                    ),
                    30,
                    "the running stage in the Job's log tab",
                )
                page.goto(f"/core/jobs/{job.pk}/")
                assert "Running" in page.locator("body").inner_text()
                # The report card follows the run without a reload (htmx polls it).
                page.locator("#sync-job-live").wait_for()
                page.locator("#sync-job-progress", has_text="Stage guests").wait_for(timeout=30_000)
                service.release.set()
                worker.join(60)
                page.locator("#sync-job-counters").wait_for(timeout=30_000)
                assert page.locator("#sync-job-live").count() == 0
            finally:
                service.release.set()
                worker.join(60)
        job.refresh_from_db()
        self.assertEqual(job.status, JobStatusChoices.STATUS_COMPLETED, job.error)

    def test_preview_page_lists_the_plan_and_apply_queues_the_sync(self):
        service = PlanningSyncService()
        with (
            serve_backend(service) as url,
            plugin_config(backend_url=url, backend_token=BACKEND_TOKEN),
        ):
            page = self.page()
            page.goto(f"/plugins/proxbox/endpoints/{self.endpoint.pk}/")
            page.locator("#preview-sync").click()
            page.wait_for_url(f"**/plugins/proxbox/endpoints/{self.endpoint.pk}/preview/")
            vms = page.locator('[data-object-type="virtualization.virtualmachine"]')
            text = vms.inner_text()
            assert "1 to create, 1 to update, 1 to delete" in text
            assert "memory: 2048 → 4096" in text
            assert "old-vm (#13)" in text
            assert "device: new dcim.device pve9" in text
            assert service.previews == [self.endpoint.pk] and service.calls == []
            self.assertFalse(SyncEndpointJob.get_jobs(self.endpoint).exists())
            # No worker runs here: Apply queues the same Job as Sync now.
            page.locator("#apply-sync button[type=submit]").click()
            page.wait_for_url(f"**/plugins/proxbox/endpoints/{self.endpoint.pk}/")
            assert "queued as" in page.locator("body").inner_text()
        job = SyncEndpointJob.get_jobs(self.endpoint).get()
        self.assertEqual(job.user, self.admin)

    def test_a_populated_inventory_list_renders_its_rows_and_leads_to_the_records(self):
        cluster, _sync_state = self.link_native_cluster()
        storage = ProxmoxStorage.objects.create(
            cluster=cluster, name="local-zfs-browser", node="pve1", storage_type="zfspool"
        )
        backup = ProxmoxBackup.objects.create(
            cluster=cluster, storage=storage, volume="local-zfs-browser:backup/vzdump-qemu-101.vma"
        )
        viewer = self.viewer(
            "netbox_proxbox.view_proxmoxstorage",
            "netbox_proxbox.view_proxmoxbackup",
            "virtualization.view_cluster",
        )
        # The process's first page loads every URL configuration and template, which on a
        # busy machine outlasts the browser's timeout: render it once in-process first.
        warm = Client()
        warm.force_login(viewer)
        self.assertEqual(warm.get("/plugins/proxbox/inventory/storages/").status_code, 200)
        page = self.page(viewer)
        # The rows are in the served HTML: no need to wait for every static file.
        page.goto("/plugins/proxbox/inventory/storages/", wait_until="domcontentloaded")
        row = page.locator("table tbody tr", has_text="local-zfs-browser")
        assert row.locator("td", has_text="zfspool").count() == 1
        assert row.locator(f'a[href="{cluster.get_absolute_url()}"]').inner_text() == "native-ui"
        # Server-owned: the row has no edit or delete button.
        assert row.locator(".mdi-pencil, .mdi-trash-can-outline").count() == 0
        row.locator(f'a[href="{storage.get_absolute_url()}"]').click()
        page.wait_for_url(f"**{storage.get_absolute_url()}", wait_until="domcontentloaded")
        # The storage's backups: a table fetched by HTMX after the page loaded.
        page.locator(f'a[href="{backup.get_absolute_url()}"]').click()
        page.wait_for_url(f"**{backup.get_absolute_url()}", wait_until="domcontentloaded")
        assert "local-zfs-browser:backup/vzdump-qemu-101.vma" in page.locator("body").inner_text()

    def test_assignment_rules_list_and_the_endpoint_rules_table_render_with_data(self):
        tenant = Tenant.objects.create(name="Initech", slug="initech")
        role = DeviceRole.objects.create(name="Batch", slug="batch", vm_role=True)
        rule = ProxmoxAssignmentRule.objects.create(
            endpoint=self.endpoint, weight=15, name_pattern="batch-.*", tenant=tenant, vm_role=role
        )
        other = make_endpoint("pve-other")
        ProxmoxAssignmentRule.objects.create(endpoint=other, weight=15, pool="lab", tenant=tenant)
        page = self.page()
        page.goto("/plugins/proxbox/assignment-rules/")
        rows = page.locator("table.object-list tbody tr")
        assert rows.count() == 2
        text = page.locator("table.object-list").inner_text()
        assert "batch-.*" in text and "lab" in text and "Initech" in text and "Batch" in text
        # The endpoint page fetches its rules table by HTMX: this endpoint's rule only.
        page.goto(self.endpoint.get_absolute_url())
        card = page.locator(".card", has_text="Assignment rules")
        card.locator(f'a[href="{rule.get_absolute_url()}"]').wait_for()
        table = card.locator("table").inner_text()
        assert "batch-.*" in table and "Initech" in table and "Batch" in table
        assert "lab" not in table
        card.locator(f'a[href="{rule.get_absolute_url()}"]').click()
        page.wait_for_url(f"**{rule.get_absolute_url()}")
        assert "Initech" in page.locator(".card", has_text="Assigns").inner_text()

    def test_the_sync_health_widget_is_added_from_the_dashboard_and_shows_failures_first(self):
        healthy = make_endpoint("pve-able")
        # A run the backend's watcher started (`record_live_run`): 2.5 s waited, 20 s run.
        live = sync_job(healthy, JobStatusChoices.STATUS_COMPLETED, 15)
        live.data = {"trigger": {"watch": {"reasons": ["qmstop 100"]}, "waited_s": 2.5}}
        live.execution_time = live.completed - live.started
        live.save()
        sync_job(self.endpoint, JobStatusChoices.STATUS_ERRORED, 9, error="Proxmox said 401")
        failed = sync_job(
            self.endpoint, JobStatusChoices.STATUS_FAILED, 2, error="NetBox answered 503"
        )
        warm = Client()
        warm.force_login(self.admin)
        self.assertEqual(warm.get("/").status_code, 200)
        page = self.page()
        page.goto("/", wait_until="domcontentloaded")
        # As an admin adds any widget: unlock the dashboard, the modal's form, the widget
        # type (which reloads the form with its own settings), an empty title (the
        # widget's default), Save.
        page.get_by_text("Unlock Dashboard").click()
        page.locator("a.btn", has_text="Add Widget").click()
        page.locator("#id_widget_class").wait_for()
        page.locator("#id_widget_class").select_option("netbox_proxbox.SyncHealthWidget")
        page.locator("#id_config-problems_only").wait_for()
        page.locator('#widget_add_form button:has-text("Save")').click()
        page.locator('tr[data-state="failing"]').wait_for()
        rows = page.locator("tr[data-endpoint]")
        assert [rows.nth(i).get_attribute("data-endpoint") for i in range(rows.count())] == [
            "pve-ui",
            "pve-able",
        ]
        # The live-sync lag: the watcher's wait plus its run, for the endpoint it watches.
        cells = page.locator('tr[data-endpoint="pve-able"] td')
        assert "22.5 s" in [cells.nth(i).inner_text().strip() for i in range(cells.count())]
        assert "22.5 s" not in page.locator('tr[data-endpoint="pve-ui"]').inner_text()
        badge = page.locator('tr[data-endpoint="pve-ui"] .badge').first
        assert badge.inner_text() == "Failing ×2"
        assert "Proxmox sync health" in page.locator("body").inner_text()
        badge.click()
        page.wait_for_url(f"**/core/jobs/{failed.pk}/", wait_until="domcontentloaded")
        assert "NetBox answered 503" in page.locator("body").inner_text()

    @staticmethod
    def _run_job(pk):
        from core.models import Job

        try:
            job = Job.objects.get(pk=pk)
            SyncEndpointJob.handle(job)
        finally:
            connection.close()
