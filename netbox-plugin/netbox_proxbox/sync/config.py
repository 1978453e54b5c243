"""The plugin's settings for reaching the sync backend (PLUGINS_CONFIG["netbox_proxbox"])."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from netbox.plugins import get_plugin_config

from ..constants import (
    DEFAULT_BACKEND_REQUEST_TIMEOUT,
    DEFAULT_SYNC_POLL_INTERVAL,
    DEFAULT_SYNC_QUEUE,
    DEFAULT_SYNC_TIMEOUT,
    RQ_TIMEOUT_MARGIN,
)

PLUGIN = "netbox_proxbox"


class BackendNotConfigured(Exception):
    """A setting the Job needs is missing or malformed; the message names the setting."""


@dataclass(frozen=True)
class BackendSettings:
    url: str
    # repr=False: instances end up in logs and tracebacks.
    token: str = field(repr=False)
    sync_timeout: float
    poll_interval: float
    request_timeout: float

    @classmethod
    def load(cls) -> BackendSettings:
        url = (get_plugin_config(PLUGIN, "backend_url") or "").strip().rstrip("/")
        if not url:
            raise BackendNotConfigured(
                'PLUGINS_CONFIG["netbox_proxbox"]["backend_url"] is not set: '
                "NetBox does not know where the Proxbox sync backend runs"
            )
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise BackendNotConfigured(
                'PLUGINS_CONFIG["netbox_proxbox"]["backend_url"] must be an http(s) URL, '
                f"got {url!r}"
            )
        return cls(
            url=url,
            token=get_plugin_config(PLUGIN, "backend_token") or "",
            sync_timeout=_positive("sync_timeout", DEFAULT_SYNC_TIMEOUT),
            poll_interval=_positive("sync_poll_interval", DEFAULT_SYNC_POLL_INTERVAL),
            request_timeout=_positive("backend_request_timeout", DEFAULT_BACKEND_REQUEST_TIMEOUT),
        )


def _positive(name: str, default: float) -> float:
    value = get_plugin_config(PLUGIN, name)
    if value is None:
        return float(default)
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = 0.0
    if number <= 0:
        raise BackendNotConfigured(
            f'PLUGINS_CONFIG["netbox_proxbox"]["{name}"] must be a positive number of seconds, '
            f"got {value!r}"
        )
    return number


def rq_job_timeout() -> int:
    """Seconds RQ may run the Job: the sync timeout plus room to record the outcome."""
    try:
        timeout = _positive("sync_timeout", DEFAULT_SYNC_TIMEOUT)
    except BackendNotConfigured:
        # The Job itself reports the malformed setting; RQ just needs a sane bound.
        timeout = DEFAULT_SYNC_TIMEOUT
    return int(timeout) + RQ_TIMEOUT_MARGIN


def sync_queue() -> str:
    """The RQ queue sync Jobs are enqueued on (PLUGINS_CONFIG["netbox_proxbox"]["sync_queue"]).

    Any queue NetBox has set up (settings.RQ_QUEUES) may be named: the plugin's own
    "netbox_proxbox.sync" (the default), or "default" to run syncs beside NetBox's own jobs
    on a single worker. An unknown name would leave every sync pending with no worker, so
    it is refused.
    """
    name = get_plugin_config(PLUGIN, "sync_queue") or DEFAULT_SYNC_QUEUE
    if not isinstance(name, str) or name not in settings.RQ_QUEUES:
        raise ImproperlyConfigured(
            'PLUGINS_CONFIG["netbox_proxbox"]["sync_queue"] must name one of NetBox\'s RQ queues '
            f"({', '.join(sorted(settings.RQ_QUEUES))}), got {name!r}"
        )
    return name
