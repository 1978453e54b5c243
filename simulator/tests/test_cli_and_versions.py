"""The CLI surface other engineers script against, and serving older majors."""

from __future__ import annotations

import dataclasses
import json
import ssl
import uuid

import httpx
import pytest
from simtest_support import ROOT_PASSWORD, official_apidoc, run

from proxmox_simulator.cli import main
from proxmox_simulator.config import Settings
from proxmox_simulator.contracts import sources
from proxmox_simulator.contracts.diff import diff_contracts
from proxmox_simulator.repositories import db

CORE = [
    ("/access/ticket", "POST"),
    ("/nodes", "GET"),
    ("/nodes/{node}/qemu", "GET"),
    ("/nodes/{node}/qemu", "POST"),
    ("/nodes/{node}/qemu/{vmid}/config", "GET"),
    ("/nodes/{node}/qemu/{vmid}/status/current", "GET"),
    ("/nodes/{node}/qemu/{vmid}/status/start", "POST"),
    ("/nodes/{node}/qemu/{vmid}/agent/network-get-interfaces", "GET"),
    ("/nodes/{node}/lxc", "GET"),
    ("/nodes/{node}/tasks/{upid}/status", "GET"),
    ("/nodes/{node}/tasks/{upid}/log", "GET"),
    ("/cluster/resources", "GET"),
    ("/cluster/status", "GET"),
    ("/cluster/nextid", "GET"),
]


def _official(version):
    return official_apidoc(version)


@pytest.mark.parametrize("version", ["6.4-15", "7.4-16", "8.4.5"])
def test_core_endpoints_exist_in_every_major(version):
    contract = sources.parse_artifact(sources.read_file(_official(version)), version).contract
    missing = [key for key in CORE if contract.endpoint(*key) is None]
    assert missing == []


def test_contract_commands(tmp_path, capsys):
    data = ["--data-dir", str(tmp_path)]
    assert main([*data, "contract", "import", str(_official("7.4-16"))]) == 0
    manifest = json.loads(capsys.readouterr().out)
    assert manifest["version"] == "7.4-16" and manifest["counts"] == {"paths": 364, "methods": 540}
    assert main([*data, "contract", "import", "--fakepve"]) == 0
    assert json.loads(capsys.readouterr().out)["counts"] == {"paths": 449, "methods": 680}
    assert main([*data, "contract", "list"]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[0] for line in listing] == ["7.4-16", "9.2.12"]
    assert (
        main(
            [*data, "contract", "show", "7.4-16", "--path", "/nodes/{node}/qemu", "--method", "GET"]
        )
        == 0
    )
    shown = json.loads(capsys.readouterr().out)
    assert shown[0]["path"] == "/nodes/{node}/qemu" and shown[0]["method"] == "GET"
    assert main([*data, "contract", "diff", "7.4-16", "9.2.12"]) == 0
    diff = json.loads(capsys.readouterr().out)
    assert diff["old"] == "7.4-16" and diff["new"] == "9.2.12" and diff["added_paths"]
    # Return shapes and permission rules are compared too, not only names.
    assert "data.memory.available" in diff["returns"]["GET /nodes/{node}/status"]["added"]
    assert "GET /access/acl" not in diff["permissions"]  # only its description changed
    assert all(set(change) == {"old", "new"} for change in diff["permissions"].values())
    # Stored snapshots are raw-copied for files, referenced for the package.
    assert (tmp_path / "contracts" / "7.4-16" / "raw" / "pve-7.4-16-apidoc.js").exists()
    assert not any((tmp_path / "contracts" / "9.2.12" / "raw").iterdir())


