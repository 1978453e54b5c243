"""A thread-served NetBox for tests with real HTTP clients and parallel connections.

Data for these tests is committed (each request thread has its own database
connection), so `committed_inventory` removes everything it created afterwards.
"""

from __future__ import annotations

import contextlib
import uuid

import pytest
from core.models import ObjectChange
from dcim.models import Site
from django.core.servers.basehttp import ThreadedWSGIServer
from django.test.testcases import LiveServerThread, _StaticFilesHandler
from tenancy.models import Tenant
from users.models import ObjectPermission, Token, User
from virtualization.models import Cluster, ClusterType

from netbox_proxbox.models import ProxmoxEndpoint

from .base import CLAIM_UPDATE_PERMS, grant


class BurstWSGIServer(ThreadedWSGIServer):
    # Dozens of clients connect in the same instant; the default backlog (10) resets them.
    request_queue_size = 128


class NetBoxServerThread(LiveServerThread):
    server_class = BurstWSGIServer


@contextlib.contextmanager
def serve_netbox():
    thread = NetBoxServerThread("127.0.0.1", _StaticFilesHandler, port=0)
    thread.daemon = True
    thread.start()
    thread.is_ready.wait()
    if thread.error:
        raise thread.error
    try:
        yield f"http://127.0.0.1:{thread.port}"
    finally:
        thread.terminate()


class Inventory:
    """Committed fixtures for one test, all named with a unique tag, removed at teardown."""

    def __init__(self):
        self.tag = uuid.uuid4().hex[:8]
        self.cluster_type = ClusterType.objects.create(
            name=f"Proxmox {self.tag}", slug=f"proxmox-{self.tag}"
        )
        self.site = Site.objects.create(name=f"Site {self.tag}", slug=f"site-{self.tag}")
        self.tenant = Tenant.objects.create(name=f"Tenant {self.tag}", slug=f"tenant-{self.tag}")
        self.users: list[User] = []
        self.endpoints: list[ProxmoxEndpoint] = []

    def user(self, perms=CLAIM_UPDATE_PERMS, *, write_enabled=True) -> tuple[User, Token]:
        user = User.objects.create_user(username=f"u{len(self.users)}-{self.tag}")
        for name in perms:
            grant(user, name)
        self.users.append(user)
        return user, Token.objects.create(user=user, write_enabled=write_enabled)

    def endpoint(self, name: str) -> ProxmoxEndpoint:
        endpoint = ProxmoxEndpoint(
            name=f"{name}-{self.tag}", host=f"{name}.example", token_id="proxbox@pve!live"
        )
        endpoint.token_secret = "live-secret"
        endpoint.save()
        self.endpoints.append(endpoint)
        return endpoint

    def body(self, name: str, **extra) -> dict:
        return {
            "name": f"{name}-{self.tag}",
            "mode": "cluster",
            "cluster_type": self.cluster_type.pk,
            **extra,
        }

    def clusters(self):
        return Cluster.objects.filter(type=self.cluster_type)

    def remove(self):
        ProxmoxEndpoint.objects.filter(name__endswith=self.tag).delete()
        self.clusters().delete()
        for model in (ClusterType, Site, Tenant):
            model.objects.filter(slug__endswith=self.tag).delete()
        ObjectChange.objects.filter(user__in=self.users).delete()
        ObjectPermission.objects.filter(users__in=self.users).delete()
        User.objects.filter(pk__in=[u.pk for u in self.users]).delete()


@pytest.fixture
def committed_inventory(django_db_setup, django_db_blocker):
    with django_db_blocker.unblock():
        inventory = Inventory()
        try:
            yield inventory
        finally:
            inventory.remove()


@pytest.fixture
def live_netbox(django_db_setup, django_db_blocker):
    with django_db_blocker.unblock(), serve_netbox() as url:
        yield url
