"""Data-protection compliance: backup-job selection as Proxmox evaluates it, each rule,
the endpoint's thresholds (and their validation), REST, the list view with its exports,
the VM tab and the dashboard widget."""

from __future__ import annotations

import datetime as dt
import json

import yaml
from dcim.models import Device, DeviceRole, DeviceType, Manufacturer
from django.core.exceptions import ValidationError
from django.test import TestCase
from django.urls import reverse
from django.utils import timezone
from virtualization.models import Cluster, VirtualMachine

from netbox_proxbox.compliance import (
    INVENTORY_PERMISSIONS,
    compliance_counts,
    failed_rules,
    with_compliance,
)
from netbox_proxbox.models import (
    ProxmoxBackup,
    ProxmoxBackupJob,
    ProxmoxEndpoint,
    ProxmoxHAResource,
    ProxmoxReplicationJob,
    ProxmoxSnapshot,
    ProxmoxStorage,
)
from netbox_proxbox.widgets import ComplianceWidget

from .base import auth_header, grant, make_endpoint, make_references, make_user

NOW = timezone.now()


class ComplianceFixture(TestCase):
    @classmethod
    def setUpTestData(cls):
        cls.cluster_type, cls.site, _tenant = make_references()
        cls.cluster = Cluster.objects.create(name="pvesim", type=cls.cluster_type)
        cls.endpoint = make_endpoint("pve-a")
        ProxmoxEndpoint.objects.filter(pk=cls.endpoint.pk).update(netbox_cluster=cls.cluster)
        maker = Manufacturer.objects.create(name="Proxmox", slug="proxmox")
        device_type = DeviceType.objects.create(manufacturer=maker, model="node", slug="node")
        role = DeviceRole.objects.create(name="node", slug="node")
        cls.nodes = {
            name: Device.objects.create(
                name=name, site=cls.site, device_type=device_type, role=role, cluster=cls.cluster
            )
            for name in ("pve1", "pve2")
        }
        cls.storage = ProxmoxStorage.objects.create(
            cluster=cls.cluster, name="local", storage_type="dir", content="backup"
        )
        # Outside any endpoint's cluster: never listed.
        other = Cluster.objects.create(name="vmware", type=cls.cluster_type)
        VirtualMachine.objects.create(name="foreign", cluster=other)

    @classmethod
    def vm(cls, vmid: int, node: str = "pve1", name: str | None = None) -> VirtualMachine:
        return VirtualMachine.objects.create(
            name=name or f"vm{vmid}",
            cluster=cls.cluster,
            device=cls.nodes[node],
            custom_field_data={"proxbox_source": f"cluster-{cls.cluster.pk}/qemu/{vmid}#abc"},
        )

    def job(self, job_id="daily", **fields):
        return ProxmoxBackupJob.objects.create(cluster=self.cluster, job_id=job_id, **fields)

    def backup(self, vm, hours_ago: float, verification="none", volume=None):
        return ProxmoxBackup.objects.create(
            cluster=self.cluster,
            storage=self.storage,
            volume=volume or f"local:backup/{vm.name}-{hours_ago}",
            vmid=int(vm.custom_field_data["proxbox_source"].split("/")[2].split("#")[0]),
            virtual_machine=vm,
            backup_time=NOW - dt.timedelta(hours=hours_ago),
            verification=verification,
        )

    def row(self, vm):
        return with_compliance(VirtualMachine.objects.filter(pk=vm.pk)).get()

    def covered(self) -> set[str]:
        return set(
            with_compliance(VirtualMachine.objects.all())
            .filter(backup_job=True)
            .values_list("name", flat=True)
        )


class SelectionTest(ComplianceFixture):
    """Which guests a job selects, as pve-manager's vzdump job selection decides."""

    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cls.vm(100)
        cls.vm(101, node="pve2")
        cls.vm(102)

    def test_all_selects_every_guest_but_the_excluded(self):
        self.job(select_all=True, exclude=[101])
        self.assertEqual(self.covered(), {"vm100", "vm102"})

    def test_a_vmid_list_selects_those_only_and_wins_over_all(self):
        self.job(vmids=[101, 999], select_all=True, exclude=[101, 100])
        self.assertEqual(self.covered(), {"vm101"})

    def test_a_pool_wins_over_a_vmid_list(self):
        self.job(pool="prod", pool_vmids=[102], vmids=[100])
        self.assertEqual(self.covered(), {"vm102"})

    def test_an_empty_pool_selects_nothing(self):
        self.job(pool="empty", pool_vmids=[], select_all=True)
        self.assertEqual(self.covered(), set())

    def test_a_node_restriction_selects_only_that_nodes_guests(self):
        self.job(select_all=True, node="pve2")
        self.assertEqual(self.covered(), {"vm101"})

    def test_a_disabled_job_covers_nothing(self):
        self.job(select_all=True, enabled=False)
        self.assertEqual(self.covered(), set())

    def test_jobs_add_up(self):
        self.job("a", vmids=[100])
        self.job("b", select_all=True, node="pve2")
        self.assertEqual(self.covered(), {"vm100", "vm101"})

    def test_a_job_of_another_cluster_covers_nothing(self):
        other = Cluster.objects.create(name="other", type=self.cluster_type)
        ProxmoxBackupJob.objects.create(cluster=other, job_id="x", select_all=True)
        self.assertEqual(self.covered(), set())


