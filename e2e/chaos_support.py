"""What every chaos case shares: the processes it kills or restarts (NetBox's RQ worker,
the sync backend's HTTP service, a PostgreSQL of NetBox's own) and the checks it ends
with (no duplicates, no dangling relations, honest counters, the state an undisturbed
sync reaches).

Kills are SIGKILL to the process and its descendants: a forking RQ worker's work horse
dies with it, as on a lost host or container.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import psutil
import psycopg
from proxbox_processes import free_port, stop_process, wait_for_http, wait_until
from psycopg import sql
from sync_fixtures import (
    HTTP_TIMEOUT,
    NetBoxServer,
    change_marker,
    cli_environment,
    list_all,
    netbox_inventory,
    object_changes_since,
    of_vms,
)

from proxbox_backend.clients.tls import verify_setting
from proxbox_devstack import postgres_server, processes
from proxbox_devstack.migrate_without_icu import fallback_collation_sql
from proxbox_devstack.netbox_settings import django_database
from proxbox_devstack.testdb import (
    _client,
    _client_env,
    maintenance_connection,
    server_supports_icu,
)

INVENTORY_TYPES = {
    "dcim.device": "nodes",
    "virtualization.virtualmachine": "vms",
    "virtualization.vminterface": "interfaces",
    "ipam.ipaddress": "ips",
    "virtualization.virtualdisk": "disks",
}


def kill9(process: subprocess.Popen) -> None:
    """SIGKILL the process and all its descendants at once.

    By tree, not by process group: RQ's work horse calls setsid(), so a group kill of
    the worker would leave the horse running the Job.
    """
    tree = psutil.Process(process.pid).children(recursive=True)
    for proc in [psutil.Process(process.pid), *tree]:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    psutil.wait_procs(tree, timeout=30)


def vm_creates(netbox: NetBoxServer, since: int) -> int:
    return sum(
        1
        for change in object_changes_since(netbox, since)
        if change["changed_object_type"] == "virtualization.virtualmachine"
        and change["action"]["value"] == "create"
    )


def assert_consistent(netbox: NetBoxServer, cluster_id: int) -> dict:
    """No duplicates, nothing pointing at what is gone or at another VM's objects."""
    vms = list_all(netbox, "/virtualization/virtual-machines/", cluster_id=cluster_id)
    names = Counter(vm["name"] for vm in vms)
    assert not [name for name, n in names.items() if n > 1], names
    vm_ids = {vm["id"] for vm in vms}
    interfaces = list_all(netbox, "/virtualization/interfaces/", cluster_id=cluster_id)
    per_vm = Counter((i["virtual_machine"]["id"], i["name"]) for i in interfaces)
    assert not [key for key, n in per_vm.items() if n > 1], per_vm
    stray = {i["virtual_machine"]["id"] for i in interfaces} - vm_ids
    assert not stray, f"interfaces of VMs not in the cluster's VM list: {stray}"
    interface_vm = {i["id"]: i["virtual_machine"]["id"] for i in interfaces}
    ips = [
        ip
        for ip in of_vms(netbox, "/ipam/ip-addresses/", vm_ids)
        if ip["assigned_object_type"] == "virtualization.vminterface"
    ]
    assert {ip["assigned_object_id"] for ip in ips} <= set(interface_vm)
    addresses = Counter(ip["address"] for ip in ips)
    assert not [a for a, n in addresses.items() if n > 1], addresses
    ip_vm = {ip["id"]: interface_vm[ip["assigned_object_id"]] for ip in ips}
    for vm in vms:
        for family in ("primary_ip4", "primary_ip6"):
            if vm[family]:
                assert ip_vm.get(vm[family]["id"]) == vm["id"], (vm["name"], family)
    disks = of_vms(netbox, "/virtualization/virtual-disks/", vm_ids)
    per_vm_disk = Counter((d["virtual_machine"]["id"], d["name"]) for d in disks)
    assert not [key for key, n in per_vm_disk.items() if n > 1], per_vm_disk
    return netbox_inventory(netbox, cluster_id)


