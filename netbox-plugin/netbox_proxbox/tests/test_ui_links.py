"""Every page of both plugins renders with data, for an administrator and a view-only user.

A populated demo cluster (every inventory type, a tracked cluster, its sync state, the
endpoint, a script project with a Script File and a revision) is crawled from the
navigation menus and every object's detail page: each link (`href`, and the `hx-get` of
tables loaded after the page) under the plugins' prefixes or to NetBox's pages of the
cluster, its VM and node devices is opened, and no page may answer 5xx.
Server-owned records (inventory, tracked clusters, sync states) offer no Add/Edit.
"""

from __future__ import annotations

import datetime
import re
from html import unescape
from importlib import import_module
from urllib.parse import parse_qsl, urlencode, urljoin, urlsplit

from core.models import ObjectType
from dcim.models import Device, DeviceRole, DeviceType, Manufacturer
from django.test import Client, TestCase
from django.urls import reverse
from users.models import ObjectPermission, User
from virtualization.models import Cluster, VirtualMachine

from netbox_proxbox.models import (
    ProxboxClusterSyncState,
    ProxmoxAssignmentRule,
    ProxmoxBackup,
    ProxmoxBackupJob,
    ProxmoxCluster,
    ProxmoxHAGroup,
    ProxmoxHAResource,
    ProxmoxHARule,
    ProxmoxReplicationJob,
    ProxmoxSnapshot,
    ProxmoxStorage,
)
from netbox_script_projects.models import ScriptFile, ScriptProject, ScriptProjectRevision

from .base import make_endpoint, make_references

PLUGIN_PREFIXES = ("/plugins/proxbox/", "/plugins/script-projects/")
PLUGINS = ("netbox_proxbox", "netbox_script_projects")
# Sorting and paging links lead to the same page and rows, and NetBox saves them as the
# user's table preference: not followed. Exports are opened but not mined for links.
NOT_FOLLOWED_PARAMS = {"sort", "per_page", "page"}
NOT_MINED_PARAMS = {"export"}
SERVER_OWNED = (
    "proxmoxcluster",
    "proxboxclustersyncstate",
    "proxmoxstorage",
    "proxmoxbackup",
    "proxmoxbackupjob",
    "proxmoxsnapshot",
    "proxmoxreplicationjob",
    "proxmoxhagroup",
    "proxmoxharesource",
    "proxmoxharule",
)
# NetBox models the view-only user may see besides both plugins' own.
NATIVE_VIEWABLE = (
    ("virtualization", "cluster"),
    ("virtualization", "clustertype"),
    ("virtualization", "virtualmachine"),
    ("dcim", "device"),
    ("dcim", "devicetype"),
    ("dcim", "devicerole"),
    ("dcim", "manufacturer"),
    ("dcim", "site"),
    ("tenancy", "tenant"),
    ("extras", "tag"),
)
WRITE_VIEWS = {"add", "edit", "delete", "import"}
# NetBox's Add, Edit / Bulk edit, Delete / Bulk delete and Import buttons (Clone links to add).
WRITE_BUTTON_ICONS = ("mdi-plus-thick", "mdi-pencil", "mdi-trash-can", "mdi-upload")
WHEN = datetime.datetime(2026, 3, 1, 2, 0, tzinfo=datetime.UTC)


# NetBox's templates quote every attribute with double quotes; a regular expression reads
# pages several times faster than an HTML parser, which matters for a crawl of every page.
LINK = re.compile(r'\s(?:href|hx-get)="([^"]+)"')


def links_of(html: str) -> list[str]:
    return [unescape(link) for link in LINK.findall(html)]


def menu_links(plugin: str) -> list[str]:
    """Every entry and button of a plugin's navigation menu."""
    menu = import_module(f"{plugin}.navigation").menu
    links = []
    for group in menu.groups:
        for item in group.items:
            links.append(reverse(item.link))
            links.extend(reverse(button.link) for button in item.buttons)
    return links


