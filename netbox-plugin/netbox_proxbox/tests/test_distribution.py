"""The plugin's distribution is `netbox-proxbox-platform` (PyPI's `netbox-proxbox` is
upstream Proxbox); released code that asks for the old name still learns our version."""

from __future__ import annotations

import sys
from importlib import metadata

import pytest

import netbox_proxbox
from netbox_proxbox.distribution import DISTRIBUTION, LEGACY_DISTRIBUTION, LegacyNameFinder


def test_the_installed_distribution_has_our_own_name():
    assert metadata.metadata(DISTRIBUTION)["Name"] == "netbox-proxbox-platform"
    assert netbox_proxbox.__version__ == metadata.version(DISTRIBUTION)
    names = [dist.metadata["Name"] for dist in metadata.distributions()]
    assert names.count(DISTRIBUTION) == 1
    assert LEGACY_DISTRIBUTION not in names  # the alias never shows in a listing


def test_the_old_name_answers_with_our_distribution():
    assert metadata.version("netbox-proxbox") == netbox_proxbox.__version__
    assert metadata.version("netbox_proxbox") == netbox_proxbox.__version__
    assert metadata.metadata("netbox-proxbox")["Name"] == DISTRIBUTION


def test_without_the_alias_the_old_name_is_not_installed(monkeypatch):
    kept = [f for f in sys.meta_path if not isinstance(f, LegacyNameFinder)]
    monkeypatch.setattr(sys, "meta_path", kept)
    with pytest.raises(metadata.PackageNotFoundError):
        metadata.version(LEGACY_DISTRIBUTION)


def test_a_distribution_really_named_netbox_proxbox_is_found_first(tmp_path, monkeypatch):
    info = tmp_path / "netbox_proxbox-0.0.29.post6.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: netbox-proxbox\nVersion: 0.0.29.post6\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert metadata.version(LEGACY_DISTRIBUTION) == "0.0.29.post6"
    assert metadata.version(DISTRIBUTION) == netbox_proxbox.__version__