@pytest.mark.parametrize("version", ["6.4-15", "7.4-16", "8.4.5", "fakepve"])
def test_contract_coverage_report(tmp_path, capsys, version):
    """Every declared method is handled: nothing answers 501 (the probe proves how)."""
    target = version if version == "fakepve" else str(_official(version))
    assert main(["--data-dir", str(tmp_path), "contract", "coverage", target, "--list"]) == 0
    report = json.loads(capsys.readouterr().out)
    contract = sources.parse_artifact(
        sources.read_fakepve() if version == "fakepve" else sources.read_file(_official(version)),
        report["version"],
    ).contract
    declared = {f"{e.method} {e.path}" for e in contract.endpoints}
    assert report["major"] == contract.major
    assert report["unhandled_501"] == []
    assert report["handled"] == report["methods"] == len(declared)
    assert report["coverage_percent"] == 100.0
    listed = [label for labels in report["handled_methods"].values() for label in labels]
    assert sorted(listed) == sorted(declared)
    assert "GET /nodes/{node}/qemu" in report["handled_methods"]["bespoke"]
    # Every declared method has a handler of its own: none falls back to the store.
    assert report["handled_methods"].get("resource-store", []) == []
    assert "PUT /cluster/ceph/flags" in report["handled_methods"]["bespoke"]


def test_coverage_reports_several_majors_at_once(tmp_path, capsys):
    paths = [str(_official(v)) for v in ("6.4-15", "7.4-16", "8.4.5")]
    assert main(["--data-dir", str(tmp_path), "contract", "coverage", *paths, "fakepve"]) == 0
    reports = json.loads(capsys.readouterr().out)
    assert [(r["major"], r["methods"]) for r in reports] == [
        (6, 504),
        (7, 540),
        (8, 605),
        (9, 680),
    ]


# Methods answered by the generic resource store, per major: the fidelity figure
# `contract coverage --table` prints.  A handler that retires generic methods
# lowers these numbers in the same commit (and lists the methods below).
GENERIC_METHODS = {6: 0, 7: 0, 8: 0, 9: 0}

