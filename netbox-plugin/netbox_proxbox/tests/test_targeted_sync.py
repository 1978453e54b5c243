"""Sync now on one VM or node device: REST body, page button, only inside the endpoint's cluster."""

from __future__ import annotations

from dcim.models import Device, DeviceRole, DeviceType, Manufacturer
from django.urls import reverse
from rest_framework.test import APIClient
from virtualization.models import Cluster, VirtualMachine

from netbox_proxbox.sync.jobs import SyncEndpointJob

from .backend import ScriptedSyncService
from .base import auth_header, grant, make_endpoint, make_references
from .test_sync_now import SyncNowTestCase, backend, sync_url


class TargetedSyncTest(SyncNowTestCase):
    @classmethod
    def setUpTestData(cls):
        super().setUpTestData()
        cluster_type, site, _tenant = make_references()
        cls.cluster = Cluster.objects.create(name="pvesim", type=cluster_type)
        cls.endpoint.netbox_cluster = cls.cluster
        cls.endpoint.save(assign_native_cluster=True)
        cls.vm = VirtualMachine.objects.create(
            name="web", cluster=cls.cluster, custom_field_data={}
        )
        # The custom field may not exist in a bare test database: set the data directly.
        VirtualMachine.objects.filter(pk=cls.vm.pk).update(
            custom_field_data={"proxbox_source": f"cluster-{cls.cluster.pk}/qemu/104#c1"}
        )
        manufacturer = Manufacturer.objects.create(name="Proxmox", slug="proxmox")
        device_type = DeviceType.objects.create(
            manufacturer=manufacturer, model="Node", slug="node"
        )
        role = DeviceRole.objects.create(name="Hypervisor", slug="hypervisor")
        cls.node = Device.objects.create(
            name="pve2", site=site, device_type=device_type, role=role, cluster=cls.cluster
        )
        cls.foreign_vm = VirtualMachine.objects.create(
            name="elsewhere", cluster=Cluster.objects.create(name="other", type=cluster_type)
        )
        for name in ("virtualization.view_virtualmachine", "dcim.view_device"):
            grant(cls.operator, name)

    def post(self, body):
        return APIClient().post(
            sync_url(self.endpoint), body, format="json", **auth_header(self.token)
        )

    def test_rest_body_syncs_only_that_guest_or_node(self):
        service = ScriptedSyncService()
        with backend(service):
            self.assertEqual(self.post({"virtual_machine": self.vm.pk}).status_code, 202)
            self.assertEqual(self.post({"device": self.node.pk}).status_code, 202)
        self.assertEqual(
            [(t.guest, t.node) for t in service.targets],
            [
                (("qemu", 104), None),
                (None, "pve2"),
            ],
        )
        jobs = SyncEndpointJob.get_jobs(self.endpoint).order_by("pk")
        self.assertEqual(
            [j.data["target"] for j in jobs], [{"guest": "qemu/104"}, {"node": "pve2"}]
        )
        self.assertIn("(only guest qemu/104)", jobs[0].log_entries[0]["message"])

    def test_objects_outside_the_endpoint_or_unsynced_are_refused(self):
        with backend(ScriptedSyncService()):
            self.assertEqual(self.post({"virtual_machine": self.foreign_vm.pk}).status_code, 404)
            self.assertEqual(self.post({"virtual_machine": 999999}).status_code, 404)
            both = self.post({"virtual_machine": self.vm.pk, "device": self.node.pk})
            self.assertEqual(both.status_code, 400)
            self.assertIn("device", both.json())
            other = make_endpoint("pve-b")
            response = APIClient().post(
                sync_url(other),
                {"virtual_machine": self.vm.pk},
                format="json",
                **auth_header(self.token),
            )
            self.assertEqual(response.status_code, 400, response.content)
        self.assertFalse(SyncEndpointJob.get_jobs(self.endpoint).exists())

    def test_the_vm_page_has_a_sync_now_button_that_syncs_that_guest(self):
        self.client.force_login(self.operator)
        page = self.client.get(self.vm.get_absolute_url()).content.decode()
        self.assertIn('id="proxbox-sync-object"', page)
        self.assertNotIn(
            'id="proxbox-sync-object"',
            self.client.get(self.foreign_vm.get_absolute_url()).content.decode(),
        )
        service = ScriptedSyncService()
        url = reverse("plugins:netbox_proxbox:sync_object", args=["virtualmachine", self.vm.pk])
        with backend(service):
            response = self.client.post(url)
        self.assertRedirects(response, self.vm.get_absolute_url(), fetch_redirect_response=False)
        self.assertEqual(service.targets[0].guest, ("qemu", 104))


class SyncAllTest(SyncNowTestCase):
    def test_sync_all_queues_every_enabled_endpoint_the_user_may_sync(self):
        make_endpoint("pve-off", enabled=False)
        second = make_endpoint("pve-b")
        self.client.force_login(self.operator)
        listing = self.client.get(reverse("plugins:netbox_proxbox:proxmoxendpoint_list"))
        self.assertIn('id="sync-all"', listing.content.decode())
        service = ScriptedSyncService()
        with backend(service):
            response = self.client.post(reverse("plugins:netbox_proxbox:proxmoxendpoint_sync_all"))
        self.assertEqual(response.status_code, 302)
        self.assertEqual(sorted(service.calls), sorted([self.endpoint.pk, second.pk]))