def sync_state(netbox: NetBoxServer, cluster_id: int) -> dict:
    with netbox.api() as api:
        states = api.get(
            "/plugins/proxbox/cluster-sync-states/", params={"cluster_id": cluster_id}
        ).json()["results"]
    assert len(states) == 1, states
    return states[0]


def endpoint_cluster(netbox: NetBoxServer, endpoint_id: int) -> int:
    with netbox.api() as api:
        endpoint = api.get(f"/plugins/proxbox/endpoints/proxmox/{endpoint_id}/").json()
    return endpoint["netbox_cluster"]["id"]


def assert_converged(
    netbox: NetBoxServer, cluster_id: int, expected: dict, before: dict, counters: dict
) -> None:
    """After the rerun: the undisturbed state, and counters that created exactly what the
    disturbed run had not (`before` is NetBox's inventory between the two runs)."""
    converged = assert_consistent(netbox, cluster_id)
    for part in INVENTORY_TYPES.values():
        assert converged[part] == expected[part], part
    for object_type, part in INVENTORY_TYPES.items():
        created = counters.get(object_type, {}).get("created", 0)
        missing = len(expected[part]) - len(before[part])
        if object_type == "ipam.ipaddress":  # the nodes' addresses count there too
            missing += len(converged["node_ips"]) - len(before["node_ips"])
        assert created == missing, (object_type, created, missing)
    state = sync_state(netbox, cluster_id)
    assert state["status"]["value"] == "succeeded", state
    assert state["objects_created"] == sum(c.get("created", 0) for c in counters.values())


# -- processes ------------------------------------------------------------------------------


_WORKER_NUMBERS = itertools.count(1)


class RQWorker:
    """NetBox's own `rqworker` on the server's database and Redis, in a process group of
    its own; `env` adds to the server's environment (e.g. the backend's URL). It serves
    NetBox's queues and the sync queue both: the chaos cases kill the one worker that
    holds a validation or a sync, whichever queue it came from."""

    def __init__(
        self,
        netbox: NetBoxServer,
        workdir: Path,
        queues: tuple[str, ...] = ("high", "default", "low", "netbox_proxbox.sync"),
        **env: str,
    ):
        self.netbox, self.workdir, self.queues, self.extra_env = netbox, workdir, queues, env
        self.process: subprocess.Popen | None = None
        self.started = 0
        self.name = f"rqworker-{next(_WORKER_NUMBERS)}"

    def start(self) -> RQWorker:
        self.started += 1
        log = open(self.workdir / f"{self.name}-{self.started}.log", "wb")  # noqa: SIM115
        self.process = subprocess.Popen(
            [*(sys.executable, "-m", "netbox", "rqworker"), *self.queues],
            env={**self.netbox.env(), **self.extra_env},
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        return self

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill9(self) -> None:
        kill9(self.process)

    def stop(self) -> None:
        if self.running:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill9()


def grant_credentials(netbox: NetBoxServer) -> None:
    """Let the admin (the backend's NetBox user here) read endpoints' Proxmox tokens:
    `reveal_credentials` is never implied, not even for superusers."""
    name = "backend reveals endpoint credentials"
    with netbox.api() as api:
        if api.get("/users/permissions/", params={"name": name}).json()["count"]:
            return
        admin = api.get("/users/users/", params={"username": "admin"}).json()["results"][0]
        response = api.post(
            "/users/permissions/",
            json={
                "name": name,
                "object_types": ["netbox_proxbox.proxmoxendpoint"],
                "actions": ["view", "change", "reveal_credentials"],
                "users": [admin["id"]],
            },
        )
        assert response.status_code == 201, response.text


@contextlib.contextmanager
def watching_backend(netbox: NetBoxServer, simulator, workdir: Path, label: str, **env: str):
    """`proxbox-sync serve` watching (the watched endpoints read every second), in
    `workdir/label`, stopped afterwards; `env`: more PROXBOX_* settings."""
    (workdir / label).mkdir(exist_ok=True)
    server = BackendServer(
        netbox,
        workdir / label,
        f"{label}-test-api-token-0123456789abcdef",
        simulator.ca_bundle,
        PROXBOX_WATCH_REFRESH="1",
        **env,
    )
    try:
        yield server.start()
    finally:
        server.stop()


class BackendServer:
    """`proxbox-sync serve` on a free port, authenticating NetBox with `netbox_token` and
    its callers with `api_token` (what NetBox's PLUGINS_CONFIG sends)."""

    def __init__(
        self, netbox: NetBoxServer, workdir: Path, api_token: str, ca_bundle: str, **env: str
    ):
        self.netbox, self.workdir = netbox, workdir
        self.api_token, self.ca_bundle = api_token, ca_bundle
        self.env = env  # more PROXBOX_* settings
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self) -> BackendServer:
        grant_credentials(self.netbox)
        log = open(self.workdir / "backend.log", "wb")  # noqa: SIM115
        self.process = subprocess.Popen(
            [sys.executable, "-m", "proxbox_backend.cli", "serve", "--port", str(self.port)],
            env=dict(
                os.environ,
                PROXBOX_NETBOX_URL=self.netbox.url,
                PROXBOX_NETBOX_TOKEN=self.netbox.admin_token,
                PROXBOX_BACKEND_API_TOKEN=self.api_token,
                PROXBOX_PROXMOX_CA_BUNDLE=self.ca_bundle,
                PROXBOX_HTTP_TIMEOUT=str(HTTP_TIMEOUT),
                **self.env,
            ),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait_for_http(f"{self.url}/health", self.process)
        return self

    def run(self, run_id: str) -> dict:
        response = httpx.get(
            f"{self.url}/runs/{run_id}",
            verify=verify_setting(),
            headers={"Authorization": f"Bearer {self.api_token}"},
            timeout=30,
        )
        response.raise_for_status()
        return response.json()

    def wait_run(self, run_id: str, timeout: float = 600) -> dict:
        return wait_until(
            lambda: (run := self.run(run_id))["state"] == "finished" and run,
            timeout,
            f"backend run {run_id} to finish",
            interval=0.5,
        )

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process)