# Methods that specific handlers took over from the generic store; none may fall back.
RETIRED_FROM_GENERIC: list[str] = [
    # consoles (test_consoles.py)
    *(
        f"{method} /nodes/{{node}}/{kind}/{{vmid}}/{name}"
        for kind in ("qemu", "lxc")
        for method, name in (
            ("POST", "vncproxy"),
            ("POST", "termproxy"),
            ("POST", "spiceproxy"),
            ("GET", "vncwebsocket"),
        )
    ),
    "POST /nodes/{node}/vncshell",
    "POST /nodes/{node}/termproxy",
    "POST /nodes/{node}/spiceshell",
    "GET /nodes/{node}/vncwebsocket",
    # RRD statistics (test_rrd.py)
    "GET /nodes/{node}/rrd",
    "GET /nodes/{node}/rrddata",
    "GET /nodes/{node}/storage/{storage}/rrd",
    "GET /nodes/{node}/storage/{storage}/rrddata",
    # uploads and appliance templates (test_iac_storage_transfer.py)
    "POST /nodes/{node}/storage/{storage}/upload",
    "GET /nodes/{node}/aplinfo",
    "POST /nodes/{node}/aplinfo",
    # host hardware (test_major_fields.py)
    "GET /nodes/{node}/hardware/pci",
    "GET /nodes/{node}/hardware/usb",
    # bulk guest actions (test_bulk_actions.py)
    "POST /nodes/{node}/migrateall",
    # a node's certificates (test_node_certificates.py)
    "GET /nodes/{node}/certificates/info",
    "POST /nodes/{node}/certificates/custom",
    "DELETE /nodes/{node}/certificates/custom",
    # ACME accounts and certificate orders (test_node_certificates.py)
    "GET /cluster/acme/account",
    "POST /cluster/acme/account",
    "GET /cluster/acme/account/{name}",
    "PUT /cluster/acme/account/{name}",
    "DELETE /cluster/acme/account/{name}",
    "POST /nodes/{node}/certificates/acme/certificate",
    "PUT /nodes/{node}/certificates/acme/certificate",
    "DELETE /nodes/{node}/certificates/acme/certificate",
    # scans of remote storage servers (test_storage_scan.py)
    *(f"GET /nodes/{{node}}/scan/{kind}" for kind in ("nfs", "cifs", "iscsi", "pbs")),
    # single-file restore from PBS snapshots (test_storage_restore.py)
    "GET /nodes/{node}/storage/{storage}/file-restore/list",
    "GET /nodes/{node}/storage/{storage}/file-restore/download",
]
# Second factors (test_tfa.py); not every major declares each of them.
RETIRED_WHERE_DECLARED = [
    # GlusterFS scan, 6.x-8.x (test_storage_scan.py)
    "GET /nodes/{node}/scan/glusterfs",
    # a container's remote-migration target side, 7.x+ (test_remote_migration.py)
    "POST /nodes/{node}/lxc/{vmid}/mtunnel",
    "GET /nodes/{node}/lxc/{vmid}/mtunnelwebsocket",
    # migration to another cluster, 7.x+ (test_remote_migration.py)
    "POST /nodes/{node}/qemu/{vmid}/remote_migrate",
    "POST /nodes/{node}/lxc/{vmid}/remote_migrate",
    # ACME directory metadata (test_node_certificates.py)
    "GET /cluster/acme/meta",
    "GET /cluster/acme/tos",
    # the cluster's bulk guest actions, 9.x (test_bulk_actions.py)
    *(f"POST /cluster/bulk-action/guest/{a}" for a in ("start", "shutdown", "suspend", "migrate")),
    "GET /access/tfa",
    "POST /access/tfa",
    "PUT /access/tfa",
    "GET /access/tfa/{userid}",
    "POST /access/tfa/{userid}",
    "GET /access/tfa/{userid}/{id}",
    "PUT /access/tfa/{userid}/{id}",
    "DELETE /access/tfa/{userid}/{id}",
    # host hardware and 6.x/7.x old paths (test_major_fields.py)
    "GET /nodes/{node}/cpu",
    "GET /nodes/{node}/capabilities/qemu/cpu",
    "GET /nodes/{node}/scan/usb",
    "GET /nodes/{node}/hardware/pci/{pciid}/mdev",
    "GET /nodes/{node}/hardware/pci/{pci-id-or-mapping}/mdev",
    "GET /cluster/backupinfo",
    "GET /cluster/backupinfo/not_backed_up",
    # the Ceph cluster (test_ceph_cluster.py)
    "GET /cluster/ceph/status",
    "GET /nodes/{node}/ceph/status",
    "GET /nodes/{node}/ceph/osd",
    "POST /nodes/{node}/ceph/osd",
    "DELETE /nodes/{node}/ceph/osd/{osdid}",
    "POST /nodes/{node}/ceph/osd/{osdid}/in",
    "POST /nodes/{node}/ceph/osd/{osdid}/out",
    "GET /nodes/{node}/ceph/mon",
    "POST /nodes/{node}/ceph/mon/{monid}",
    "DELETE /nodes/{node}/ceph/mon/{monid}",
    "GET /nodes/{node}/ceph/mgr",
    "POST /nodes/{node}/ceph/mgr/{id}",
    "DELETE /nodes/{node}/ceph/mgr/{id}",
    "POST /nodes/{node}/ceph/start",
    "POST /nodes/{node}/ceph/stop",
    "GET /nodes/{node}/ceph/rules",
    "GET /nodes/{node}/ceph/crush",
    "GET /nodes/{node}/ceph/cfg/raw",
    "GET /nodes/{node}/ceph/config",
    "POST /nodes/{node}/ceph/osd/{osdid}/scrub",
    # Ceph daemons, CephFS, metadata, log and the 6.x node paths (test_ceph_daemons.py)
    "GET /cluster/ceph/metadata",
    "GET /cluster/ceph/health-mute",
    "PUT /cluster/ceph/health-mute/{code}",
    "POST /cluster/ceph/restart-bulk",
    *(
        f"{method} /nodes/{{node}}/ceph/{path}"
        for method, path in (
            ("GET", "mds"),
            ("POST", "mds/{name}"),
            ("DELETE", "mds/{name}"),
            ("GET", "fs"),
            ("POST", "fs/{name}"),
            ("DELETE", "fs/{name}"),
            ("POST", "init"),
            ("POST", "restart"),
            ("POST", "restart-bulk"),
            ("GET", "log"),
            ("GET", "cfg/db"),
            ("GET", "cfg/value"),
            ("GET", "configdb"),
            ("GET", "cmd-safety"),
            ("GET", "releases"),
            ("GET", "disks"),
            ("GET", "flags"),
            ("POST", "flags/{flag}"),
            ("DELETE", "flags/{flag}"),
            ("GET", "osd/{osdid}/metadata"),
            ("GET", "osd/{osdid}/lv-info"),
        )
    ),
    *(
        f"{method} /nodes/{{node}}/ceph/{path}"
        for method, path in (
            ("GET", "pool"),
            ("POST", "pool"),
            ("PUT", "pool/{name}"),
            ("DELETE", "pool/{name}"),
            ("GET", "pool/{name}/status"),
            ("GET", "pools"),
            ("POST", "pools"),
            ("GET", "pools/{name}"),
            ("PUT", "pools/{name}"),
            ("DELETE", "pools/{name}"),
        )
    ),
    # SDN: the global lock, rollback, VNet IP mappings and the node views (test_sdn.py)
    "POST /cluster/sdn/lock",
    "DELETE /cluster/sdn/lock",
    "POST /cluster/sdn/rollback",
    "POST /cluster/sdn/vnets/{vnet}/ips",
    "PUT /cluster/sdn/vnets/{vnet}/ips",
    "DELETE /cluster/sdn/vnets/{vnet}/ips",
    "GET /nodes/{node}/sdn/zones",
    "GET /nodes/{node}/sdn/zones/{zone}/content",
    "GET /nodes/{node}/sdn/zones/{zone}/bridges",
    "GET /nodes/{node}/sdn/zones/{zone}/ip-vrf",
    "GET /nodes/{node}/sdn/vnets/{vnet}/mac-vrf",
    "GET /cluster/sdn/dry-run",
    *(
        f"{method} /cluster/sdn/prefix-lists{path}"
        for path, methods in (
            ("", ("GET", "POST")),
            ("/{id}", ("GET", "PUT", "DELETE")),
            ("/{id}/entries", ("GET", "POST")),
            ("/{id}/entries/{url_seq}", ("GET", "PUT", "DELETE")),
        )
        for method in methods
    ),
    "GET /cluster/sdn/route-maps",
    "GET /cluster/sdn/route-maps/entries",
    "POST /cluster/sdn/route-maps/entries",
    "GET /cluster/sdn/route-maps/entries/{route-map-id}",
    "GET /cluster/sdn/route-maps/entries/{route-map-id}/entry/{order}",
    "PUT /cluster/sdn/route-maps/entries/{route-map-id}/entry/{order}",
    "DELETE /cluster/sdn/route-maps/entries/{route-map-id}/entry/{order}",
    # the dbus-vmstate helper, 9.x (test_guest_operations.py)
    "POST /nodes/{node}/qemu/{vmid}/dbus-vmstate",
    # the target side of a remote migration, 9.x (test_guest_operations.py)
    "POST /nodes/{node}/qemu/{vmid}/mtunnel",
    "GET /nodes/{node}/qemu/{vmid}/mtunnelwebsocket",
    # SDN fabrics, 9.x (test_sdn_fabrics.py)
    *(
        f"{method} /cluster/sdn/fabrics{path}"
        for path, methods in (
            ("/all", ("GET",)),
            ("/fabric", ("GET", "POST")),
            ("/fabric/{id}", ("GET", "PUT", "DELETE")),
            ("/node", ("GET",)),
            ("/node/{fabric_id}", ("GET", "POST")),
            ("/node/{fabric_id}/{node_id}", ("GET", "PUT", "DELETE")),
        )
        for method in methods
    ),
    *(
        f"GET /nodes/{{node}}/sdn/fabrics/{{fabric}}/{view}"
        for view in ("interfaces", "neighbors", "routes")
    ),
    # realm sync, realm-sync jobs and the schedule analysis (test_realm_sync.py)
    "POST /access/domains/{realm}/sync",
    "GET /cluster/jobs/schedule-analyze",
    "GET /cluster/jobs/realm-sync",
    *(f"{m} /cluster/jobs/realm-sync/{{id}}" for m in ("GET", "POST", "PUT", "DELETE")),
    # a user's TFA types and the lockout's unlock (test_user_tfa.py)
    "GET /access/users/{userid}/tfa",
    "PUT /access/users/{userid}/unlock-tfa",
    # a console's VNC ticket verified (test_consoles.py)
    "POST /access/vncticket",
    # OpenID Connect sign-in (test_openid.py)
    "POST /access/openid/auth-url",
    "POST /access/openid/login",
    # pvestatd's pull metrics (test_metrics_export.py)
    "GET /cluster/metrics/export",
    # node administration (test_node_admin.py)
    "GET /nodes/{node}/apt/repositories",
    "POST /nodes/{node}/apt/repositories",
    "PUT /nodes/{node}/apt/repositories",
    "GET /nodes/{node}/syslog",
    "GET /nodes/{node}/journal",
    "GET /nodes/{node}/netstat",
    "GET /nodes/{node}/report",
    "POST /nodes/{node}/execute",
    "POST /nodes/{node}/wakeonlan",
    "GET /nodes/{node}/vzdump/defaults",
    "GET /nodes/{node}/capabilities/qemu/cpu-flags",
    "GET /nodes/{node}/capabilities/qemu/machines",
    "GET /nodes/{node}/capabilities/qemu/migration",
    "GET /cluster/qemu/cpu-flags",
    "GET /cluster/qemu/custom-cpu-models",
    "POST /cluster/qemu/custom-cpu-models",
    "GET /cluster/qemu/custom-cpu-models/{cputype}",
    "PUT /cluster/qemu/custom-cpu-models/{cputype}",
    "DELETE /cluster/qemu/custom-cpu-models/{cputype}",
    "GET /cluster/firewall/macros",
    "GET /nodes/{node}/query-url-metadata",
    "POST /nodes/{node}/suspendall",
    # importing foreign guests, 8.x+ (test_storage_restore.py)
    "GET /nodes/{node}/storage/{storage}/import-metadata",
    "GET /nodes/{node}/storage/{storage}/identity",
    # OCI images for containers, 9.x (test_storage_restore.py)
    "GET /nodes/{node}/query-oci-repo-tags",
    "POST /nodes/{node}/storage/{storage}/oci-registry-pull",
]

