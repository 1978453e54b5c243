"""Node administration through HTTP: APT repositories, logs, netstat, report, execute,
wake-on-LAN, vzdump defaults, QEMU capabilities and custom CPU models, firewall macros."""

from __future__ import annotations

from simtest_support import expect_data, expect_error

REPOS = "/nodes/{node}/apt/repositories"


def _repos(root, node):
    return expect_data(root.get(REPOS.format(node=node)), REPOS)


def test_apt_repositories_follow_enable_and_add(root):
    node = "pve2"
    view = _repos(root, node)
    paths = [f["path"] for f in view["files"]]
    # A 9.x node: deb822 files for Debian (trixie) and the enterprise repositories.
    assert paths == [
        "/etc/apt/sources.list.d/debian.sources",
        "/etc/apt/sources.list.d/pve-enterprise.sources",
        "/etc/apt/sources.list.d/ceph.sources",
    ]
    enterprise = view["files"][1]["repositories"][0]
    assert enterprise["Suites"] == ["trixie"] and enterprise["Components"] == ["pve-enterprise"]
    assert enterprise["Enabled"] is True and enterprise["FileType"] == "sources"
    assert all(len(f["digest"]) == 32 for f in view["files"])
    status = {r["handle"]: r.get("status") for r in view["standard-repos"]}
    assert status == {
        "enterprise": True,
        "no-subscription": None,
        "test": None,
        "ceph-squid-enterprise": True,
        "ceph-squid-no-subscription": None,
        "ceph-squid-test": None,
    }
    origins = {(i["path"], i["message"]) for i in view["infos"] if i["kind"] == "origin"}
    assert ("/etc/apt/sources.list.d/debian.sources", "Debian") in origins
    assert ("/etc/apt/sources.list.d/pve-enterprise.sources", "Proxmox") in origins

    # Disable the enterprise repository (path + index), guarded by the digest.
    enterprise_path = "/etc/apt/sources.list.d/pve-enterprise.sources"
    change = {"path": enterprise_path, "index": 0, "enabled": 0, "digest": view["digest"]}
    expect_data(root.post(REPOS.format(node=node), data=change))
    after = _repos(root, node)
    assert after["digest"] != view["digest"]
    assert after["files"][1]["repositories"][0]["Enabled"] is False
    assert {r["handle"]: r.get("status") for r in after["standard-repos"]}["enterprise"] is False
    # The old digest is stale now; a bad path or index is PVE's error.
    expect_error(root.post(REPOS.format(node=node), data=change), 500, "detected modified")
    expect_error(
        root.post(REPOS.format(node=node), data={"path": "/etc/apt/nope.list", "index": 0}),
        500,
        "invalid path - /etc/apt/nope.list",
    )
    expect_error(
        root.post(REPOS.format(node=node), data={"path": enterprise_path, "index": 3}),
        500,
        "invalid index - 3",
    )

    # Add the no-subscription repository by handle: a new proxmox.sources file.
    expect_data(
        root.put(
            REPOS.format(node=node), data={"handle": "no-subscription", "digest": after["digest"]}
        )
    )
    added = _repos(root, node)
    new = next(f for f in added["files"] if f["path"] == "/etc/apt/sources.list.d/proxmox.sources")
    assert new["repositories"][0]["Components"] == ["pve-no-subscription"]
    assert new["repositories"][0]["URIs"] == ["http://download.proxmox.com/debian/pve"]
    assert {r["handle"]: r.get("status") for r in added["standard-repos"]}["no-subscription"]
    # Adding a configured but disabled one switches it back on, in place.
    expect_data(root.put(REPOS.format(node=node), data={"handle": "enterprise"}))
    again = _repos(root, node)
    assert len(again["files"]) == 4 and again["files"][1]["repositories"][0]["Enabled"] is True
    expect_error(
        root.put(REPOS.format(node=node), data={"handle": "enterprise", "digest": added["digest"]}),
        500,
        "detected modified",
    )
    expect_error(
        root.put(REPOS.format(node=node), data={"handle": "bogus"}), 500, "unknown variant"
    )
    # State is per node: another node still has its installer's files.
    assert len(_repos(root, "pve1")["files"]) == 3