class PopulatedDemoCluster(TestCase):
    """What a sync of the demo cluster leaves behind, one or two of everything."""

    @classmethod
    def setUpTestData(cls):
        cluster_type, site, _tenant = make_references()
        cls.cluster = Cluster.objects.create(name="pvesim-demo-cluster", type=cluster_type)
        maker = Manufacturer.objects.create(name="Proxmox", slug="proxmox")
        device_type = DeviceType.objects.create(manufacturer=maker, model="node", slug="node")
        role = DeviceRole.objects.create(name="node", slug="node")
        cls.nodes = [
            Device.objects.create(
                name=name, site=site, device_type=device_type, role=role, cluster=cls.cluster
            )
            for name in ("pve1", "pve2")
        ]
        cls.vm = VirtualMachine.objects.create(name="web-001", cluster=cls.cluster)
        cls.endpoint = make_endpoint("pve-demo")
        cls.endpoint.netbox_cluster = cls.cluster
        cls.endpoint.save(assign_native_cluster=True)
        cls.rule = ProxmoxAssignmentRule.objects.create(
            endpoint=cls.endpoint, weight=10, name_pattern="web-.*", vm_role=role, site=site
        )
        cls.tracking = ProxmoxCluster(
            endpoint=cls.endpoint,
            name="pvesim",
            cluster_id="cluster-demo-id",
            netbox_cluster=cls.cluster,
            version="8.2.4",
            quorate=True,
            node_count=2,
            last_seen=WHEN,
        )
        cls.tracking.save(claim=True)
        cls.sync_state = ProxboxClusterSyncState(
            cluster=cls.cluster,
            proxmox_cluster=cls.tracking,
            last_sync=WHEN,
            status="succeeded",
            objects_created=12,
        )
        cls.sync_state.save(claim=True)
        shared = ProxmoxStorage.objects.create(
            cluster=cls.cluster, name="nfs-backups", storage_type="nfs", shared=True, capacity=10
        )
        local = ProxmoxStorage.objects.create(
            cluster=cls.cluster,
            name="local-zfs",
            node="pve1",
            device=cls.nodes[0],
            storage_type="zfspool",
            content="images,rootdir",
            capacity=100,
            used=40,
        )
        group = ProxmoxHAGroup.objects.create(
            cluster=cls.cluster, name="prefer-pve1", nodes="pve1:2,pve2", restricted=True
        )
        cls.records = [
            shared,
            local,
            ProxmoxBackup.objects.create(
                cluster=cls.cluster,
                storage=shared,
                volume="nfs-backups:backup/vzdump-qemu-101-2026_03_01-02_00_00.vma.zst",
                vmid=101,
                virtual_machine=cls.vm,
                backup_time=WHEN,
                size=2048,
                format="vma.zst",
                verification="ok",
            ),
            ProxmoxBackupJob.objects.create(
                cluster=cls.cluster,
                job_id="backup-nightly",
                schedule="02:00",
                selection="all",
                storage="nfs-backups",
                mode="snapshot",
                retention="keep-last=3",
            ),
            ProxmoxSnapshot.objects.create(
                cluster=cls.cluster,
                virtual_machine=cls.vm,
                name="before-upgrade",
                snapshot_time=WHEN,
                vmstate=True,
            ),
            ProxmoxReplicationJob.objects.create(
                cluster=cls.cluster,
                job_id="101-0",
                vmid=101,
                virtual_machine=cls.vm,
                target="pve2",
                target_device=cls.nodes[1],
                schedule="*/15",
                last_sync=WHEN,
                state="ok",
            ),
            group,
            ProxmoxHAResource.objects.create(
                cluster=cls.cluster,
                sid="vm:101",
                vmid=101,
                virtual_machine=cls.vm,
                state="started",
                group=group,
            ),
            ProxmoxHARule.objects.create(
                cluster=cls.cluster,
                name="pin-pve1",
                rule_type="node-affinity",
                nodes="pve1:2,pve2",
                strict=True,
            ),
        ]
        cls.records[-1].resources.set([cls.records[-2]])
        cls.project = ScriptProject.objects.create(name="Demo scripts", key="demo-scripts")
        cls.script_file = ScriptFile.objects.create(project=cls.project, path="scripts/demo.py")
        cls.revision = ScriptProjectRevision.objects.create(
            project=cls.project,
            digest="a" * 64,
            script_file_digest="b" * 64,
            status="valid",
            file_count=1,
            total_size=120,
        )
        cls.admin = User.objects.create_user(username="demo-admin", is_superuser=True)
        cls.viewer = User.objects.create_user(username="demo-view-only")
        permission = ObjectPermission.objects.create(name="view everything", actions=["view"])
        permission.users.add(cls.viewer)
        permission.object_types.add(
            *ObjectType.objects.filter(app_label__in=PLUGINS),
            *(ObjectType.objects.get(app_label=a, model=m) for a, m in NATIVE_VIEWABLE),
        )

    def client_for(self, user) -> Client:
        # A failing page is reported with its URL, beside the others, instead of raised.
        client = Client(raise_request_exception=False)
        client.force_login(user)
        return client

    def server_owned(self):
        return [self.tracking, self.sync_state, *self.records]


