"""Helpers shared by the simulator tests (plain functions, no fixtures).

Kept out of conftest.py because the workspace has its own root conftest and
``from conftest import ...`` would be ambiguous.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import asyncpg

from proxmox_simulator.config import Settings

REPO_ROOT = Path(__file__).resolve().parents[2]
BASE_URL = os.environ.get("PROXBOX_DATABASE_URL") or "postgresql://postgres@127.0.0.1:5432/postgres"
ROOT_PASSWORD = "test-root-password"


def apidoc_dir() -> Path:
    override = os.environ.get("PROXMOX_SIMULATOR_APIDOC_DIR")
    return Path(override) if override else (REPO_ROOT / ".." / "shared" / "pve-apidoc").resolve()


def official_apidoc(version: str) -> Path:
    """The official viewer schema of ``version``; in CI its absence is a failure, not a skip."""
    import pytest

    path = apidoc_dir() / f"pve-{version}-apidoc.js"
    if not path.exists():
        message = f"official viewer schema not available at {path}"
        if os.environ.get("CI"):
            pytest.fail(message + " (CI is set: the apidoc-dependent tests must run)")
        pytest.skip(message)
    return path


def run(coro):
    return asyncio.run(coro)


def _with_database(url: str, name: str) -> str:
    base, _, _old = url.rpartition("/")
    return f"{base}/{name}"


async def _admin(sql: str) -> None:
    conn = await asyncpg.connect(BASE_URL)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def create_database(suffix: str) -> str:
    """A ``pvesim_``-prefixed database, migrated and bootstrapped."""
    from proxmox_simulator.cli import _migrate

    name = f"pvesim_test_{os.getpid()}_{suffix}"
    run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    run(_admin(f'CREATE DATABASE "{name}"'))
    url = _with_database(BASE_URL, name)
    run(_migrate(Settings(database_url=url)))
    return url


def drop_database(url: str) -> None:
    name = url.rpartition("/")[2]
    assert name.startswith("pvesim_")
    run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
