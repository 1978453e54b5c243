"""Process configuration, read once from the environment.

Every knob lives here so the CLI, the app factory and the tests agree on names.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import AliasChoices, Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/pvesim"


def database_url_from_env() -> str:
    """The simulator's own variable wins; the workspace-wide one is the fallback."""
    return (
        os.environ.get("PROXMOX_SIMULATOR_DATABASE_URL")
        or os.environ.get("PROXBOX_DATABASE_URL")
        or DEFAULT_DATABASE_URL
    )


def default_data_dir() -> Path:
    xdg = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(xdg) / "proxmox-simulator"


class ConfigurationError(ValueError):
    """A bad setting: the message names the variable and what it must be."""


class EnvironmentSettings(BaseSettings):
    """The simulator's environment variables, typed: a bad value is refused with the
    variable's name instead of failing somewhere later."""

    model_config = SettingsConfigDict(case_sensitive=True, env_ignore_empty=True, extra="ignore")

    database_url: str = Field(
        DEFAULT_DATABASE_URL,
        validation_alias=AliasChoices("PROXMOX_SIMULATOR_DATABASE_URL", "PROXBOX_DATABASE_URL"),
    )
    data_dir: Path | None = Field(None, validation_alias="PROXMOX_SIMULATOR_DATA_DIR")
    contract: str = Field("fakepve", validation_alias="PROXMOX_SIMULATOR_CONTRACT")
    contract_fallback: str = Field("error", validation_alias="CONTRACT_FALLBACK")
    clock: str = Field("real", validation_alias="PROXMOX_SIMULATOR_CLOCK")
    task_workers: int = Field(4, ge=0, validation_alias="PROXMOX_SIMULATOR_TASK_WORKERS")
    lease_seconds: float = Field(30.0, gt=0, validation_alias="PROXMOX_SIMULATOR_LEASE_SECONDS")
    shutdown_grace: float = Field(5.0, ge=0, validation_alias="PROXMOX_SIMULATOR_SHUTDOWN_GRACE")
    pool_max_size: int = Field(10, ge=1, validation_alias="PROXMOX_SIMULATOR_POOL_SIZE")
    list_cache: bool = Field(True, validation_alias="PROXMOX_SIMULATOR_LIST_CACHE")
    status_interval: float = Field(0.0, ge=0, validation_alias="PROXMOX_SIMULATOR_STATUS_INTERVAL")
    lab_enabled: bool = Field(False, validation_alias="PROXMOX_SIMULATOR_LAB")
    profile: str = Field("strict-docs", validation_alias="PROXMOX_SIMULATOR_PROFILE")
    apidoc_dir: Path | None = Field(None, validation_alias="PROXMOX_SIMULATOR_APIDOC_DIR")

    @classmethod
    def read(cls) -> EnvironmentSettings:
        try:
            return cls()
        except ValidationError as exc:
            raise ConfigurationError(describe_error(exc)) from None


def describe_error(exc: ValidationError) -> str:
    """The first bad variable, its value and what it must be, as one line."""
    error = exc.errors()[0]
    name = ".".join(str(part) for part in error["loc"])
    return f"{name}={error.get('input')!r}: {error['msg'].lower()}"


@dataclass(frozen=True)
class Settings:
    database_url: str = field(default_factory=database_url_from_env)
    data_dir: Path = field(default_factory=default_data_dir)
    # A registry version ("8.4.5"), a path to an apidoc.js / json(.gz) file, or
    # "fakepve" for the major-9 schema shipped by the fakepve dependency.
    contract: str = "fakepve"
    # "error" is the only honest answer for a declared method nobody implemented.
    contract_fallback: str = "error"
    # real | instant | manual | accelerated:<factor>
    clock: str = "real"
    task_workers: int = 4
    lease_seconds: float = 30.0
    # On shutdown in-flight tasks get this long to commit before being cancelled
    # (a cancelled task is reclaimed by another worker after its lease expires).
    shutdown_grace: float = 5.0
    ticket_lifetime: int = 7200
    # Reuse rendered guest lists within one guest generation and clock second.
    list_cache: bool = True
    # Seconds between the guests' status broadcasts `/cluster/resources` shows (PVE's
    # pvestatd: 10); 0: the list is always current (domain/status_broadcast.py).
    status_interval: float = 0.0
    pool_min_size: int = 2
    pool_max_size: int = 10
    # Laboratory surfaces (/ui/*, /admin/*): no admin token of their own, so
    # they exist only when an operator turns them on (network exposure is
    # their trust boundary).
    lab_enabled: bool = False
    # strict-docs | observed | hybrid (contracts/selection.py)
    profile: str = "strict-docs"
    # A directory of official viewer schemas (pve-<version>-apidoc.js): a hot-swap to a
    # major not yet in the registry imports its newest file from here first.
    apidoc_dir: Path | None = None

    @classmethod
    def from_env(cls, **overrides) -> Settings:
        environment = EnvironmentSettings.read()
        values: dict = {
            "database_url": environment.database_url,
            "data_dir": environment.data_dir or default_data_dir(),
            "contract": environment.contract,
            "contract_fallback": environment.contract_fallback,
            "clock": environment.clock,
            "task_workers": environment.task_workers,
            "lease_seconds": environment.lease_seconds,
            "shutdown_grace": environment.shutdown_grace,
            "pool_max_size": environment.pool_max_size,
            "list_cache": environment.list_cache,
            "status_interval": environment.status_interval,
            "lab_enabled": environment.lab_enabled,
            "profile": environment.profile,
            "apidoc_dir": environment.apidoc_dir,
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        if values["contract_fallback"] != "error":
            raise ConfigurationError(
                f"CONTRACT_FALLBACK={values['contract_fallback']!r} is not supported; "
                "only 'error' (HTTP 501) is implemented"
            )
        from proxmox_simulator.contracts.selection import PROFILES

        if values["profile"] not in PROFILES:
            raise ValueError(
                f"PROXMOX_SIMULATOR_PROFILE={values['profile']!r} is not one of {', '.join(PROFILES)}"
            )
        return cls(**values)


def settings_env(settings: Settings) -> dict[str, str]:
    """The environment that makes ``Settings.from_env()`` reproduce ``settings``
    in another process (used to start the simulator as a subprocess)."""
    return {
        "PROXMOX_SIMULATOR_DATABASE_URL": settings.database_url,
        "PROXMOX_SIMULATOR_DATA_DIR": str(settings.data_dir),
        "PROXMOX_SIMULATOR_CONTRACT": settings.contract,
        "CONTRACT_FALLBACK": settings.contract_fallback,
        "PROXMOX_SIMULATOR_CLOCK": settings.clock,
        "PROXMOX_SIMULATOR_TASK_WORKERS": str(settings.task_workers),
        "PROXMOX_SIMULATOR_LEASE_SECONDS": str(settings.lease_seconds),
        "PROXMOX_SIMULATOR_SHUTDOWN_GRACE": str(settings.shutdown_grace),
        "PROXMOX_SIMULATOR_POOL_SIZE": str(settings.pool_max_size),
        "PROXMOX_SIMULATOR_LIST_CACHE": "1" if settings.list_cache else "0",
        "PROXMOX_SIMULATOR_STATUS_INTERVAL": str(settings.status_interval),
        "PROXMOX_SIMULATOR_LAB": "1" if settings.lab_enabled else "0",
        "PROXMOX_SIMULATOR_PROFILE": settings.profile,
        **(
            {"PROXMOX_SIMULATOR_APIDOC_DIR": str(settings.apidoc_dir)}
            if settings.apidoc_dir
            else {}
        ),
    }