def sync_command(netbox: NetBoxServer, simulator, endpoint_name: str) -> tuple[list[str], dict]:
    """`proxbox-sync run --json` of one endpoint as a subprocess, and its environment."""
    argv = [sys.executable, "-m", "proxbox_backend.cli", "run", "--endpoint", endpoint_name]
    return argv + ["--json"], cli_environment(netbox, simulator)


def sync_midway(
    netbox: NetBoxServer, simulator, endpoint_name: str, creates: int = 5, timeout: float = 300
) -> subprocess.Popen:
    """`proxbox-sync run --json` as a subprocess, returned still running once it has
    created `creates` VMs: the moment each chaos case disturbs a sync."""
    argv, env = sync_command(netbox, simulator, endpoint_name)
    since = change_marker(netbox)
    run = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL
    )
    deadline = time.monotonic() + timeout
    while vm_creates(netbox, since) < creates:
        if run.poll() is not None or time.monotonic() > deadline:
            run.kill()
            _, stderr = run.communicate(timeout=60)
            raise AssertionError(
                f"the sync ended or stalled before it had created {creates} VMs: "
                + stderr.decode()[-2000:]
            )
        time.sleep(0.2)
    return run


def settled(netbox: NetBoxServer, quiet: float = 2.0, timeout: float = 60) -> None:
    """Until NetBox's change log has not grown for `quiet` seconds: a killed client's last
    request goes on in its gunicorn worker (nothing tells Django the client is gone), and a
    run started while it commits plans against a state that changes under it."""
    last, since = change_marker(netbox), time.monotonic()
    deadline = since + timeout
    while time.monotonic() - since < quiet:
        assert time.monotonic() < deadline, "NetBox's change log kept growing"
        time.sleep(0.25)
        marker = change_marker(netbox)
        if marker != last:
            last, since = marker, time.monotonic()