class EveryLinkRendersTest(PopulatedDemoCluster):
    def native_pages(self) -> list[str]:
        return [o.get_absolute_url() for o in (self.cluster, self.vm, *self.nodes)]

    def seeds(self) -> list[str]:
        objects = [
            self.endpoint,
            self.rule,
            *self.server_owned(),
            self.project,
            self.script_file,
            self.revision,
        ]
        return [
            *(link for plugin in PLUGINS for link in menu_links(plugin)),
            *(o.get_absolute_url() for o in objects),
            *self.native_pages(),
            # Search results list the indexed records with their links.
            *(f"{reverse('search')}?q={q}" for q in ("pvesim", "local-zfs")),
        ]

    def followed(self, url: str, native_pages: set[str]) -> bool:
        parts = urlsplit(url)
        if NOT_FOLLOWED_PARAMS & dict(parse_qsl(parts.query)).keys():
            return False
        return parts.path.startswith(PLUGIN_PREFIXES) or url in native_pages

    def crawl(self, user) -> tuple[dict[str, int], list[str]]:
        """Status of every page reached, and the pages that answered 5xx."""
        client = self.client_for(user)
        native_pages = set(self.native_pages())
        queue = list(dict.fromkeys(self.seeds()))
        seen = {shape(url) for url in queue} | set(queue)
        statuses: dict[str, int] = {}
        while queue:
            url = queue.pop(0)
            response = client.get(url)
            statuses[url] = response.status_code
            query = dict(parse_qsl(urlsplit(url).query))
            if (
                response.status_code != 200
                or "text/html" not in response.get("Content-Type", "")
                or NOT_MINED_PARAMS & query.keys()
            ):
                continue
            for link in set(links_of(response.content.decode())):
                target = normalized(urljoin(url, link))
                if target and self.followed(target, native_pages) and shape(target) not in seen:
                    seen.add(shape(target))
                    queue.append(target)
        failures = [f"{url} -> {status}" for url, status in statuses.items() if status >= 500]
        return statuses, failures

    def assert_crawl_is_clean(self, user):
        statuses, failures = self.crawl(user)
        self.assertEqual(failures, [], f"{len(failures)} of {len(statuses)} pages failed")
        # The crawl did reach every record's page and the plugins' lists.
        for obj in (*self.server_owned(), self.endpoint, self.script_file):
            self.assertEqual(statuses.get(obj.get_absolute_url()), 200, obj)
        return statuses

    def test_every_page_renders_for_an_administrator(self):
        statuses = self.assert_crawl_is_clean(self.admin)
        broken = sorted(url for url, status in statuses.items() if status == 404)
        self.assertEqual(broken, [], "links to pages that do not exist")

    def test_every_page_renders_for_a_view_only_user(self):
        statuses = self.assert_crawl_is_clean(self.viewer)
        # Links on the pages of someone who may only view lead to nothing they may not open
        # (menu entries are seeded whether shown or not).
        menu = {link for plugin in PLUGINS for link in menu_links(plugin)}
        refused = sorted(u for u, s in statuses.items() if s == 403 and u not in menu)
        self.assertEqual(refused, [], "pages a view-only user is shown links to but refused")


def shape(url: str) -> str:
    """The view and query a link opens, whichever object: the same tab (changelog, journal,
    a filtered list) of two records of one type renders the same code, so one is opened."""
    parts = urlsplit(url)
    keys = sorted({k for k, _v in parse_qsl(parts.query, keep_blank_values=True)})
    return re.sub(r"/\d+/", "/<pk>/", parts.path) + "?" + "&".join(keys)


