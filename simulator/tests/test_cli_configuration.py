"""`proxmox-simulator` as a user runs it: --version, exit codes in --help, and a bad
environment value refused with one line naming the variable (no traceback)."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata

import pytest

from proxmox_simulator import __version__
from proxmox_simulator.config import ConfigurationError, Settings


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "proxmox_simulator", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=60,
    )


def test_version_comes_from_the_package_metadata():
    result = _cli("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"proxmox-simulator {__version__}"
    assert __version__ == metadata.version("proxmox-simulator")


def test_help_documents_the_exit_codes():
    text = _cli("--help").stdout
    assert "exit codes:" in text
    assert "  2  usage or configuration error" in text


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("PROXMOX_SIMULATOR_TASK_WORKERS", "abc", "input should be a valid integer"),
        ("PROXMOX_SIMULATOR_LEASE_SECONDS", "soon", "input should be a valid number"),
        ("PROXMOX_SIMULATOR_POOL_SIZE", "0", "input should be greater than or equal to 1"),
        ("PROXMOX_SIMULATOR_LIST_CACHE", "maybe", "input should be a valid boolean"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_variable(variable, value, expected):
    result = _cli("serve", "--port", "0", **{variable: value})
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"proxmox-simulator: {variable}={value!r}: {expected}")
    assert "Traceback" not in result.stderr


def test_typed_values_keep_the_variables_and_their_meaning(monkeypatch, tmp_path):
    monkeypatch.setenv("PROXMOX_SIMULATOR_TASK_WORKERS", "3")
    monkeypatch.setenv("PROXMOX_SIMULATOR_LEASE_SECONDS", "2.5")
    monkeypatch.setenv("PROXMOX_SIMULATOR_LIST_CACHE", "no")
    monkeypatch.setenv("PROXMOX_SIMULATOR_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("PROXMOX_SIMULATOR_CLOCK", "instant")
    settings = Settings.from_env(task_workers=5)
    assert (settings.task_workers, settings.lease_seconds) == (5, 2.5)
    assert (settings.list_cache, settings.data_dir, settings.clock) == (False, tmp_path, "instant")


def test_the_unsupported_fallback_is_still_refused(monkeypatch):
    monkeypatch.setenv("CONTRACT_FALLBACK", "empty-200")
    with pytest.raises(ConfigurationError, match="CONTRACT_FALLBACK='empty-200' is not supported"):
        Settings.from_env()