class RuleTest(ComplianceFixture):
    def setUp(self):
        self.job(select_all=True)

    def test_a_fresh_backup_with_default_thresholds_is_compliant(self):
        vm = self.vm(100)
        self.backup(vm, hours_ago=3)
        row = self.row(vm)
        self.assertTrue(row.compliant)
        self.assertEqual(failed_rules(row), [])
        self.assertEqual((row.proxmox_vmid, row.backup_job), (100, True))

    def test_no_backup_job(self):
        vm = self.vm(100)
        self.backup(vm, hours_ago=3)
        ProxmoxBackupJob.objects.update(exclude=[100])
        self.assertEqual(failed_rules(self.row(vm)), ["no_backup_job"])

    def test_no_backup_or_a_stale_one(self):
        never, stale = self.vm(100), self.vm(101)
        self.backup(stale, hours_ago=27)
        self.backup(stale, hours_ago=50)
        self.assertEqual(failed_rules(self.row(never)), ["backup_stale"])
        self.assertEqual(failed_rules(self.row(stale)), ["backup_stale"])
        ProxmoxEndpoint.objects.update(backup_max_age_hours=28)
        self.assertTrue(self.row(stale).compliant)

    def test_a_failed_verification_always_and_none_when_required(self):
        failed, unverified = self.vm(100), self.vm(101)
        self.backup(failed, hours_ago=1, verification="failed")
        self.backup(failed, hours_ago=30, verification="ok")  # older: not the newest
        self.backup(unverified, hours_ago=1)
        self.assertEqual(failed_rules(self.row(failed)), ["backup_unverified"])
        self.assertTrue(self.row(unverified).compliant)
        ProxmoxEndpoint.objects.update(backup_require_verified=True)
        self.assertEqual(failed_rules(self.row(unverified)), ["backup_unverified"])
        ProxmoxBackup.objects.filter(virtual_machine=unverified).update(verification="ok")
        self.assertTrue(self.row(unverified).compliant)

    def test_snapshot_count_and_age(self):
        vm = self.vm(100)
        self.backup(vm, hours_ago=1)
        for i, days in enumerate((40, 2, 1)):
            ProxmoxSnapshot.objects.create(
                cluster=self.cluster,
                virtual_machine=vm,
                name=f"s{i}",
                snapshot_time=NOW - dt.timedelta(days=days),
            )
        row = self.row(vm)
        self.assertEqual(row.snapshot_count, 3)
        self.assertEqual(row.oldest_snapshot_at, NOW - dt.timedelta(days=40))
        self.assertEqual(failed_rules(row), ["snapshots"])  # older than 30 days
        ProxmoxEndpoint.objects.update(snapshot_max_age_days=None)
        self.assertTrue(self.row(vm).compliant)
        ProxmoxEndpoint.objects.update(snapshot_max_count=2)
        self.assertEqual(failed_rules(self.row(vm)), ["snapshots"])

    def test_failing_replication(self):
        vm = self.vm(100)
        self.backup(vm, hours_ago=1)
        ProxmoxReplicationJob.objects.create(
            cluster=self.cluster,
            job_id="100-0",
            vmid=100,
            virtual_machine=vm,
            target="pve2",
            state="error",
            fail_count=2,
            error="missing replicate feature",
        )
        ProxmoxReplicationJob.objects.create(
            cluster=self.cluster,
            job_id="100-1",
            vmid=100,
            virtual_machine=vm,
            target="pve2",
            state="ok",
        )
        row = self.row(vm)
        self.assertEqual((row.replication_state, row.replication_failures), ("error", 2))
        self.assertEqual(failed_rules(row), ["replication_failing"])
        ProxmoxEndpoint.objects.update(replication_max_failures=2)
        self.assertTrue(self.row(vm).compliant)
        ProxmoxReplicationJob.objects.filter(job_id="100-0").update(enabled=False)
        self.assertEqual(self.row(vm).replication_state, "ok")

    def test_ha_required(self):
        vm, managed = self.vm(100), self.vm(101)
        self.backup(vm, hours_ago=1)
        self.backup(managed, hours_ago=1)
        ProxmoxHAResource.objects.create(
            cluster=self.cluster, sid="vm:101", vmid=101, virtual_machine=managed, state="started"
        )
        self.assertTrue(self.row(vm).compliant)
        self.assertEqual(self.row(managed).ha_state, "started")
        ProxmoxEndpoint.objects.update(ha_required=True)
        self.assertEqual(failed_rules(self.row(vm)), ["ha_missing"])
        self.assertTrue(self.row(managed).compliant)
        ProxmoxHAResource.objects.update(state="disabled")
        self.assertEqual(failed_rules(self.row(managed)), ["ha_missing"])

    def test_counts(self):
        good, bad = self.vm(100), self.vm(101)
        self.backup(good, hours_ago=1)
        counts = compliance_counts(VirtualMachine.objects.all())
        self.assertEqual((counts["total"], counts["out_of_policy"]), (2, 1))
        self.assertEqual(counts["backup_stale"], 1)
        self.assertEqual(counts["no_backup_job"], 0)
        self.assertNotIn(bad.pk, [])