_MAJOR_SOURCES = {6: "6.4-15", 7: "7.4-16", 8: "8.4.5", 9: "fakepve"}


def _source(version):
    return version if version == "fakepve" else str(_official(version))


def test_coverage_table_measures_generic_answers_per_major(tmp_path, capsys):
    sources_ = [_source(v) for v in _MAJOR_SOURCES.values()]
    assert main(["--data-dir", str(tmp_path), "contract", "coverage", "--table", *sources_]) == 0
    header, *lines = capsys.readouterr().out.strip().splitlines()
    assert header.split("\t") == [
        "major",
        "version",
        "methods",
        "specific",
        "generic",
        "unhandled",
    ]
    rows = {int(line.split("\t")[0]): line.split("\t") for line in lines}
    assert sorted(rows) == [6, 7, 8, 9]
    for major, (_m, _v, methods, specific, generic, unhandled) in rows.items():
        assert int(specific) + int(generic) == int(methods)
        assert int(unhandled) == 0
        assert int(generic) == GENERIC_METHODS[major], f"PVE {major}: generic count moved"


@pytest.mark.parametrize("version", list(_MAJOR_SOURCES.values()))
def test_retired_methods_are_no_longer_generic(tmp_path, capsys, version):
    assert (
        main(["--data-dir", str(tmp_path), "contract", "coverage", _source(version), "--list"]) == 0
    )
    report = json.loads(capsys.readouterr().out)
    generic = set(report["handled_methods"].get("resource-store", []))
    assert report["answered_by"]["generic"] == len(generic)
    assert sorted(generic & {*RETIRED_FROM_GENERIC, *RETIRED_WHERE_DECLARED}) == []
    specific = set(report["handled_methods"]["bespoke"])
    assert set(RETIRED_FROM_GENERIC) <= specific  # every major declares all of them


