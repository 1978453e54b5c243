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


def test_syslog_pages_the_nodes_task_and_service_lines(root):
    node = "pve3"
    upid = expect_data(root.post(f"/nodes/{node}/services/cron/restart"))
    assert root.wait(upid)["exitstatus"] == "OK"
    response = root.get(f"/nodes/{node}/syslog", params={"limit": 500})
    lines = expect_data(response, "/nodes/{node}/syslog")
    total = response.json()["total"]
    assert [line["n"] for line in lines] == list(range(1, min(total, 500) + 1))
    assert "kernel: Linux version" in lines[0]["t"]
    text = [line["t"] for line in lines]
    assert any(f"<root@pam> starting task {upid}" in t for t in text)
    assert any(t.endswith(f"<root@pam> end task {upid} OK") for t in text)
    # Paging: start skips lines, numbering continues from start + 1.
    page = expect_data(root.get(f"/nodes/{node}/syslog", params={"start": 1, "limit": 2}))
    assert [line["n"] for line in page] == [2, 3] and page[0]["t"] == lines[1]["t"]
    # A unit's own lines (journalctl --unit), with systemd's start/stop messages.
    cron = expect_data(root.get(f"/nodes/{node}/syslog", params={"service": "cron"}))
    assert [line["t"].split(": ", 1)[1] for line in cron][-2:] == [
        "Stopping cron.service - Regular background program processing daemon...",
        "Started cron.service - Regular background program processing daemon.",
    ]
    # Nothing in range: PVE's single "no content" line, total 1.
    empty = root.get(f"/nodes/{node}/syslog", params={"since": "2999-01-01"})
    assert expect_data(empty) == [{"n": 1, "t": "no content"}] and empty.json()["total"] == 1
    before = expect_data(root.get(f"/nodes/{node}/syslog", params={"until": "2000-01-01 00:00"}))
    assert before == [{"n": 1, "t": "no content"}]
    expect_error(root.get(f"/nodes/{node}/syslog", params={"since": "yesterday"}), 400, "since")


def test_journal_cursors_follow_new_entries(root):
    node = "pve3"
    root.wait(expect_data(root.post(f"/nodes/{node}/services/chrony/restart")))
    last = expect_data(root.get(f"/nodes/{node}/journal", params={"lastentries": 3}))
    assert len(last) == 5 and last[0].startswith("s=") and last[-1].startswith("s=")
    upid = expect_data(root.post(f"/nodes/{node}/services/chrony/reload"))
    root.wait(upid)
    # From the previous end cursor: only what was logged since.
    new = expect_data(root.get(f"/nodes/{node}/journal", params={"startcursor": last[-1]}))
    body = new[1:-1]
    assert any(f"starting task {upid}" in line for line in body)
    assert body[-1].endswith(f"end task {upid} OK") and last[-2] not in body
    # Up to a cursor (exclusive) and by epoch range.
    upto = expect_data(root.get(f"/nodes/{node}/journal", params={"endcursor": new[-1]}))
    assert upto[-2] == new[-3]
    assert expect_data(root.get(f"/nodes/{node}/journal", params={"until": 1})) == []
    expect_error(
        root.get(f"/nodes/{node}/journal", params={"startcursor": "s=nonsense"}), 500, "failed"
    )
    expect_error(
        root.get(f"/nodes/{node}/journal", params={"since": 1, "startcursor": last[-1]}),
        400,
        "startcursor",
    )