class ThresholdValidationTest(ComplianceFixture):
    def test_out_of_range_thresholds_name_their_field(self):
        for field, value in (
            ("backup_max_age_hours", 0),
            ("backup_max_age_hours", 24 * 367),
            ("snapshot_max_age_days", 0),
            ("snapshot_max_count", 1001),
            ("replication_max_failures", 1001),
        ):
            endpoint = ProxmoxEndpoint.objects.get(pk=self.endpoint.pk)
            setattr(endpoint, field, value)
            with self.assertRaises(ValidationError) as caught:
                endpoint.full_clean()
            self.assertIn(field, caught.exception.message_dict, field)

    def test_rest_refuses_a_bad_threshold_naming_the_field_and_writes_nothing(self):
        _user, token = make_user(
            "editor",
            ["netbox_proxbox.view_proxmoxendpoint", "netbox_proxbox.change_proxmoxendpoint"],
        )
        url = reverse(
            "plugins-api:netbox_proxbox-api:proxmoxendpoint-detail", args=[self.endpoint.pk]
        )
        answer = self.client.patch(
            url,
            data=json.dumps({"backup_max_age_hours": 0, "ha_required": True}),
            content_type="application/json",
            **auth_header(token),
        )
        self.assertEqual(answer.status_code, 400, answer.content)
        self.assertIn("backup_max_age_hours", answer.json())
        self.assertFalse(ProxmoxEndpoint.objects.get(pk=self.endpoint.pk).ha_required)
        answer = self.client.patch(
            url,
            data=json.dumps({"backup_max_age_hours": 48, "snapshot_max_count": 5}),
            content_type="application/json",
            **auth_header(token),
        )
        self.assertEqual(answer.status_code, 200, answer.content)
        self.assertEqual(
            (answer.json()["backup_max_age_hours"], answer.json()["snapshot_max_count"]), (48, 5)
        )

    def test_defaults(self):
        endpoint = ProxmoxEndpoint.objects.get(pk=self.endpoint.pk)
        self.assertEqual(
            (
                endpoint.backup_max_age_hours,
                endpoint.backup_require_verified,
                endpoint.snapshot_max_count,
                endpoint.snapshot_max_age_days,
                endpoint.replication_max_failures,
                endpoint.ha_required,
            ),
            (26, False, None, 30, 0, False),
        )