def test_coverage_counts_a_method_no_handler_answers():
    from proxmox_simulator.api.handlers.dispatch import handling
    from proxmox_simulator.contracts.model import Contract, Endpoint

    base = sources.parse_artifact(sources.read_fakepve(), sources.FAKEPVE_SCHEMA_VERSION).contract
    orphan = Endpoint("/nodes", "POST")
    contract = Contract(base.version, (*base.endpoints, orphan))
    assert handling(contract, orphan) is None
    # A collection a later major might add (shaped like /pools): only the store answers it,
    # and the report counts it as generic.
    future = dataclasses.replace(base.endpoint("/pools", "GET"), path="/cluster/future-things")
    with_future = Contract(base.version, (*base.endpoints, future))
    assert handling(with_future, future) == "resource-store"


def test_token_and_cluster_commands(settings, seeded, capsys, monkeypatch):
    monkeypatch.setenv("PROXMOX_SIMULATOR_DATABASE_URL", settings.database_url)
    assert main(["token", "create", "root@pam!clitest", "--privsep", "0", "--json"]) == 0
    created = json.loads(capsys.readouterr().out)
    assert created["full-tokenid"] == "root@pam!clitest" and len(created["value"]) == 36
    assert main(["ready"]) == 0
    capsys.readouterr()
    try:
        assert main(["cluster", "rename", "--standalone"]) == 0
        assert capsys.readouterr().out.strip() == "(standalone)"

        async def name():
            conn = await db.connect(settings.database_url)
            try:
                return await conn.fetchval("SELECT name FROM cluster")
            finally:
                await conn.close()

        assert run(name()) is None
    finally:
        assert main(["cluster", "rename", "pvesim"]) == 0


