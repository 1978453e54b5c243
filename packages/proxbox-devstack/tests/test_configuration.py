"""The generated NetBox configuration, its secrets and the private-file modes."""

from __future__ import annotations

import json
import stat

import pytest

from proxbox_devstack.migrate_without_icu import fallback_collation_sql
from proxbox_devstack.netbox_settings import build_configuration
from proxbox_devstack.secrets import SECRETS_FILE, write_private_file
from proxbox_devstack.state import StackState, service_urls

DB = "postgresql://netbox:pw@db.example:6543/postgres"
REDIS = "redis://cache.example:6380"


@pytest.fixture
def urls(monkeypatch):
    monkeypatch.setenv("PROXBOX_DATABASE_URL", DB)
    monkeypatch.setenv("PROXBOX_REDIS_URL", REDIS)
    monkeypatch.delenv("PROXBOX_REDIS_DATABASES", raising=False)


def test_configuration_from_environment_and_data_dir(tmp_path, urls, monkeypatch):
    monkeypatch.setenv("PROXBOX_NETBOX_DATABASE", "devstack_cfg")
    config = build_configuration(tmp_path)
    database = config["DATABASES"]["default"]
    assert (database["NAME"], database["HOST"], database["PORT"]) == (
        "devstack_cfg",
        "db.example",
        "6543",
    )
    assert (database["USER"], database["PASSWORD"]) == ("netbox", "pw")
    assert config["REDIS"]["tasks"]["URL"] == f"{REDIS}/0"
    assert config["REDIS"]["caching"]["URL"] == f"{REDIS}/1"
    assert config["PLUGINS"] == ["netbox_proxbox", "netbox_script_projects"]
    assert len(config["API_TOKEN_PEPPERS"][1]) >= 50
    assert config["MEDIA_ROOT"].startswith(str(tmp_path))
    location = config["STORAGES"]["script_projects"]["OPTIONS"]["location"]
    assert (tmp_path / "netbox" / "script-projects").samefile(location)


def test_secrets_are_generated_once_with_mode_0600(tmp_path, urls):
    first = build_configuration(tmp_path)
    path = tmp_path / SECRETS_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    second = build_configuration(tmp_path)
    assert first["SECRET_KEY"] == second["SECRET_KEY"]
    assert first["API_TOKEN_PEPPERS"] == second["API_TOKEN_PEPPERS"]
    key = first["PLUGINS_CONFIG"]["netbox_proxbox"]["encryption_key"]
    assert key == json.loads(path.read_text())["proxbox_encryption_key"]


def test_secrets_of_an_older_data_dir_are_completed_not_replaced(tmp_path, urls):
    (tmp_path / SECRETS_FILE).write_text(json.dumps({"netbox_secret_key": "kept"}))
    config = build_configuration(tmp_path)
    assert config["SECRET_KEY"] == "kept"
    assert config["PLUGINS_CONFIG"]["netbox_proxbox"]["encryption_key"]
    assert stat.S_IMODE((tmp_path / SECRETS_FILE).stat().st_mode) == 0o600


def test_the_stacks_leased_redis_databases_are_used(tmp_path, urls, monkeypatch):
    monkeypatch.setenv("PROXBOX_REDIS_DATABASES", "6,7")
    config = build_configuration(tmp_path)
    assert config["REDIS"]["tasks"]["URL"] == f"{REDIS}/6"
    assert config["REDIS"]["caching"]["URL"] == f"{REDIS}/7"


@pytest.mark.parametrize("value", ["6", "6,x", "6,6", "1,2,3", "-1,2"])
def test_a_malformed_redis_databases_variable_is_refused_by_name(
    tmp_path, urls, monkeypatch, value
):
    monkeypatch.setenv("PROXBOX_REDIS_DATABASES", value)
    with pytest.raises(ValueError, match="PROXBOX_REDIS_DATABASES"):
        build_configuration(tmp_path)


def test_redis_url_that_names_a_database_keeps_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PROXBOX_DATABASE_URL", DB)
    monkeypatch.setenv("PROXBOX_REDIS_URL", "redis://cache.example:6380/5")
    config = build_configuration(tmp_path)
    assert config["REDIS"]["tasks"]["URL"] == "redis://cache.example:6380/5"


def test_urls_come_from_the_recorded_stack_when_unset(tmp_path, monkeypatch):
    monkeypatch.delenv("PROXBOX_DATABASE_URL", raising=False)
    monkeypatch.delenv("PROXBOX_REDIS_URL", raising=False)
    with pytest.raises(RuntimeError, match="proxbox up -d"):
        service_urls(tmp_path)
    StackState(database_url=DB, redis_url=REDIS).save(tmp_path)
    assert service_urls(tmp_path) == (DB, REDIS)
    assert stat.S_IMODE((tmp_path / "stack.json").stat().st_mode) == 0o600


def test_state_file_from_a_newer_version_still_loads(tmp_path):
    (tmp_path / "stack.json").write_text(
        json.dumps({"database_url": DB, "redis_url": REDIS, "added_later": 1})
    )
    assert StackState.load(tmp_path).database_url == DB


def test_private_files_are_0600_and_never_overwritten(tmp_path):
    target = tmp_path / "sub" / "credentials.json"
    assert write_private_file(target, "first") is True
    assert write_private_file(target, "second") is False
    assert target.read_text() == "first"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


@pytest.mark.parametrize(
    ("version", "provider"),
    [
        (180006, "builtin, locale = 'PG_UNICODE_FAST'"),
        (170002, "builtin, locale = 'C.UTF-8'"),
        (150010, "libc, locale = 'C'"),
    ],
)
def test_natural_sort_stand_in_per_server_version(version, provider):
    assert fallback_collation_sql("natural_sort", version) == (
        f'CREATE COLLATION "natural_sort" (provider = {provider})'
    )


# How the stack's processes begin: NetBox imports its NETBOX_CONFIGURATION module first
# (gunicorn's master before forking, RQ workers, manage.py); the simulator and the backend
# start through their console scripts' `main`.
PROCESS_STARTS = {
    "netbox": "import proxbox_devstack.netbox_configuration",
    "simulator": "from proxmox_simulator.cli import main\ntry:\n    main(['--help'])\n"
    "except SystemExit:\n    pass",
    "backend": "from proxbox_backend.cli import main\ntry:\n    main(['--help'])\n"
    "except SystemExit:\n    pass",
}


@pytest.mark.parametrize("start", PROCESS_STARTS.values(), ids=PROCESS_STARTS.keys())
def test_every_stack_process_collects_garbage_at_the_shared_thresholds(tmp_path, urls, start):
    import os
    import subprocess
    import sys

    from proxbox_processes import GARBAGE_COLLECTION_THRESHOLDS

    # A fresh interpreter: this test process already runs at these thresholds.
    program = f"{start}\nimport gc\nprint('thresholds', gc.get_threshold())"
    env = dict(os.environ, PROXBOX_HOME=str(tmp_path))
    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert f"thresholds {GARBAGE_COLLECTION_THRESHOLDS}" in result.stdout.splitlines()