class CompliancePagesTest(ComplianceFixture):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        ProxmoxBackupJob.objects.create(cluster=cls.cluster, job_id="daily", select_all=True)
        cls.good, cls.bad = cls.vm(100, name="good"), cls.vm(101, name="bad")
        ProxmoxBackup.objects.create(
            cluster=cls.cluster,
            storage=cls.storage,
            volume="local:backup/g",
            vmid=100,
            virtual_machine=cls.good,
            backup_time=NOW,
        )

    def setUp(self):
        self.user, self.token = make_user(
            "viewer", ["virtualization.view_virtualmachine", *INVENTORY_PERMISSIONS]
        )
        self.client.force_login(self.user)

    def test_rest_lists_filters_and_details(self):
        url = reverse("plugins-api:netbox_proxbox-api:compliance-list")
        rows = self.client.get(url, **auth_header(self.token)).json()["results"]
        self.assertEqual([r["name"] for r in rows], ["bad", "good"])
        bad = rows[0]
        self.assertEqual((bad["vmid"], bad["node"], bad["compliant"]), (101, "pve1", False))
        self.assertEqual(bad["failed_rules"], ["backup_stale"])
        self.assertEqual(bad["endpoint"], {"id": self.endpoint.pk, "name": "pve-a"})
        for query, names in (
            ({"compliant": "false"}, ["bad"]),
            ({"backup_stale": "true"}, ["bad"]),
            ({"no_backup_job": "true"}, []),
            ({"vmid": 100}, ["good"]),
            ({"vmid": [100, 101]}, ["bad", "good"]),
            ({"cluster_id": [self.cluster.pk]}, ["bad", "good"]),
            ({"endpoint_id": self.endpoint.pk, "q": "goo"}, ["good"]),
        ):
            got = self.client.get(url, query, **auth_header(self.token)).json()["results"]
            self.assertEqual([r["name"] for r in got], names, query)
        # A non-number is refused naming the filter, as NetBox's own lists refuse one.
        for filter_name, core_url, core_filter in (
            ("vmid", reverse("virtualization-api:virtualmachine-list"), "vcpus"),
            ("cluster_id", reverse("virtualization-api:virtualmachine-list"), "cluster_id"),
        ):
            refused = self.client.get(url, {filter_name: "null"}, **auth_header(self.token))
            core = self.client.get(core_url, {core_filter: "x"}, **auth_header(self.token))
            self.assertEqual((refused.status_code, core.status_code), (400, 400), filter_name)
            self.assertEqual(list(refused.json()), [filter_name])
        detail = self.client.get(f"{url}{self.good.pk}/", **auth_header(self.token)).json()
        self.assertTrue(detail["compliant"])
        self.assertIn(self.client.post(url, {}, **auth_header(self.token)).status_code, (403, 405))

    def test_rest_shows_only_the_vms_the_user_may_view(self):
        self.client.logout()
        user, token = make_user("one-vm", INVENTORY_PERMISSIONS)
        grant(user, "virtualization.view_virtualmachine", constraints={"name": "good"})
        url = reverse("plugins-api:netbox_proxbox-api:compliance-list")
        answer = self.client.get(url, **auth_header(token))
        self.assertEqual(answer.status_code, 200, answer.content)
        self.assertEqual([r["name"] for r in answer.json()["results"]], ["good"])
        self.assertEqual(
            self.client.get(f"{url}{self.bad.pk}/", **auth_header(token)).status_code, 404
        )

    def test_a_vm_viewer_without_the_inventory_permissions_sees_no_compliance(self):
        """Compliance is read from the endpoints and their backups, jobs, snapshots,
        replication and HA: each of those view permissions is needed, as well."""
        url = reverse("plugins-api:netbox_proxbox-api:compliance-list")
        list_url = reverse("plugins:netbox_proxbox:compliance_list")
        tab_url = reverse("virtualization:virtualmachine_proxbox_compliance", args=[self.bad.pk])
        for missing in INVENTORY_PERMISSIONS:
            with self.subTest(missing=missing):
                name = f"no-{missing.rsplit('_', 1)[1]}"
                perms = [p for p in INVENTORY_PERMISSIONS if p != missing]
                user, token = make_user(name, ["virtualization.view_virtualmachine", *perms])
                self.client.logout()  # the token's user, not the session's
                answer = self.client.get(url, **auth_header(token))
                self.assertEqual(answer.status_code, 403, answer.content)
                self.client.force_login(user)
                self.assertEqual(self.client.get(list_url).status_code, 403)
                self.assertEqual(self.client.get(tab_url).status_code, 403)

                class Request:
                    pass

                Request.user = user
                html = ComplianceWidget().render(Request())
                self.assertNotIn("data-out-of-policy", html)

    def test_list_view_filters_and_exports_csv_and_yaml(self):
        url = reverse("plugins:netbox_proxbox:compliance_list")
        page = self.client.get(url, {"compliant": "false"})
        self.assertEqual(page.status_code, 200)
        self.assertContains(page, ">bad<")
        self.assertNotContains(page, ">good<")
        csv = self.client.get(url, {"export": "csv"})
        lines = b"".join(csv.streaming_content if csv.streaming else [csv.content]).decode()
        self.assertIn("backup_stale", lines)
        self.assertEqual(len(lines.strip().splitlines()), 3)
        documents = list(yaml.safe_load_all(self.client.get(url, {"export": "yaml"}).content))
        self.assertEqual(
            [(d["name"], d["compliant"], d["failed_rules"]) for d in documents],
            [("bad", False, ["backup_stale"]), ("good", True, [])],
        )

    def test_vm_tab_and_widget(self):
        page = self.client.get(
            reverse("virtualization:virtualmachine_proxbox_compliance", args=[self.bad.pk])
        )
        self.assertContains(page, 'data-rule="backup_stale" data-broken="true"')
        self.assertContains(page, 'data-compliant="false"')
        vm_page = self.client.get(self.good.get_absolute_url())
        self.assertContains(vm_page, "Data protection")

        class Request:
            user = self.user

        html = ComplianceWidget().render(Request())
        self.assertIn('data-out-of-policy="1"', html)
        self.assertIn('data-rule="backup_stale" data-count="1"', html)