def test_serving_an_older_major_validates_against_its_own_schema(settings, seeded):
    from proxmox_simulator.server import SimulatorServer

    path = _official("7.4-16")
    old = sources.parse_artifact(sources.read_file(path), "7.4-16").contract
    new = sources.parse_artifact(sources.read_fakepve(), sources.FAKEPVE_SCHEMA_VERSION).contract
    added = diff_contracts(old, new).parameters["POST /nodes/{node}/qemu"]["added"]
    newer_param = next(p for p in added if "[n]" not in p)
    legacy = Settings(
        database_url=settings.database_url,
        data_dir=settings.data_dir,
        contract=str(path),
        clock="instant",
        task_workers=0,
        pool_max_size=2,
    )
    with (
        SimulatorServer(legacy) as server,
        httpx.Client(base_url=server.base_url + "/api2/json") as client,
    ):
        login = client.post(
            "/access/ticket", data={"username": "root@pam", "password": ROOT_PASSWORD}
        )
        ticket, csrf = login.json()["data"]["ticket"], login.json()["data"]["CSRFPreventionToken"]
        headers = {"Cookie": f"PVEAuthCookie={ticket}", "CSRFPreventionToken": csrf}
        assert client.get("/version", headers=headers).json()["data"]["version"] == "7.4-16"
        refused = client.post(
            "/nodes/pve1/qemu", headers=headers, data={"vmid": 777777, newer_param: "1"}
        )
        assert refused.status_code == 400
        assert "not defined in schema" in refused.json()["errors"][newer_param]


def test_every_semantic_handler_matches_a_declared_method():
    """A typo in a handler's path would silently never be routed.

    Handlers of older majors' paths (6.x's ``ceph/pools``, the old TFA API) count when
    any bundled major declares them."""
    from proxmox_simulator.api.handlers import REGISTRY

    contracts = [
        sources.parse_artifact(sources.read_fakepve(), sources.FAKEPVE_SCHEMA_VERSION).contract,
        *(
            sources.parse_artifact(sources.read_file(_official(v)), v).contract
            for v in ("6.4-15", "7.4-16", "8.4.5")
        ),
    ]
    undeclared = sorted(
        key
        for key in REGISTRY.registered()
        if all(contract.endpoint(*key) is None for contract in contracts)
    )
    assert undeclared == []


def test_simulator_process_helper_serves_tls_in_a_child_process(settings, seeded, tmp_path):
    from dataclasses import replace

    from proxmox_simulator.server import SimulatorProcess

    child_settings = replace(settings, data_dir=tmp_path, task_workers=1, pool_max_size=2)
    with SimulatorProcess(child_settings, tls=True) as sim:
        cert = tmp_path / "tls" / "pve-ssl.pem"
        assert cert.exists()
        trust = ssl.create_default_context(cafile=str(cert))
        with httpx.Client(base_url=sim.base_url + "/api2/json", verify=trust) as client:
            login = client.post(
                "/access/ticket", data={"username": "root@pam", "password": ROOT_PASSWORD}
            )
            assert login.status_code == 200
            ticket = login.json()["data"]["ticket"]
            nodes = client.get("/nodes", headers={"Cookie": f"PVEAuthCookie={ticket}"})
            assert {n["node"] for n in nodes.json()["data"]} == {"pve1", "pve2", "pve3"}


