"""Released migrations and release schema modules are immutable (content and file mode)."""

from __future__ import annotations

import hashlib
import importlib
import stat
from pathlib import Path

import pytest
from django.db import migrations

PLUGIN_ROOT = Path(__file__).resolve().parents[2]
RECORD = PLUGIN_ROOT / "released-migrations.sha256"


def recorded() -> list[tuple[str, str, str]]:
    rows = []
    for line in RECORD.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            digest, mode, path = line.split()
            rows.append((digest, mode, path))
    return rows


def git_mode(path: Path) -> str:
    # Git records only the executable bit of regular files.
    return (
        "100755" if path.stat().st_mode & (stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH) else "100644"
    )


@pytest.mark.parametrize(("digest", "mode", "path"), recorded(), ids=[r[2] for r in recorded()])
def test_released_file_is_byte_and_mode_identical(digest, mode, path):
    file = PLUGIN_ROOT / path
    assert file.is_file(), f"released file {path} is missing"
    actual = hashlib.sha256(file.read_bytes()).hexdigest()
    assert actual == digest, f"{path} changed after release: add a new migration instead"
    assert git_mode(file) == mode, f"{path} changed its file mode"


def test_the_record_covers_every_numbered_migration_through_the_validator_and_its_module():
    paths = {path for _digest, _mode, path in recorded()}
    assert "netbox_proxbox/migrations/_release_0_1_0_schema.py" in paths
    for number in ("0001", "0002", "0003", "0004", "0005"):
        assert any(Path(p).name.startswith(number + "_") for p in paths), number


def test_validation_is_the_last_operation_of_the_validator_migration():
    from netbox_proxbox.migrations._release_0_1_0_schema import validate

    module = importlib.import_module("netbox_proxbox.migrations.0005_ownership_schema_validation")
    last = module.Migration.operations[-1]
    assert isinstance(last, migrations.RunPython)
    assert last.code is validate
    assert module.Migration.atomic
