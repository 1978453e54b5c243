"""NetBox plugin: Proxmox endpoints and their ownership of native clusters."""

from importlib import metadata

from netbox.plugins import PluginConfig

from .constants import (
    DEFAULT_BACKEND_REQUEST_TIMEOUT,
    DEFAULT_SYNC_POLL_INTERVAL,
    DEFAULT_SYNC_QUEUE,
    DEFAULT_SYNC_TIMEOUT,
    PLUGIN_SYNC_QUEUE,
)
from .distribution import DISTRIBUTION, answer_legacy_name

# The version lives in pyproject.toml only; the installed metadata carries it here.
__version__ = metadata.version(DISTRIBUTION)
# Before any migration runs: the released 0.1.0 validator asks for the old name.
answer_legacy_name()


class ProxboxConfig(PluginConfig):
    name = "netbox_proxbox"
    verbose_name = "Proxbox"
    description = "Proxmox VE endpoints, cluster tracking and the atomic sync-cluster claim"
    version = __version__
    author = "Proxbox"
    base_url = "proxbox"
    min_version = "4.7.3"
    max_version = "4.7.99"
    # encryption_key: the Fernet key encrypting endpoint token secrets at rest, or a list of
    # keys, newest first, while rotating (required: NetBox refuses to start without it).
    # backend_url / backend_token: where "Sync now" Jobs reach the Proxbox sync backend and
    # the bearer token it expects (its PROXBOX_BACKEND_API_TOKEN). sync_timeout: seconds a Job
    # waits for the backend's run; sync_poll_interval / backend_request_timeout: seconds.
    # sync_queue: the RQ queue sync Jobs are enqueued on, served by its own worker
    # (`manage.py rqworker netbox_proxbox.sync`). See README "Sync now" and "Workers".
    required_settings = ["encryption_key"]
    default_settings = {
        "backend_url": None,
        "backend_token": "",
        "sync_timeout": DEFAULT_SYNC_TIMEOUT,
        "sync_poll_interval": DEFAULT_SYNC_POLL_INTERVAL,
        "backend_request_timeout": DEFAULT_BACKEND_REQUEST_TIMEOUT,
        # Minutes between "sync all enabled endpoints" runs; None: no such schedule.
        "sync_all_interval": None,
        "sync_queue": DEFAULT_SYNC_QUEUE,
    }
    # NetBox adds each as the RQ queue "netbox_proxbox.<name>".
    queues = [PLUGIN_SYNC_QUEUE]

    def ready(self):
        super().ready()
        from django.db.models.signals import pre_migrate

        from .foreign_history import refuse_foreign_history

        pre_migrate.connect(refuse_foreign_history, sender=self)
        from .sync.config import sync_queue

        sync_queue()  # a misnamed queue stops NetBox here, not at the first sync
        from . import signals, widgets  # noqa: F401  (widgets: registers the dashboard widget)
        from .sync import schedules  # noqa: F401  (registers the schedule-keeping system job)


config = ProxboxConfig
