"""Backend settings from flags and the environment; secrets stay wrapped."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from proxbox_backend.clients.http import RetryPolicy
from proxbox_backend.clients.netbox import NetBoxClient
from proxbox_backend.clients.proxmox import ProxmoxClient, ProxmoxCredentials
from proxbox_backend.domain.endpoint import Endpoint
from proxbox_backend.secrets import Secret
from proxbox_backend.stages.guests import (
    DISAPPEARED_POLICIES,
    OFFLINE,
    SKIP_TEMPLATES,
    TEMPLATE_POLICIES,
)

ENV = {
    "netbox_url": "PROXBOX_NETBOX_URL",
    "netbox_token": "PROXBOX_NETBOX_TOKEN",
    "netbox_ca_bundle": "PROXBOX_NETBOX_CA_BUNDLE",
    "proxmox_url": "PROXBOX_PROXMOX_URL",
    "proxmox_token_id": "PROXBOX_PROXMOX_TOKEN_ID",
    "proxmox_token": "PROXBOX_PROXMOX_TOKEN",
    "proxmox_user": "PROXBOX_PROXMOX_USER",
    "proxmox_password": "PROXBOX_PROXMOX_PASSWORD",
    "proxmox_ca_bundle": "PROXBOX_PROXMOX_CA_BUNDLE",
    "disappeared": "PROXBOX_DISAPPEARED_GUESTS",
    "templates": "PROXBOX_TEMPLATES",
    "redis_url": "PROXBOX_BACKEND_REDIS_URL",
    "lease_ttl": "PROXBOX_BACKEND_LEASE_TTL",
    "watch": "PROXBOX_WATCH",
    "watch_lease": "PROXBOX_WATCH_LEASE",
    "watch_refresh": "PROXBOX_WATCH_REFRESH",
    "proxmox_concurrency": "PROXBOX_PROXMOX_CONCURRENCY",
    "full_sync_interval": "PROXBOX_FULL_SYNC_INTERVAL",
    "timeout": "PROXBOX_HTTP_TIMEOUT",
    "webhook_secrets": "PROXBOX_WEBHOOK_SECRETS",
    "webhook_window": "PROXBOX_WEBHOOK_WINDOW",
}

# The bearer token callers of the HTTP service present (`proxbox-sync serve`).
API_TOKEN_ENV = "PROXBOX_BACKEND_API_TOKEN"


CHOICES = {ENV["disappeared"]: DISAPPEARED_POLICIES, ENV["templates"]: TEMPLATE_POLICIES}


class ConfigurationError(ValueError):
    pass


class EnvironmentSettings(BaseSettings):
    """The backend's environment variables (ENV), typed; unset or empty ones stay None so
    flags and the dataclass defaults apply. The policies are checked by `Settings`, whose
    messages name the flag as well as the variable."""

    model_config = SettingsConfigDict(case_sensitive=True, env_ignore_empty=True, extra="ignore")

    netbox_url: str | None = Field(None, validation_alias=ENV["netbox_url"])
    netbox_token: str | None = Field(None, validation_alias=ENV["netbox_token"])
    netbox_ca_bundle: str | None = Field(None, validation_alias=ENV["netbox_ca_bundle"])
    proxmox_url: str | None = Field(None, validation_alias=ENV["proxmox_url"])
    proxmox_token_id: str | None = Field(None, validation_alias=ENV["proxmox_token_id"])
    proxmox_token: str | None = Field(None, validation_alias=ENV["proxmox_token"])
    proxmox_user: str | None = Field(None, validation_alias=ENV["proxmox_user"])
    proxmox_password: str | None = Field(None, validation_alias=ENV["proxmox_password"])
    proxmox_ca_bundle: str | None = Field(None, validation_alias=ENV["proxmox_ca_bundle"])
    disappeared: Literal[DISAPPEARED_POLICIES] | None = Field(
        None, validation_alias=ENV["disappeared"]
    )
    templates: Literal[TEMPLATE_POLICIES] | None = Field(None, validation_alias=ENV["templates"])
    redis_url: str | None = Field(None, validation_alias=ENV["redis_url"])
    lease_ttl: float | None = Field(None, gt=0, validation_alias=ENV["lease_ttl"])
    watch: bool | None = Field(None, validation_alias=ENV["watch"])
    watch_lease: float | None = Field(None, gt=0, le=3600, validation_alias=ENV["watch_lease"])
    watch_refresh: float | None = Field(None, gt=0, le=3600, validation_alias=ENV["watch_refresh"])
    proxmox_concurrency: int | None = Field(
        None, gt=0, le=64, validation_alias=ENV["proxmox_concurrency"]
    )
    full_sync_interval: float | None = Field(None, ge=0, validation_alias=ENV["full_sync_interval"])
    timeout: float | None = Field(None, gt=0, le=3600, validation_alias=ENV["timeout"])
    webhook_secrets: str | None = Field(None, validation_alias=ENV["webhook_secrets"])
    webhook_window: float | None = Field(
        None, gt=0, le=3600, validation_alias=ENV["webhook_window"]
    )

    @classmethod
    def read(cls) -> dict[str, str]:
        """The variables that are set, by Settings field name."""
        try:
            return cls().model_dump(exclude_none=True)
        except ValidationError as exc:
            error = exc.errors()[0]
            name = ".".join(str(part) for part in error["loc"])
            choices = CHOICES.get(name)
            if choices:
                message = f"{name} must be one of {', '.join(choices)}, not {error['input']!r}"
            else:
                message = f"{name}={error['input']!r}: {error['msg'].lower()}"
            raise ConfigurationError(message) from None


@dataclass(frozen=True)
class Settings:
    netbox_url: str
    netbox_token: Secret = field(repr=False)
    netbox_verify_tls: bool = True
    netbox_ca_bundle: str | None = None
    # Fallbacks until the plugin's credentials API answers for this endpoint; the fallback
    # credentials are used only together with proxmox_url (see fallback_credentials).
    proxmox_url: str | None = None
    proxmox_token_id: str | None = None
    proxmox_token: Secret | None = field(default=None, repr=False)
    proxmox_user: str | None = None
    proxmox_password: Secret | None = field(default=None, repr=False)
    proxmox_ca_bundle: str | None = None
    proxmox_verify_tls: bool | None = None  # None: the endpoint's verify_tls decides
    disappeared: str = OFFLINE
    templates: str = SKIP_TEMPLATES
    # Proxmox reads in flight at once.  An incremental run is mostly its ~4 Proxmox reads
    # per guest, so they must hide a WAN round trip: 1,000 guests' 4,000 reads take at
    # least 1.25 s at 20 ms with 64 in flight (5 s with 16); pveproxy queues what its
    # workers cannot take at once.
    proxmox_concurrency: int = 64
    netbox_concurrency: int = 4
    timeout: float = 60.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    # Runs, their events and the per-endpoint lease; None: this process's memory only.
    redis_url: str | None = field(default=None, repr=False)
    # Seconds an endpoint's lease outlives a killed process (renewed every third of it).
    lease_ttl: float = 15.0
    # Live sync (`serve` only): watch the endpoints whose watch_interval is set.
    watch: bool = True
    # Seconds within which another replica takes over an endpoint's watch when the one
    # holding it dies.
    watch_lease: float = 15.0
    # Seconds between reads of which endpoints are watched, and how often.
    watch_refresh: float = 30.0
    # Seconds after a full run within which runs may be incremental (read NetBox's change
    # log and the guests that changed, not the whole cluster); 0: every run is full.
    full_sync_interval: float = 24 * 3600.0
    # PVE notification webhooks (`POST /webhooks/proxmox/{id}`): each endpoint's secret
    # (`*`: every endpoint without its own), from `<id>=<secret>,…`; none: refused.
    webhook_secrets: dict[str, Secret] = field(default_factory=dict, repr=False)
    # Seconds a notification's timestamp may be off the backend's clock, either way.
    webhook_window: float = 300.0

    def __post_init__(self):
        if not self.netbox_url:
            raise ConfigurationError("NetBox URL missing: --netbox-url or PROXBOX_NETBOX_URL")
        if not self.netbox_token:
            raise ConfigurationError("NetBox token missing: --netbox-token or PROXBOX_NETBOX_TOKEN")
        if self.disappeared not in DISAPPEARED_POLICIES:
            raise ConfigurationError(
                f"disappeared-guest policy must be one of {', '.join(DISAPPEARED_POLICIES)}"
            )
        if self.templates not in TEMPLATE_POLICIES:
            raise ConfigurationError(
                f"PROXBOX_TEMPLATES must be one of {', '.join(TEMPLATE_POLICIES)}, "
                f"not {self.templates!r}"
            )

    @classmethod
    def from_env(cls, **overrides) -> Settings:
        values = EnvironmentSettings.read()
        values.update({k: v for k, v in overrides.items() if v is not None})
        for name in ("netbox_token", "proxmox_token", "proxmox_password"):
            if isinstance(values.get(name), str):
                values[name] = Secret(values[name])
        if isinstance(values.get("webhook_secrets"), str):
            values["webhook_secrets"] = parse_webhook_secrets(values["webhook_secrets"])
        values.setdefault("netbox_url", "")
        values.setdefault("netbox_token", Secret(""))
        return cls(**values)

    def why_no_fallback(self) -> str:
        """Why `fallback_credentials` gave nothing, for the run's error."""
        configured = self.proxmox_token or (self.proxmox_user and self.proxmox_password)
        if configured and not self.proxmox_url:
            return (
                "the backend's own PROXBOX_PROXMOX_TOKEN (or user/password) is sent only to "
                "PROXBOX_PROXMOX_URL, which is unset (never to an endpoint's host, which "
                "whoever may add endpoints chooses)"
            )
        return "PROXBOX_PROXMOX_TOKEN (or user/password) is unset"

    def fallback_credentials(self, endpoint_token_id: str | None) -> ProxmoxCredentials | None:
        """The backend's own Proxmox credentials, for an endpoint the credentials API gives
        none; None unless the backend also fixes where they go (`proxmox_url`).

        An endpoint's host and port are set by whoever may add endpoints: sending the
        operator's token to them would hand it to any such user who points a secretless
        endpoint at a listener of their own (the plugin only binds a *stored* secret to its
        connection target).
        """
        if not self.proxmox_url:
            return None
        token_id = self.proxmox_token_id or endpoint_token_id
        if token_id and self.proxmox_token:
            return ProxmoxCredentials(token_id=token_id, token_secret=self.proxmox_token)
        if self.proxmox_user and self.proxmox_password:
            return ProxmoxCredentials(username=self.proxmox_user, password=self.proxmox_password)
        return None

    def netbox_client(self) -> NetBoxClient:
        return NetBoxClient(
            self.netbox_url,
            self.netbox_token,
            verify_tls=self.netbox_verify_tls,
            ca_bundle=self.netbox_ca_bundle,
            timeout=self.timeout,
            retry=self.retry,
            concurrency=self.netbox_concurrency,
        )

    def proxmox_client(self, endpoint: Endpoint, credentials: ProxmoxCredentials) -> ProxmoxClient:
        verify = endpoint.verify_tls if self.proxmox_verify_tls is None else self.proxmox_verify_tls
        return ProxmoxClient(
            self.proxmox_url or endpoint.url,
            credentials,
            verify_tls=verify,
            ca_bundle=self.proxmox_ca_bundle,
            timeout=self.timeout,
            retry=self.retry,
            concurrency=self.proxmox_concurrency,
        )

    def webhook_secret(self, endpoint_id: int) -> Secret | None:
        """The secret an endpoint's webhook presents: its own, else the shared `*` one."""
        return self.webhook_secrets.get(str(endpoint_id)) or self.webhook_secrets.get("*")

    def secrets(self) -> tuple[Secret, ...]:
        own = (self.netbox_token, self.proxmox_token, self.proxmox_password)
        return tuple(s for s in (*own, *self.webhook_secrets.values()) if s)


def parse_webhook_secrets(text: str) -> dict[str, Secret]:
    """`3=<secret>,7=<secret>,*=<secret>` → endpoint id (or `*`) → secret."""
    secrets: dict[str, Secret] = {}
    for entry in filter(None, (part.strip() for part in text.split(","))):
        key, eq, value = entry.partition("=")
        key = key.strip()
        if not eq or not (key == "*" or key.isdigit()) or not value:
            raise ConfigurationError(
                f"{ENV['webhook_secrets']}: each entry is <endpoint id>=<secret> or "
                f"*=<secret>, not {key + '=…' if eq else 'an entry without ='}"
            )
        if len(value) < 16:
            raise ConfigurationError(
                f"{ENV['webhook_secrets']}: the secret of {key} is shorter than 16 characters"
            )
        secrets[key] = Secret(value)
    return secrets