class PrivatePostgres:
    """The dev stack's embedded PostgreSQL on a data dir and port of its own: a case may
    restart it without touching the server the other suites (and engineers) share."""

    def __init__(self, workdir: Path):
        self.data_dir = workdir / "private-postgres"
        self.port = free_port()
        self.log_file = self.data_dir / "postgres.log"
        self.spec: processes.ProcessSpec | None = None
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return postgres_server.server_url(self.port)

    def settings(self, database: str = "postgres") -> dict:
        return django_database(self.url, database)

    def start(self) -> PrivatePostgres:
        account = postgres_server.prepare_cluster(self.data_dir, self.log_file)
        self.spec = postgres_server.process_spec(self.data_dir, self.port, self.log_file, account)
        self.process = processes.spawn(self.spec)
        processes.wait_ready(self.spec, self.process)
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            record = processes.ProcessRecord.of(self.process.pid)
            processes.stop(record, self.spec.stop_signal, self.spec.stop_timeout)
            self.process.wait(timeout=30)

    def restart(self) -> float:
        """Fast shutdown (every session cut off, open transactions rolled back), then the
        same data dir on the same port; returns the seconds it did not answer."""
        down = time.monotonic()
        self.stop()
        self.start()
        return time.monotonic() - down

    def restore(self, source: dict, template: str, database: str, workdir: Path) -> None:
        """`template` of the `source` server (Django settings) as `database` here, by
        pg_dump and pg_restore: seconds, where migrating NetBox takes minutes.

        This build has no ICU: NetBox's ICU collation is replaced by the stand-in
        `proxbox_devstack.migrate_without_icu` migrates with, created before the restore.
        """
        dump = workdir / f"{template}.dump"
        with maintenance_connection(source) as conn:
            pg_dump = _client("pg_dump", conn.info.server_version // 10000)
        args, env = _client_env(source)
        _pg(pg_dump, *args, "--format", "custom", "--no-owner", "--file", dump, template, env=env)
        with maintenance_connection(self.settings()) as conn:
            conn.execute(
                sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(database))
            )
            icu = server_supports_icu(conn)
            version = conn.info.server_version
        pg_restore = str(postgres_server.POSTGRES_BIN_PATH / "pg_restore")
        listing = workdir / f"{template}.list"
        toc = _pg(pg_restore, "--list", dump, env=env)
        replaced = [] if icu else _icu_collations(source, template)
        kept = [line for line in toc.splitlines() if not _is_collation(line, replaced)]
        listing.write_text("\n".join(kept) + "\n")
        with _connect(self.settings(), database) as conn:
            for name in replaced:
                conn.execute(fallback_collation_sql(name, version))
        args, env = _client_env(self.settings())
        _pg(
            pg_restore,
            *args,
            "--no-owner",
            "--exit-on-error",
            "--use-list",
            listing,
            "--dbname",
            database,
            dump,
            env=env,
        )


def _pg(*argv, env: dict) -> str:
    result = subprocess.run([str(a) for a in argv], env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{Path(str(argv[0])).name} failed: {result.stderr.strip()}")
    return result.stdout


def _connect(settings: dict, database: str) -> psycopg.Connection:
    keys = {"user": "USER", "password": "PASSWORD", "host": "HOST", "port": "PORT"}
    params = {key: settings[name] for key, name in keys.items() if settings.get(name)}
    return psycopg.connect(dbname=database, autocommit=True, **params)


def _icu_collations(source: dict, database: str) -> list[str]:
    with _connect(source, database) as conn:
        rows = conn.execute(
            "SELECT collname FROM pg_collation c JOIN pg_namespace n ON n.oid = c.collnamespace"
            " WHERE c.collprovider = 'i' AND n.nspname = 'public'"
        ).fetchall()
    return [name for (name,) in rows]


def _is_collation(toc_line: str, names: list[str]) -> bool:
    """A `pg_restore --list` entry such as `213; 3456 16385 COLLATION public natural_sort postgres`."""
    return any(f" COLLATION public {name} " in toc_line for name in names)