def test_serve_refuses_an_unmigrated_database(tmp_path):
    from simtest_support import BASE_URL, _admin, drop_database

    from proxmox_simulator.contracts.registry import resolve_contract
    from proxmox_simulator.runtime import Runtime
    from proxmox_simulator.simulation.clock import InstantClock

    name = f"pvesim_test_unmigrated_{uuid.uuid4().hex[:8]}"
    run(_admin(f'CREATE DATABASE "{name}"'))
    url = BASE_URL.rpartition("/")[0] + f"/{name}"
    settings = Settings(database_url=url, data_dir=tmp_path, pool_max_size=2)
    try:
        # The app's lifespan opens the runtime first: startup fails with this message.
        with pytest.raises(RuntimeError, match="run `proxmox-simulator migrate` first"):
            run(Runtime.open(settings, resolve_contract("fakepve", tmp_path), InstantClock()))
    finally:
        drop_database(url)


def test_a_closed_pipe_ends_a_command_quietly():
    """`proxmox-simulator faults list | head -1` once head has exited: the reader of
    the pipe is gone before the listing is written."""
    import sys

    from proxbox_processes import run_into_closed_pipe

    from proxbox_redaction import EXIT_BROKEN_PIPE

    result = run_into_closed_pipe([sys.executable, "-m", "proxmox_simulator", "faults", "list"])
    assert (result.returncode, result.stderr) == (EXIT_BROKEN_PIPE, "")


def test_ctrl_c_stops_serve_with_one_line_and_exit_130(settings, seeded):
    import os
    import signal
    import subprocess
    import sys

    from proxbox_processes import free_port, interruptible, stop_process, wait_for_http

    from proxmox_simulator.config import settings_env

    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "proxmox_simulator", "serve", "--port", str(port)],
        env={**os.environ, **settings_env(settings)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=interruptible,
    )
    try:
        url = f"http://127.0.0.1:{port}/readyz"
        wait_for_http(url, process, timeout=60, require_success=True)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=30)
    finally:
        stop_process(process)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
    assert stderr.rstrip().splitlines()[-1] == "proxmox-simulator: interrupted"
    assert stderr.count("proxmox-simulator: interrupted") == 1


def test_a_major_waiting_in_the_data_dir_is_imported_on_first_use(tmp_path, capsys):
    """`<data dir>/apidoc/` holds official schemas: a major's first use imports the newest
    one (manifest and checksums, as `contract import` writes them); none there is an error."""
    assert main(["--data-dir", str(tmp_path), "contract", "report", "--major", "7"]) == 2
    assert "no contract of major 7 is imported" in capsys.readouterr().err
    waiting = tmp_path / "apidoc"
    waiting.mkdir()
    for version in ("6.4-15", "7.4-16"):
        (waiting / f"pve-{version}-apidoc.js").symlink_to(_official(version))
    assert main(["--data-dir", str(tmp_path), "contract", "report", "--major", "7"]) == 0
    assert json.loads(capsys.readouterr().out)["version"] == "7.4-16"
    assert main(["--data-dir", str(tmp_path), "contract", "list"]) == 0
    listed = capsys.readouterr().out
    # Only the major asked for was imported, with its checksum.
    assert "7.4-16" in listed and "6.4-15" not in listed
    manifest = json.loads((tmp_path / "contracts" / "7.4-16" / "manifest.json").read_text())
    assert manifest["source"]["sha256"] == sources.read_file(_official("7.4-16")).sha256


@pytest.mark.parametrize("command", [("contract", "coverage"), ("contract", "show", "--path", "/")])
def test_an_unknown_contract_is_one_line_and_exit_2(tmp_path, capsys, command):
    verb, *rest = command
    argv = ["--data-dir", str(tmp_path), verb, command[1], "5.4-3", *rest[1:]]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "proxmox-simulator: unknown contract '5.4-3': not 'fakepve', an imported version or a file"
    ], err
