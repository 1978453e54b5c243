"""Process configuration, read once from the environment.

Every knob lives here so the CLI, the app factory and the tests agree on names.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

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


def _flag(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on")


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
    pool_min_size: int = 2
    pool_max_size: int = 10
    # Laboratory surfaces (/ui/*, /admin/*): no admin token of their own, so
    # they exist only when an operator turns them on (network exposure is
    # their trust boundary).
    lab_enabled: bool = False
    # strict-docs | observed | hybrid (contracts/selection.py)
    profile: str = "strict-docs"

    @classmethod
    def from_env(cls, **overrides) -> Settings:
        env = os.environ
        values: dict = {
            "database_url": database_url_from_env(),
            "data_dir": Path(env["PROXMOX_SIMULATOR_DATA_DIR"])
            if env.get("PROXMOX_SIMULATOR_DATA_DIR")
            else default_data_dir(),
            "contract": env.get("PROXMOX_SIMULATOR_CONTRACT", "fakepve"),
            "contract_fallback": env.get("CONTRACT_FALLBACK", "error"),
            "clock": env.get("PROXMOX_SIMULATOR_CLOCK", "real"),
            "task_workers": int(env.get("PROXMOX_SIMULATOR_TASK_WORKERS", "4")),
            "lease_seconds": float(env.get("PROXMOX_SIMULATOR_LEASE_SECONDS", "30")),
            "shutdown_grace": float(env.get("PROXMOX_SIMULATOR_SHUTDOWN_GRACE", "5")),
            "pool_max_size": int(env.get("PROXMOX_SIMULATOR_POOL_SIZE", "10")),
            "list_cache": env.get("PROXMOX_SIMULATOR_LIST_CACHE", "1") not in ("0", "false", "no"),
            "lab_enabled": _flag(env.get("PROXMOX_SIMULATOR_LAB", "0")),
            "profile": env.get("PROXMOX_SIMULATOR_PROFILE", "strict-docs"),
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        if values["contract_fallback"] != "error":
            raise ValueError(
                f"CONTRACT_FALLBACK={values['contract_fallback']!r} is not supported; "
                "only 'error' (HTTP 501) is implemented"
            )
        from proxmox_simulator.contracts.selection import PROFILES

        if values["profile"] not in PROFILES:
            raise ValueError(
                f"PROXMOX_SIMULATOR_PROFILE={values['profile']!r} is not one of {', '.join(PROFILES)}"
            )
        return cls(**values)


def _flag(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on")


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
        "PROXMOX_SIMULATOR_LAB": "1" if settings.lab_enabled else "0",
        "PROXMOX_SIMULATOR_PROFILE": settings.profile,
    }
