"""Node administration through HTTP: APT repositories, logs, netstat, report, execute,
wake-on-LAN, vzdump defaults, QEMU capabilities and custom CPU models, firewall macros."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from simtest_support import (
    Session,
    assert_conforms,
    expect_data,
    expect_error,
    lab_simulator,
    make_vm,
)

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


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    """A server of its own: these tests power nodes and hot-swap majors."""
    with lab_simulator(tmp_path_factory.mktemp("nodeadmin"), "nodeadmin", "pair", 5) as server:
        yield server


@pytest.fixture
def api(sim):
    with httpx.Client(base_url=sim.base_url + "/api2/json", timeout=30) as client:
        yield Session(client)


def _swap(sim, major: int) -> None:
    with httpx.Client(base_url=sim.base_url, timeout=30) as admin:
        response = admin.post("/ui/api/contract/apply", data={"major": major})
        assert response.status_code == 200, response.text


def _sum(entries, vmid, key):
    return sum(int(e[key]) for e in entries if e["vmid"] == str(vmid))


def test_netstat_counts_running_guests_nics_like_their_status(root, unique_vmid):
    node = "pve2"
    vmid = make_vm(root, node, unique_vmid, net0="virtio,bridge=vmbr0", net1="e1000,bridge=vmbr0")
    assert [
        e for e in expect_data(root.get(f"/nodes/{node}/netstat")) if e["vmid"] == str(vmid)
    ] == []
    root.wait(expect_data(root.post(f"/nodes/{node}/qemu/{vmid}/status/start")))
    time.sleep(1.2)
    first = expect_data(root.get(f"/nodes/{node}/netstat"), "/nodes/{node}/netstat")
    mine = [e for e in first if e["vmid"] == str(vmid)]
    assert [e["dev"] for e in mine] == ["net0", "net1"]
    assert all(e["in"].isdigit() and e["out"].isdigit() for e in mine)
    status = expect_data(root.get(f"/nodes/{node}/qemu/{vmid}/status/current"))
    time.sleep(1.1)
    later = expect_data(root.get(f"/nodes/{node}/netstat"))
    # status/current sums the same tap counters, which only grow while it runs.
    assert _sum(first, vmid, "in") <= status["netin"] <= _sum(later, vmid, "in")
    assert _sum(first, vmid, "out") <= status["netout"] <= _sum(later, vmid, "out")
    assert _sum(later, vmid, "in") > _sum(first, vmid, "in") > 0
    root.wait(expect_data(root.post(f"/nodes/{node}/qemu/{vmid}/status/stop")))
    assert _sum(expect_data(root.get(f"/nodes/{node}/netstat")), vmid, "in") == 0
    assert expect_data(root.get(f"/nodes/{node}/qemu/{vmid}/status/current"))["netin"] == 0


def test_report_shows_the_nodes_state(root, unique_vmid):
    node = "pve2"
    make_vm(root, node, unique_vmid)
    text = expect_data(root.get(f"/nodes/{node}/report"), "/nodes/{node}/report")
    assert text.startswith("==== general system info ====\n\n# hostname\npve2\n")
    assert "# pveversion --verbose\nproxmox-ve: 9.2" in text
    assert "# cat /etc/apt/sources.list.d/pve-enterprise.sources\nTypes: deb" in text
    assert f"vm{unique_vmid}" in text.split("# qm list", 1)[1]
    assert "# cat /etc/pve/storage.cfg\ndir: local" in text


def test_execute_runs_each_command_as_an_api_call(root):
    node = "pve2"
    commands = [
        {"method": "PUT", "path": "config", "args": {"description": "set by execute"}},
        {"method": "GET", "path": "config"},
        {"method": "GET", "path": "nowhere"},
        {"path": "config"},
        {"method": "PUT", "path": "dns", "args": {"search": "lab", "dns1": "not-an-ip"}},
        {"method": "GET", "path": "config", "args": {"node": "pve1"}},
    ]
    results = expect_data(
        root.post(f"/nodes/{node}/execute", data={"commands": json.dumps(commands)}),
        "/nodes/{node}/execute",
        "POST",
    )
    assert [r["status"] for r in results] == [200, 200, 500, 500, 400, 400]
    assert results[1]["data"]["description"] == "set by execute"
    assert results[2]["message"] == "no handler for 'nodes/pve2/nowhere'"
    assert "is not a valid command" in results[3]["message"]
    assert set(results[4]["errors"]) == {"dns1"}
    assert results[5]["errors"] == {"node": "duplicate parameter"}
    expect_error(root.post(f"/nodes/{node}/execute", data={"commands": "[{"}), 500, "valid JSON")
    expect_error(root.post(f"/nodes/{node}/execute", data={"commands": "{}"}), 500, "not an array")


def test_vzdump_defaults_merge_schema_and_storage(root):
    node = "pve2"
    defaults = expect_data(root.get(f"/nodes/{node}/vzdump/defaults"))
    # The 9.x answer (notification-mode and all) fits 9.x's closed object.
    assert_conforms("/nodes/{node}/vzdump/defaults", "GET", defaults, majors=(9,))
    assert defaults["storage"] == "local" and defaults["dumpdir"] == "/var/lib/vz/dump"
    assert (defaults["mode"], defaults["compress"], defaults["lockwait"]) == ("snapshot", "0", 180)
    name = f"bk{time.time_ns() % 10**8}"
    expect_data(
        root.post(
            "/storage",
            data={
                "storage": name,
                "type": "dir",
                "path": f"/mnt/{name}",
                "content": "backup",
                "prune-backups": "keep-last=3,keep-weekly=2",
            },
        )
    )
    try:
        mine = expect_data(root.get(f"/nodes/{node}/vzdump/defaults", params={"storage": name}))
        assert mine["storage"] == name and mine["dumpdir"] == f"/mnt/{name}/dump"
        assert mine["prune-backups"] == "keep-last=3,keep-weekly=2"
    finally:
        expect_data(root.delete(f"/storage/{name}"))
    expect_error(
        root.get(f"/nodes/{node}/vzdump/defaults", params={"storage": "local-lvm"}),
        500,
        "can't use storage 'local-lvm' for backups - wrong content type",
    )
    expect_error(
        root.get(f"/nodes/{node}/vzdump/defaults", params={"storage": "nostore"}),
        500,
        "storage 'nostore' does not exist",
    )


def test_wakeonlan_needs_a_mac_and_powers_the_node_on(sim, api):
    _swap(sim, 9)
    expect_error(
        api.post("/nodes/pve1/wakeonlan"), 500, "'pve1' is local node, cannot wake my self!"
    )
    expect_error(
        api.post("/nodes/pve2/wakeonlan"), 500, "No wake on LAN MAC address defined for 'pve2'!"
    )
    expect_data(api.put("/nodes/pve2/config", data={"wakeonlan": "mac=AA:BB:CC:00:11:22"}))
    # Shut the node down; the magic packet brings it back with a new boot.
    expect_data(api.post("/nodes/pve2/status", data={"command": "shutdown"}))
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        nodes = {n["node"]: n for n in expect_data(api.get("/nodes"))}
        if nodes["pve2"]["status"] == "offline":
            break
        time.sleep(0.05)
    assert nodes["pve2"]["status"] == "offline"
    mac = expect_data(api.post("/nodes/pve2/wakeonlan"), "/nodes/{node}/wakeonlan", "POST")
    assert mac == "AA:BB:CC:00:11:22"
    assert {n["node"]: n for n in expect_data(api.get("/nodes"))}["pve2"]["status"] == "online"
    tasks = expect_data(
        api.get("/nodes/pve2/tasks", params={"typefilter": "startall", "source": "all"})
    )
    assert tasks and tasks[0]["user"] == "root@pam"


MODELS = "/cluster/qemu/custom-cpu-models"


def test_custom_cpu_models_are_stored_listed_and_used_by_vms(root, unique_vmid):
    name = f"epyc{unique_vmid}"
    expect_data(
        root.post(
            MODELS,
            data={"cputype": f"custom-{name}", "reported-model": "EPYC-Rome", "flags": "+svm;-aes"},
        )
    )
    listing = expect_data(root.get(MODELS), MODELS)
    mine = next(m for m in listing if m["cputype"] == f"custom-{name}")
    assert (mine["reported-model"], mine["flags"]) == ("EPYC-Rome", "+svm;-aes")
    # With or without the prefix, one model; one file digest for every entry.
    model = expect_data(root.get(f"{MODELS}/{name}"), MODELS + "/{cputype}")
    assert (
        model == expect_data(root.get(f"{MODELS}/custom-{name}"))
        and model["digest"] == mine["digest"]
    )
    expect_error(
        root.post(MODELS, data={"cputype": name, "reported-model": "EPYC"}), 500, "already exists"
    )
    # Abstract profiles are no reported model (9.x's enum leaves them out).
    expect_error(
        root.post(MODELS, data={"cputype": f"x{name}", "reported-model": "x86-64-v2-AES"}),
        400,
        "reported-model",
    )
    # The model is offered to VMs: capabilities list it with its reported model's vendor.
    models = expect_data(root.get("/nodes/pve1/capabilities/qemu/cpu"))
    assert {"name": f"custom-{name}", "custom": 1, "vendor": "AuthenticAMD"} in models

    node, vmid = "pve2", make_vm(root, "pve2", unique_vmid, cpu=f"custom-{name}")
    config = f"/nodes/{node}/qemu/{vmid}/config"
    assert expect_data(root.get(config))["cpu"] == f"custom-{name}"
    for cpu, message in (
        ("custom-nosuchmodel", "Custom cputype 'nosuchmodel' not found"),
        ("Nosuchlake", "Built-in cputype 'Nosuchlake' is not defined (missing 'custom-' prefix?)"),
        ("host,flags=+svm", "VM-specific CPU flags must be a subset of"),
        ("kvm64,reported-model=EPYC", "Property 'reported-model' not allowed"),
    ):
        expect_error(root.put(config, data={"cpu": cpu}), 400, message)
    expect_data(root.put(config, data={"cpu": "kvm64,flags=+aes;-pcid"}))

    # Updates are digest-checked; delete drops options; the name is fixed.
    expect_data(root.put(f"{MODELS}/{name}", data={"delete": "flags", "digest": model["digest"]}))
    updated = expect_data(root.get(f"{MODELS}/{name}"))
    assert "flags" not in updated and updated["digest"] != model["digest"]
    expect_error(
        root.put(f"{MODELS}/{name}", data={"hidden": 1, "digest": model["digest"]}),
        500,
        "detected modified configuration",
    )
    expect_error(
        root.put(f"{MODELS}/{name}", data={"delete": "cputype"}), 500, "cannot delete 'cputype'"
    )
    expect_data(root.delete(f"{MODELS}/custom-{name}"))
    expect_error(root.delete(f"{MODELS}/{name}"), 500, f"custom CPU model '{name}' does not exist")
    expect_error(root.get(f"{MODELS}/{name}"), 500, f"Custom cputype '{name}' not found")
    expect_error(root.put(f"{MODELS}/{name}", data={"hidden": 1}), 500, "does not exist")
    assert f"custom-{name}" not in {
        m["name"] for m in expect_data(root.get("/nodes/pve1/capabilities/qemu/cpu"))
    }
    # Now gone, a new VM may not use it.
    expect_error(
        root.post(f"/nodes/{node}/qemu", data={"vmid": vmid + 1, "cpu": f"custom-{name}"}),
        400,
        f"Custom cputype '{name}' not found",
    )


def test_cpu_flags_say_which_nodes_support_them(root):
    flags = expect_data(
        root.get("/nodes/pve1/capabilities/qemu/cpu-flags"),
        "/nodes/{node}/capabilities/qemu/cpu-flags",
    )
    by_name = {f["name"]: f for f in flags}
    nodes = sorted(n["node"] for n in expect_data(root.get("/nodes")))
    assert flags[0]["name"] == "nested-virt" and flags[0]["supported-on"] == nodes
    assert by_name["aes"]["supported-on"] == nodes and "AES-NI" in by_name["aes"]["description"]
    assert set(by_name) == {
        *("nested-virt", "md-clear", "pcid", "spec-ctrl", "ssbd", "ibpb", "virt-ssbd"),
        *("amd-ssbd", "amd-no-ssb", "pdpe1gb", "hv-tlbflush", "hv-evmcs", "aes"),
    }
    # The seeded nodes run AMD EPYC hosts: the Intel-only flag is supported nowhere,
    # and such flags come last.
    assert by_name["hv-evmcs"]["supported-on"] == [] and flags[-1]["supported-on"] == []
    tcg = {
        f["name"]: f
        for f in expect_data(
            root.get("/nodes/pve1/capabilities/qemu/cpu-flags", params={"accel": "tcg"})
        )
    }
    assert tcg["hv-tlbflush"]["supported-on"] == [] and tcg["aes"]["supported-on"] == nodes
    assert (
        expect_data(root.get("/nodes/pve1/capabilities/qemu/cpu-flags", params={"arch": "aarch64"}))
        == []
    )
    # Cluster-wide: every flag QEMU understands, not only the VM-specific ones.
    everything = {
        f["name"]: f
        for f in expect_data(root.get("/cluster/qemu/cpu-flags"), "/cluster/qemu/cpu-flags")
    }
    assert {"sse4.2", "avx2", "svm", "vmx", "aes"} <= set(everything)
    assert (
        everything["svm"]["supported-on"] == nodes
        and "nested-virt" in everything["svm"]["description"]
    )


def test_machines_and_migration_capabilities_follow_the_qemu(root):
    machines = expect_data(
        root.get("/nodes/pve1/capabilities/qemu/machines"),
        "/nodes/{node}/capabilities/qemu/machines",
    )
    assert machines[0]["version"] == "10.0" and {m["type"] for m in machines[:2]} == {
        "i440fx",
        "q35",
    }
    pve1 = next(m for m in machines if m["id"] == "pc-q35-9.2+pve1")
    assert pve1["changes"] == "S3/S4 power states off unless enabled."
    ids = [m["id"] for m in machines]
    assert ids.index("pc-i440fx-9.2+pve1") < ids.index("pc-i440fx-9.2") < ids.index("pc-i440fx-9.1")
    assert "pc-i440fx-4.1+pve2" in ids and ids[-1].endswith("-2.4")
    migration = expect_data(
        root.get("/nodes/pve1/capabilities/qemu/migration"),
        "/nodes/{node}/capabilities/qemu/migration",
    )
    assert migration == {"has-dbus-vmstate": True}


def test_older_majors_answer_their_own_paths(sim, api):
    _swap(sim, 8)
    try:
        machines = expect_data(api.get("/nodes/pve2/capabilities/qemu/machines"))
        # 8.4's QEMU 9.2: its newest machine is 9.2's PVE revision.
        assert machines[0]["id"] == "pc-i440fx-9.2+pve1"
        expect_error(api.get("/nodes/pve2/capabilities/qemu/cpu-flags"), 501, "not implemented")
        expect_error(api.get("/cluster/qemu/custom-cpu-models"), 501, "not implemented")
        view = expect_data(api.get(REPOS.format(node="pve2")), REPOS)
        assert [f["file-type"] for f in view["files"]] == ["list", "list", "list"]
        assert view["files"][0]["path"] == "/etc/apt/sources.list"
        assert view["files"][1]["repositories"][0]["Suites"] == ["bookworm"]
        handles = [r["handle"] for r in view["standard-repos"]]
        assert (
            handles[:3] == ["enterprise", "no-subscription", "test"]
            and "ceph-squid-test" in handles
        )
        expect_data(api.put(REPOS.format(node="pve2"), data={"handle": "test"}))
        added = expect_data(api.get(REPOS.format(node="pve2")))
        sources_list = added["files"][0]
        assert sources_list["repositories"][-1]["Components"] == ["pvetest"]
    finally:
        _swap(sim, 9)


def test_firewall_macros_are_listed_and_checked_in_rules(root):
    macros = expect_data(root.get("/cluster/firewall/macros"), "/cluster/firewall/macros")
    names = [m["macro"] for m in macros]
    assert names == sorted(names, key=str.lower) and {"SSH", "HTTPS", "Ceph", "DHCPv6"} <= set(
        names
    )
    assert all(m["descr"] for m in macros)
    group = f"mac{time.time_ns() % 10**6}"
    expect_data(root.post("/cluster/firewall/groups", data={"group": group}))
    try:
        rules = f"/cluster/firewall/groups/{group}"
        # Matched case-insensitively, stored by its own spelling.
        expect_data(root.post(rules, data={"type": "in", "action": "ACCEPT", "macro": "ssh"}))
        assert expect_data(root.get(f"{rules}/0"))["macro"] == "SSH"
        expect_error(
            root.post(rules, data={"type": "in", "action": "ACCEPT", "macro": "Gopher"}),
            400,
            "unknown macro 'Gopher'",
        )
        expect_error(root.put(f"{rules}/0", data={"macro": "nosuch"}), 400, "unknown macro")
        expect_data(root.delete(f"{rules}/0"))
    finally:
        expect_data(root.delete(f"/cluster/firewall/groups/{group}"))


class _Files(BaseHTTPRequestHandler):
    """A loopback file server: HEAD answers what a download would get."""

    def do_HEAD(self):
        if self.path.startswith("/missing"):
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/x-iso9660-image; charset=binary")
        self.send_header("Content-Length", "3145728")
        if self.path.startswith("/download"):
            self.send_header("Content-Disposition", 'attachment; filename="debian-13.iso"')
        self.end_headers()

    def log_message(self, *_args):
        pass


@pytest.fixture(scope="module")
def files():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Files)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_query_url_metadata_asks_the_server(root, files):
    path = "/nodes/pve1/query-url-metadata"
    named = expect_data(
        root.get(path, params={"url": f"{files}/isos/alpine.iso?x=1"}),
        "/nodes/{node}/query-url-metadata",
    )
    assert named == {
        "filename": "alpine.iso",
        "size": 3145728,
        "mimetype": "application/x-iso9660-image",
    }
    disposed = expect_data(root.get(path, params={"url": f"{files}/download?id=7"}))
    assert disposed["filename"] == "debian-13.iso"
    expect_error(
        root.get(path, params={"url": f"{files}/missing.iso"}), 500, "invalid server response: '404"
    )
    expect_error(
        root.get(path, params={"url": "https://example.com/x.iso"}),
        500,
        "Can't connect to example.com:443",
    )
    expect_error(root.get(path, params={"url": "ftp://example.com/x.iso"}), 400, "url")


def test_what_a_restricted_user_sees(root, server, unique_vmid):
    userid = f"nadm{unique_vmid}@pve"
    seen, hidden = f"seen{unique_vmid}", f"hidden{unique_vmid}"
    expect_data(root.post("/access/users", data={"userid": userid, "password": "nadm-pw-1"}))
    for name in (seen, hidden):
        expect_data(root.post(MODELS, data={"cputype": name, "reported-model": "Haswell"}))
    grants = (
        (f"/mapping/cpu/{seen}", "PVEMappingUser"),
        ("/storage/local", "PVEDatastoreUser"),
    )
    for path, role in grants:
        expect_data(root.put("/access/acl", data={"path": path, "users": userid, "roles": role}))
    try:
        with httpx.Client(base_url=server.base_url + "/api2/json", verify=False, timeout=30) as c:
            user = Session(c, userid, "nadm-pw-1")
            # Custom models: only those with a Mapping privilege on /mapping/cpu/<name>.
            listed = {m["cputype"] for m in expect_data(user.get(MODELS))}
            assert f"custom-{seen}" in listed and f"custom-{hidden}" not in listed
            offered = {
                m["name"] for m in expect_data(user.get("/nodes/pve1/capabilities/qemu/cpu"))
            }
            assert f"custom-{seen}" in offered and f"custom-{hidden}" not in offered
            expect_error(user.get(f"{MODELS}/{hidden}"), 403, "Permission check failed")
            expect_error(
                user.post(MODELS, data={"cputype": "mine"}), 403, "Permission check failed"
            )
            # vzdump defaults: the storage is readable, the node's own settings are not.
            defaults = expect_data(user.get("/nodes/pve1/vzdump/defaults"))
            assert defaults["storage"] == "local" and "dumpdir" not in defaults
            assert "ionice" not in defaults and defaults["mode"] == "snapshot"
            expect_error(
                user.get("/nodes/pve1/vzdump/defaults", params={"storage": "local-lvm"}),
                403,
                "Permission check failed",
            )
    finally:
        for name in (seen, hidden):
            expect_data(root.delete(f"{MODELS}/{name}"))
        expect_data(root.delete(f"/access/users/{userid}"))


def test_suspendall_hibernates_the_nodes_running_vms(root, unique_vmid):
    # Only the listed VMs: the seeded guests of pve2 keep running.
    api = root
    first, second, idle = (make_vm(api, "pve2", unique_vmid + n) for n in range(3))
    for vmid in (first, second):
        api.wait(expect_data(api.post(f"/nodes/pve2/qemu/{vmid}/status/start")))
    vms = f"{first},{second},{idle}"
    upid = expect_data(
        api.post("/nodes/pve2/suspendall", data={"vms": vms}), "/nodes/{node}/suspendall", "POST"
    )
    assert upid.split(":")[5] == "suspendall"
    done = api.wait(upid)
    log = [line["t"] for line in expect_data(api.get(f"/nodes/pve2/tasks/{upid}/log"))]
    # What it skips is noted, not warned about.
    assert done["exitstatus"] == "OK", log
    assert f"VM {idle} not running, skipping suspension" in log and f"Suspending VM {first}" in log
    state = {}
    for vmid in (first, second):
        current = expect_data(api.get(f"/nodes/pve2/qemu/{vmid}/status/current"))
        config = expect_data(api.get(f"/nodes/pve2/qemu/{vmid}/config"))
        assert (current["status"], current.get("lock"), config["lock"]) == (
            "stopped",
            "suspended",
            "suspended",
        )
        state[vmid] = config["vmstate"]
        assert state[vmid].startswith(f"local-lvm:vm-{vmid}-state-suspend-")
    content = {v["volid"] for v in expect_data(api.get("/nodes/pve2/storage/local-lvm/content"))}
    assert set(state.values()) <= content
    # A locked VM refuses other changes; starting it resumes from its saved state.
    expect_error(
        api.put(f"/nodes/pve2/qemu/{first}/config", data={"memory": 1024}),
        500,
        "locked (suspended)",
    )
    upid = expect_data(api.post(f"/nodes/pve2/qemu/{first}/status/start"))
    assert api.wait(upid)["exitstatus"] == "OK"
    log = [line["t"] for line in expect_data(api.get(f"/nodes/pve2/tasks/{upid}/log"))]
    assert f"resuming VM from state '{state[first]}'" in log
    config = expect_data(api.get(f"/nodes/pve2/qemu/{first}/config"))
    assert "lock" not in config and "vmstate" not in config
    assert expect_data(api.get(f"/nodes/pve2/qemu/{first}/status/current"))["status"] == "running"
    content = {v["volid"] for v in expect_data(api.get("/nodes/pve2/storage/local-lvm/content"))}
    assert state[first] not in content and state[second] in content
    # One VM to disk by itself; a stopped one cannot be.
    upid = expect_data(
        api.post(
            f"/nodes/pve2/qemu/{first}/status/suspend", data={"todisk": 1, "statestorage": "local"}
        )
    )
    assert api.wait(upid)["exitstatus"] == "OK"
    assert expect_data(api.get(f"/nodes/pve2/qemu/{first}/config"))["vmstate"].startswith(
        f"local:{first}/"
    )
    expect_error(
        api.post(f"/nodes/pve2/qemu/{idle}/status/suspend", data={"todisk": 1}),
        500,
        f"VM {idle} not running",
    )
