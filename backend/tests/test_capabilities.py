"""Per-release capabilities: the one place the sync tells Proxmox VE majors apart."""

import pytest

from proxbox_backend.domain.capabilities import Capabilities, major_of
from proxbox_backend.domain.models import ClusterIdentity


@pytest.mark.parametrize(
    ("release", "major", "ha_rules", "lxc_interfaces"),
    [
        ("6.4-15", 6, False, False),
        ("7.4-16", 7, False, False),
        ("8.4.5", 8, False, True),
        ("9.2.12", 9, True, True),
        ("10.0.1", 10, True, True),  # newer than known: like the newest
        ("", 9, True, True),  # unreadable: the newest known
        ("pve-manager", 9, True, True),
    ],
)
def test_capabilities_of_each_release(release, major, ha_rules, lxc_interfaces):
    capabilities = ClusterIdentity("pvesim", "cluster", (), True, version=release).capabilities
    assert capabilities == Capabilities(release)
    assert (capabilities.major, capabilities.ha_rules, capabilities.lxc_interfaces) == (
        major,
        ha_rules,
        lxc_interfaces,
    )


def test_major_of_reads_the_leading_number_only():
    assert [major_of(v) for v in ("8.4.5", " 7.4-16", "x9", "")] == [8, 7, None, None]