def normalized(url: str) -> str | None:
    """A crawlable local URL: same-site, no fragment, no return_url (every link carries one)."""
    parts = urlsplit(url)
    if parts.scheme not in ("", "http") or parts.netloc not in ("", "testserver"):
        return None
    if not parts.path.startswith("/"):
        return None
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "return_url"]
    return parts.path + (f"?{urlencode(query)}" if query else "")


class ServerOwnedRecordsAreReadOnlyTest(PopulatedDemoCluster):
    """Tracked clusters, sync states and the inventory: no Add, Edit or Delete, even for
    a superuser, and their would-be form URLs render no form."""

    def setUp(self):
        self.client = self.client_for(self.admin)

    def page(self, url) -> str:
        response = self.client.get(url)
        self.assertEqual(response.status_code, 200, url)
        return response.content.decode()

    def test_lists_and_detail_pages_offer_no_write_buttons(self):
        for obj in self.server_owned():
            model = obj._meta.model_name
            list_url = reverse(f"plugins:netbox_proxbox:{model}_list")
            with self.subTest(model=model):
                listed = self.page(list_url)
                self.assertIn(f'href="{obj.get_absolute_url()}"', listed)  # the row is there
                detail = self.page(obj.get_absolute_url())
                for page in (listed, detail):
                    # What the page shows below the navigation menu (which has its own buttons).
                    content = page[page.index('id="page-content"') :]
                    hrefs = {urlsplit(link).path for link in links_of(content)}
                    written = {
                        h
                        for h in hrefs
                        if h.startswith(list_url)
                        and h.rstrip("/").rsplit("/", 1)[-1] in WRITE_VIEWS
                    }
                    self.assertEqual(written, set())
                    shown = [icon for icon in WRITE_BUTTON_ICONS if icon in content]
                    self.assertEqual(shown, [], "write buttons on a read-only page")

    def test_their_add_edit_and_delete_urls_render_no_form(self):
        for obj in self.server_owned():
            base = obj.get_absolute_url()
            list_url = reverse(f"plugins:netbox_proxbox:{obj._meta.model_name}_list")
            for url in (f"{list_url}add/", f"{base}edit/", f"{base}delete/"):
                with self.subTest(url=url):
                    response = self.client.get(url)
                    self.assertEqual(response.status_code, 404)
                    self.assertNotIn('method="post"', response.content.decode())
        for url in (
            reverse("plugins:netbox_proxbox:proxmoxcluster_list") + "add/",
            reverse("plugins:netbox_proxbox:proxmoxcluster_list") + "import/",
            f"{self.tracking.get_absolute_url()}edit/",
            f"{self.tracking.get_absolute_url()}delete/",
            f"{self.sync_state.get_absolute_url()}edit/",
            reverse("plugins:netbox_proxbox:proxmoxstorage_list") + "delete/",
        ):
            with self.subTest(post=url):
                response = self.client.post(url, {"name": "secret-renamed-by-ui", "pk": [1, 2]})
                self.assertEqual(response.status_code, 404)
        self.assertFalse(ProxmoxCluster.objects.filter(name="secret-renamed-by-ui").exists())
        self.assertEqual(ProxmoxStorage.objects.count(), 2)
        self.assertTrue(ProxboxClusterSyncState.objects.filter(pk=self.sync_state.pk).exists())

    def test_the_menu_offers_add_only_for_endpoints(self):
        home = self.page(reverse("home"))
        self.assertIn(f'href="{reverse("plugins:netbox_proxbox:proxmoxendpoint_add")}"', home)
        for model in SERVER_OWNED:
            list_url = reverse(f"plugins:netbox_proxbox:{model}_list")
            self.assertIn(f'href="{list_url}"', home)
            self.assertNotIn(f'href="{list_url}add/"', home)

    def test_script_files_link_their_edit_view_and_no_delete(self):
        listed = self.page(reverse("plugins:netbox_script_projects:scriptfile_list"))
        edit = reverse("plugins:netbox_script_projects:scriptfile_edit", args=[self.script_file.pk])
        self.assertIn(f'href="{self.script_file.get_absolute_url()}"', listed)
        self.assertIn(f'href="{edit}?return_url=', listed)
        self.assertNotIn(f"{self.script_file.get_absolute_url()}delete/", listed)
