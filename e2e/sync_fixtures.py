"""Live processes for the sync end-to-end tests.

* a NetBox (gunicorn serving NetBox's WSGI app with both plugins) on a database
  cloned from the migrated template, with an admin API token;
* Proxmox simulators, each on its own database, seeded with a deterministic
  profile and served over TLS (the backend verifies the generated certificate);
* helpers to register endpoints and run the backend's sync in-process.

Every database created here starts with `pbsync_` and is dropped afterwards.
"""

from __future__ import annotations

import asyncio
import atexit
import itertools
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psycopg
import pytest
from proxbox_processes import free_port, stop_process, wait_for_http
from psycopg import sql
from psycopg.types.json import Jsonb

from proxbox_backend.clients.http import RetryPolicy
from proxbox_backend.clients.tls import verify_setting
from proxbox_backend.config import Settings
from proxbox_backend.domain.policy import Target
from proxbox_backend.secrets import Secret
from proxbox_backend.service import RunReport, SyncService
from proxbox_devstack import redis_databases, scratch_tablespace

PREFIX = "pbsync_"
# Every simulator of a session gets its own number: node addresses derive from it, since
# e2e modules share one NetBox and reuse renumber networks (10.79.0 twice, for one).
_INSTANCES = itertools.count(1)
# Every NetBox of a session gets a database of its own: the suites share one NetBox, and
# a suite starting another (the API fuzzing) must not clone over the shared one's.
_NETBOXES = itertools.count(1)


SERVER_URL = os.environ.get("PROXBOX_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
ADMIN_PASSWORD = "pbsync-admin-password"


def server_dsn(database: str) -> str:
    base, _, _ = SERVER_URL.rpartition("/")
    return f"{base}/{database}"


def admin_connection() -> psycopg.Connection:
    return psycopg.connect(SERVER_URL, autocommit=True)


def drop_database(name: str) -> None:
    with admin_connection() as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


# -- NetBox ----------------------------------------------------------------------------------


_ADMIN_TEMPLATES: dict[str, str] = {}


def admin_template(settings_dict: dict) -> str:
    """The migrated template plus an admin superuser, made once per process: every NetBox of
    the process clones it. Dropped when the process exits."""
    from proxbox_devstack.testdb import clone_database, ensure_template, maintenance_connection

    template = ensure_template(settings_dict)
    if template not in _ADMIN_TEMPLATES:
        name = f"{PREFIX}admin_{os.getpid()}"
        with maintenance_connection(settings_dict) as conn:
            clone_database(conn, template, name)
        atexit.register(drop_database, name)
        _create_admin(settings_dict, name)
        _ADMIN_TEMPLATES[template] = name
    return _ADMIN_TEMPLATES[template]


def _create_admin(settings_dict: dict, database: str) -> None:
    """What NetBox's `createsuperuser` leaves behind: the user and the UserConfig its
    post_save signal adds. Written here, its password hashed by this process's Django: the
    management command would import NetBox again (~8 CPU-s) in every e2e process."""
    from django.conf import settings
    from django.contrib.auth.hashers import make_password
    from netbox.config.parameters import PARAMS

    from proxbox_devstack.testdb import connect

    # As NetBox's configuration resolves it for a database without a ConfigRevision.
    default = next(param.default for param in PARAMS if param.name == "DEFAULT_USER_PREFERENCES")
    preferences = getattr(settings, "DEFAULT_USER_PREFERENCES", default)
    with connect(settings_dict, database) as conn, conn.transaction():
        (user_id,) = conn.execute(
            "INSERT INTO users_user (username, email, password, first_name, last_name,"
            " is_superuser, is_active, date_joined)"
            " VALUES ('admin', 'admin@example.com', %s, '', '', true, true, now()) RETURNING id",
            (make_password(ADMIN_PASSWORD),),
        ).fetchone()
        conn.execute(
            "INSERT INTO users_userconfig (user_id, data) VALUES (%s, %s)",
            (user_id, Jsonb(preferences)),
        )


class NetBoxServer:
    """`database` names a server of its own (default `pbsync_netbox_<pid>_<n>`);
    `gunicorn_args` go to gunicorn before the app; `env` adds to the environment of its
    processes (another NETBOX_CONFIGURATION, a Redis pair)."""

    def __init__(
        self,
        workdir: Path,
        database: str | None = None,
        gunicorn_args: tuple[str, ...] = (),
        **env: str,
    ):
        self.gunicorn_args = gunicorn_args
        self.database = database or f"{PREFIX}netbox_{os.getpid()}_{next(_NETBOXES)}"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.workdir = workdir
        self.extra_env = env
        self.process: subprocess.Popen | None = None
        self.admin_token = ""
        self.redis_lease: redis_databases.RedisLease | None = None

    def env(self) -> dict:
        return {
            **os.environ,
            "NETBOX_CONFIGURATION": "proxbox_devstack.netbox_configuration",
            "PROXBOX_NETBOX_DATABASE": self.database,
            **self.extra_env,
        }

    def create_database(self) -> None:
        """A clone of the migrated template with the admin user (built once per process)."""
        from django.db import connections

        from proxbox_devstack.testdb import clone_database, maintenance_connection

        settings_dict = connections["default"].settings_dict
        template = admin_template(settings_dict)
        with maintenance_connection(settings_dict) as conn:
            clone_database(conn, template, self.database)

    def remove_database(self) -> None:
        drop_database(self.database)

    def lease_redis_databases(self) -> None:
        """Queues of its own: the suites running beside this one use Redis too (a NetBox
        test case flushes the unleased pair), and so may another NetBox of this session."""
        if redis_databases.DATABASES_ENV in self.extra_env:
            return
        self.redis_lease = redis_databases.acquire(
            os.environ["PROXBOX_REDIS_URL"], self.workdir / self.database
        )
        if self.redis_lease is not None:
            self.redis_lease.keep()
            self.extra_env[redis_databases.DATABASES_ENV] = self.redis_lease.databases.to_env()

    def start(self) -> NetBoxServer:
        started = time.monotonic()
        self.lease_redis_databases()
        self.create_database()
        timings = {"database": time.monotonic() - started}
        log = open(self.workdir / f"{self.database}.log", "wb")  # noqa: SIM115 - lives as long as the server
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gunicorn",
                "--no-control-socket",
                # Workers end without the interpreter's teardown of NetBox's heap.
                "--config",
                "python:proxbox_devstack.gunicorn_config",
                "--bind",
                f"127.0.0.1:{self.port}",
                "--workers",
                "2",
                "--threads",
                "2",
                "--timeout",
                "300",
                # NetBox imported once and the workers forked from it, as `proxbox up`
                # runs it: half the start-up CPU, which the suites beside this one use.
                "--preload",
                *self.gunicorn_args,
                "proxbox_devstack.wsgi:application",
            ],
            env=self.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        # Minutes on a loaded CI machine: NetBox imports everything before it answers.
        wait_for_http(f"{self.url}/api/status/", self.process, timeout=300)
        self.admin_token = self.provision_token("admin", ADMIN_PASSWORD)
        timings["ready"] = time.monotonic() - started
        print(
            f"NetBox on {self.url}: " + ", ".join(f"{k} {v:.1f}s" for k, v in timings.items()),
            file=sys.stderr,
        )
        return self

    def provision_token(self, username: str, password: str) -> str:
        response = httpx.post(
            f"{self.url}/api/users/tokens/provision/",
            verify=verify_setting(),
            json={"username": username, "password": password},
            timeout=60,
        )
        response.raise_for_status()
        data = response.json()
        return f"nbt_{data['key']}.{data['token']}" if data.get("version") == 2 else data["token"]

    def api(self, token: str | None = None) -> httpx.Client:
        token = token or self.admin_token
        scheme = "Bearer" if token.startswith("nbt_") else "Token"
        return httpx.Client(
            base_url=f"{self.url}/api",
            verify=verify_setting(),
            headers={"Authorization": f"{scheme} {token}", "Accept": "application/json"},
            timeout=120,
        )

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process)
        self.remove_database()
        if self.redis_lease is not None:
            self.redis_lease.release()
            self.redis_lease = None


# -- Proxmox simulator -------------------------------------------------------------------------


class Simulator:
    """`env` adds to the environment of its processes (e.g. no in-process task workers)."""

    def __init__(self, label: str, profile: str, seed: int, workdir: Path, **env: str):
        self.label, self.profile, self.seed = label, profile, seed
        self.instance = next(_INSTANCES)
        self.extra_env = env
        self.database = f"{PREFIX}sim_{label}_{os.getpid()}"
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.data_dir = workdir / f"sim-{label}"
        self.workdir = workdir
        self.process: subprocess.Popen | None = None
        self.token_id = "root@pam!proxbox"
        self.token_secret = ""

    @property
    def ca_bundle(self) -> str:
        return str(self.data_dir / "tls" / "pve-ssl.pem")

    def env(self) -> dict:
        return {
            **os.environ,
            "PROXMOX_SIMULATOR_DATABASE_URL": server_dsn(self.database),
            "PROXMOX_SIMULATOR_DATA_DIR": str(self.data_dir),
            "PROXMOX_SIMULATOR_CLOCK": "instant",
            "PROXMOX_SIMULATOR_TASK_WORKERS": "1",
            **self.extra_env,
        }

    def cli(self, *args: str) -> str:
        result = subprocess.run(
            [sys.executable, "-m", "proxmox_simulator.cli", *args],
            env=self.env(),
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise RuntimeError(f"proxmox-simulator {' '.join(args)}: {result.stderr}")
        return result.stdout

    def prepare_database(self) -> str:
        """`migrate`, `seed` and `token create` as the CLI runs them, but in this process:
        three interpreter start-ups (and contract loads) fewer per simulator. Returns the
        token's secret."""
        from unittest import mock

        from proxmox_simulator import cli as simulator_cli
        from proxmox_simulator.config import Settings as SimulatorSettings

        async def prepare(settings: SimulatorSettings) -> str:
            password = (
                os.environ.get("PROXMOX_SIMULATOR_ROOT_PASSWORD")
                or simulator_cli.DEFAULT_ROOT_PASSWORD
            )
            await simulator_cli.migrate_database(settings)
            await simulator_cli.seed_database(settings, self.profile, self.seed, password)
            token = await simulator_cli.create_token(settings, self.token_id, False, "")
            return token["value"]

        with mock.patch.dict(os.environ, self.env(), clear=True):
            return asyncio.run(prepare(SimulatorSettings.from_env()))

    def start(self) -> Simulator:
        drop_database(self.database)
        with admin_connection() as conn:
            conn.execute(scratch_tablespace.create_database_sql(self.database))
        self.token_secret = self.prepare_database()
        log = open(self.workdir / f"sim-{self.label}.log", "wb")  # noqa: SIM115
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "proxmox_simulator.cli",
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--tls",
            ],
            env=self.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while not Path(self.ca_bundle).exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        wait_for_http(f"{self.url}/healthz", self.process, verify=False)
        return self

    def rename(self, name: str | None) -> None:
        self.cli("cluster", "rename", *([name] if name else ["--standalone"]))

    def api(self) -> httpx.Client:
        return httpx.Client(
            base_url=f"{self.url}/api2/json",
            headers={"Authorization": f"PVEAPIToken={self.token_id}={self.token_secret}"},
            verify=verify_setting(ca_bundle=self.ca_bundle),
            timeout=60,
        )

    def inventory(self) -> dict:
        """What Proxmox says, in the shape the assertions compare."""
        with self.api() as pve:
            status = pve.get("/cluster/status").json()["data"]
            resources = pve.get("/cluster/resources", params={"type": "vm"}).json()["data"]
            guests = {}
            for r in resources:
                config = pve.get(f"/nodes/{r['node']}/{r['type']}/{r['vmid']}/config").json()[
                    "data"
                ]
                guests[(r["type"], r["vmid"])] = {"resource": r, "config": config}
        return {"status": status, "guests": guests}

    def renumber(self, network: str) -> None:
        """Give every guest an address in `network` (e.g. "10.77.0"), and every node
        addresses of this simulator's own, so that clusters seeded alike do not collide in
        NetBox's globally unique IP table (a simulator not renumbered keeps the seed's)."""
        inventory = self.inventory()
        with self.api() as pve:
            for index, ((kind, vmid), guest) in enumerate(sorted(inventory["guests"].items())):
                node, config = guest["resource"]["node"], guest["config"]
                address = f"ip={network}.{index + 10}/24,gw={network}.1"
                if kind == "qemu":
                    change = {"ipconfig0": address}
                else:
                    nic = {k: v for k, v in props(config["net0"]).items() if k not in ("ip", "gw")}
                    change = {"net0": ",".join(f"{k}={v}" for k, v in nic.items()) + "," + address}
                response = pve.put(f"/nodes/{node}/{kind}/{vmid}/config", data=change)
                assert response.status_code == 200, response.text
        self.renumber_nodes()

    def node_addresses(self, position: int) -> dict[str, dict]:
        """What `renumber_nodes` gives the `position`-th node (in name order), per bridge."""
        n, host = self.instance, 11 + position
        return {
            "vmbr0": {
                "cidr": f"172.16.{n}.{host}/24",
                "gateway": f"172.16.{n}.1",
                "cidr6": f"fd00:16:{n:x}::{host:x}/64",
                "gateway6": f"fd00:16:{n:x}::1",
            },
            "vmbr1": {"cidr": f"172.20.{n}.{1 + position}/24"},
        }

    def renumber_nodes(self) -> None:
        """Readdress every node's bridges through Proxmox's own API (edit, then reload)."""
        nodes = sorted(e["name"] for e in self.inventory()["status"] if e.get("type") == "node")
        with self.api() as pve:
            for position, node in enumerate(nodes):
                for iface, change in self.node_addresses(position).items():
                    response = pve.put(
                        f"/nodes/{node}/network/{iface}", data={"type": "bridge", **change}
                    )
                    assert response.status_code == 200, response.text
                response = pve.put(f"/nodes/{node}/network")
                assert response.status_code == 200, response.text
                self.wait_task(response.json()["data"])

    def create_template(self, node: str, vmid: int, name: str, memory: int = 512) -> None:
        """A QEMU guest created, then turned into a template (`qm create`, `qm template`)."""
        with self.api() as pve:
            made = pve.post(
                f"/nodes/{node}/qemu",
                data={"vmid": vmid, "name": name, "memory": memory, "net0": "virtio,bridge=vmbr0"},
            )
            assert made.status_code == 200, made.text
            self.wait_task(made.json()["data"])
            # A task from PVE 7 on; PVE 6 answers at once.
            self.wait_if_task(pve.post(f"/nodes/{node}/qemu/{vmid}/template"))

    def wait_if_task(self, answer: httpx.Response) -> None:
        """Wait for the task an accepted API call started, if it answered with a UPID (PVE
        runs some calls as tasks and answers others at once)."""
        assert answer.status_code == 200, answer.text
        if isinstance(data := answer.json()["data"], str) and data.startswith("UPID:"):
            self.wait_task(data)

    def wait_task(self, upid: str) -> None:
        node = upid.split(":")[1]
        with self.api() as pve:
            for _ in range(200):
                data = pve.get(f"/nodes/{node}/tasks/{upid}/status").json()["data"]
                if data.get("status") == "stopped":
                    assert data.get("exitstatus") == "OK", data
                    return
                time.sleep(0.05)
        raise RuntimeError(f"task {upid} did not finish")

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process)
        drop_database(self.database)


# -- the backend ------------------------------------------------------------------------------


# Seconds a backend request to NetBox or Proxmox may take in these tests: a test NetBox on
# the loaded two-core CI machine took more than the default 60 s for the bulk write of a
# 100-guest cluster's interfaces, and the run failed on the timeout, not on what it tests.
HTTP_TIMEOUT = 300


def pve_ok(response) -> dict | list | str | None:
    """A PVE API answer's `data`, once it is a 200 (else the test fails with the body)."""
    assert response.status_code == 200, response.text
    return response.json()["data"]


def settings_for(
    netbox: NetBoxServer, simulator: Simulator, token: str | None = None, **overrides
) -> Settings:
    """Backend settings: NetBox from the server; Proxmox credentials as the fallback for
    when the plugin's credentials API does not serve them (override with None to drop)."""
    values = {
        "netbox_url": netbox.url,
        "netbox_token": Secret(token or netbox.admin_token),
        "proxmox_token_id": simulator.token_id,
        "proxmox_token": Secret(simulator.token_secret),
        "proxmox_ca_bundle": simulator.ca_bundle,
        "proxmox_url": simulator.url,
        "retry": RetryPolicy(attempts=3, backoff=0.2, max_backoff=1.0),
        "timeout": HTTP_TIMEOUT,
    }
    values.update(overrides)
    return Settings(**values)


def cli_environment(
    netbox: NetBoxServer, simulator: Simulator, token: str | None = None, **variables: str
) -> dict[str, str]:
    """The environment `proxbox-sync` runs with against `netbox` and `simulator` (token
    auth unless `variables` names other Proxmox credentials)."""
    proxmox = {"PROXBOX_PROXMOX_TOKEN": simulator.token_secret}
    if any(name.startswith("PROXBOX_PROXMOX_") for name in variables):
        proxmox = {}
    return {
        **os.environ,
        "PROXBOX_NETBOX_URL": netbox.url,
        "PROXBOX_NETBOX_TOKEN": token or netbox.admin_token,
        "PROXBOX_PROXMOX_URL": simulator.url,
        "PROXBOX_PROXMOX_CA_BUNDLE": simulator.ca_bundle,
        "PROXBOX_HTTP_TIMEOUT": str(HTTP_TIMEOUT),
        **proxmox,
        **variables,  # they win
    }


def run_cli(
    netbox: NetBoxServer, simulator: Simulator, *args: str, token: str | None = None, **variables
) -> subprocess.CompletedProcess:
    """`proxbox-sync ARGS…` as an operator runs it, against the NetBox and simulator."""
    return subprocess.run(
        [sys.executable, "-m", "proxbox_backend.cli", *args],
        env=cli_environment(netbox, simulator, token, **variables),
        capture_output=True,
        text=True,
        timeout=300,
    )


def run_sync(
    netbox: NetBoxServer,
    simulator: Simulator,
    endpoint_id: int,
    token: str | None = None,
    target: Target | None = None,
    *,
    baselines=None,
    dry_run: bool = False,
    **overrides,
) -> RunReport:
    """One run in this process; `target`: only that guest or node, as "Sync now" on its page;
    `baselines`: where incremental runs keep theirs (None: every run is full); `dry_run`:
    a preview."""
    service = SyncService(settings_for(netbox, simulator, token, **overrides), baselines=baselines)
    return asyncio.run(service.run(endpoint_id, target=target, dry_run=dry_run))


def create_endpoint(
    netbox: NetBoxServer,
    name: str,
    simulator: Simulator,
    *,
    site: int | None,
    mode: str = "cluster",
) -> dict:
    return create_endpoint_record(
        netbox,
        name,
        "127.0.0.1",
        simulator.port,
        site=site,
        mode=mode,
        token_id=simulator.token_id,
        token_secret=simulator.token_secret,
    )


def create_watched_endpoint(
    netbox: NetBoxServer, label: str, simulator: Simulator, **fields
) -> dict:
    """An endpoint of its own site (`pbsync-<label>`) with live sync on (`fields`:
    `watch_interval` and whatever else to set)."""
    site = create_site(netbox, f"pbsync-{label}")
    endpoint = create_endpoint(netbox, f"pve-{label}", simulator, site=site)
    with netbox.api() as api:
        watched = api.patch(f"/plugins/proxbox/endpoints/proxmox/{endpoint['id']}/", json=fields)
        assert watched.status_code == 200, watched.text
    return watched.json()


def create_endpoint_record(
    netbox: NetBoxServer,
    name: str,
    host: str,
    port: int,
    *,
    site: int | None,
    mode: str = "cluster",
    token_id: str = "root@pam!proxbox",
    token_secret: str = "",
) -> dict:
    with netbox.api() as api:
        response = api.post(
            "/plugins/proxbox/endpoints/proxmox/",
            json={
                "name": name,
                "host": host,
                "port": port,
                "verify_tls": True,
                "token_id": token_id,
                "token_secret": token_secret,
                "mode": mode,
                "site": site,
            },
        )
        assert response.status_code == 201, response.text
        return response.json()


def create_site(netbox: NetBoxServer, name: str) -> int:
    with netbox.api() as api:
        response = api.post("/dcim/sites/", json={"name": name, "slug": name.lower()})
        assert response.status_code == 201, response.text
        return response.json()["id"]


def list_all(netbox: NetBoxServer, path: str, **params) -> list[dict]:
    with netbox.api() as api:
        results, offset = [], 0
        while True:
            page = api.get(path, params={**params, "limit": 1000, "offset": offset}).json()
            results.extend(page["results"])
            if not page.get("next"):
                return results
            offset += 1000


def change_marker(netbox: NetBoxServer) -> int:
    """The id of NetBox's latest change-log entry (0 when empty)."""
    with netbox.api() as api:
        page = api.get("/core/object-changes/", params={"ordering": "-id", "limit": 1}).json()
    return page["results"][0]["id"] if page["results"] else 0


def object_changes_since(netbox: NetBoxServer, marker: int) -> list[dict]:
    """NetBox's own change log: what really got written after `marker`."""
    return [c for c in list_all(netbox, "/core/object-changes/", id__gt=marker)]


def assert_only_reflection_written(changes: list[dict]) -> None:
    """A run that found nothing to change still records itself: the cluster's sidecar (last
    sync) and the tracking record's "last seen". Anything else in the change log is a write."""
    changed = {(c["changed_object_type"], c["action"]["value"]) for c in changes}
    assert changed <= {
        ("netbox_proxbox.proxboxclustersyncstate", "update"),
        ("netbox_proxbox.proxmoxcluster", "update"),
    }, changed
    for change in changes:
        if change["changed_object_type"] == "netbox_proxbox.proxmoxcluster":
            before, after = change["prechange_data"], change["postchange_data"]
            differing = {k for k in after if before.get(k) != after[k]}
            assert differing == {"last_seen"}, differing
            assert after["last_seen"] > before["last_seen"]


# -- comparing inventories ----------------------------------------------------------------------

QEMU_NIC = re.compile(r"^(virtio|e1000|e1000e|rtl8139|vmxnet3)=([0-9A-Fa-f:]{17})")
DISK_KEYS = {
    "qemu": re.compile(r"^(scsi|virtio|sata|ide)\d+$"),
    "lxc": re.compile(r"^(rootfs|mp\d+)$"),
}
GIB_MB = 1024


def props(value: str) -> dict:
    return dict(item.split("=", 1) for item in value.split(",") if "=" in item)


def expected_inventory(inventory: dict) -> dict:
    """The simulator's inventory in NetBox terms, derived independently of the backend."""
    vms, interfaces, ips, disks = set(), set(), set(), set()
    for (kind, _vmid), guest in inventory["guests"].items():
        resource, config = guest["resource"], guest["config"]
        name = resource["name"]
        running = resource["status"] == "running"
        memory = int(config["memory"])
        vcpus = float(config.get("cores", 1)) * float(config.get("sockets", 1))
        vms.add((name, "active" if running else "offline", vcpus, memory, resource["node"]))
        for key, value in config.items():
            if not re.fullmatch(r"net\d+", key):
                continue
            if kind == "qemu":
                mac = QEMU_NIC.match(value).group(2).upper()
                interfaces.add((name, key, mac))
                # Cloud-init's static address is known from config, running or not.
                ipconfig = props(config.get(f"ipconfig{key[3:]}", ""))
                if "/" in ipconfig.get("ip", ""):
                    ips.add((name, key, ipconfig["ip"]))
            else:
                p = props(value)
                interfaces.add((name, p["name"], p["hwaddr"].upper()))
                if "/" in p.get("ip", ""):
                    ips.add((name, p["name"], p["ip"]))
        for key, value in config.items():
            if DISK_KEYS[kind].match(key) and "media=cdrom" not in value:
                size = props(value)["size"]
                assert size.endswith("G")
                disks.add((name, key, int(size[:-1]) * GIB_MB))
    nodes = {e["name"] for e in inventory["status"] if e["type"] == "node"}
    return {"nodes": nodes, "vms": vms, "interfaces": interfaces, "ips": ips, "disks": disks}


def of_vms(netbox: NetBoxServer, path: str, vm_ids) -> list[dict]:
    """The objects at `path` of these VMs. Virtual disks have no cluster filter (NetBox
    ignores `cluster_id` there), and one NetBox holds every suite's clusters."""
    vm_ids = sorted(vm_ids)
    found = []
    for start in range(0, len(vm_ids), 50):
        found += list_all(netbox, path, virtual_machine_id=vm_ids[start : start + 50])
    return found


INVENTORY_PARTS = ("nodes", "node_ips", "vms", "interfaces", "ips", "disks")


def netbox_inventory(
    netbox: NetBoxServer, cluster_id: int, parts: tuple[str, ...] = INVENTORY_PARTS
) -> dict:
    """What NetBox holds for the cluster, in the shape `expected_inventory` gives, with the
    VMs as NetBox answered them (`raw_vms`). Only `parts` are read: a test that polls
    for a few of them does not pay NetBox for the others (each list is a NetBox request)."""
    unknown = set(parts) - set(INVENTORY_PARTS)
    assert not unknown, unknown
    vms = list_all(netbox, "/virtualization/virtual-machines/", cluster_id=cluster_id)
    names = {vm["id"]: vm["name"] for vm in vms}
    inventory: dict = {"raw_vms": vms}
    if "vms" in parts:
        inventory["vms"] = {
            (
                vm["name"],
                vm["status"]["value"],
                float(vm["vcpus"]),
                vm["memory"],
                vm["device"]["name"] if vm["device"] else None,
            )
            for vm in vms
        }
    if "nodes" in parts or "node_ips" in parts:
        devices = list_all(netbox, "/dcim/devices/", cluster_id=cluster_id)
        inventory["nodes"] = {d["name"] for d in devices}
        # Addresses on the nodes' device interfaces, from each node's network.
        node_ips = (
            list_all(netbox, "/ipam/ip-addresses/", device_id=[d["id"] for d in devices])
            if devices and "node_ips" in parts
            else []
        )
        inventory["node_ips"] = {
            (ip["assigned_object"]["device"]["name"], ip["assigned_object"]["name"], ip["address"])
            for ip in node_ips
        }
    if "interfaces" in parts or "ips" in parts:
        ifaces = list_all(netbox, "/virtualization/interfaces/", cluster_id=cluster_id)
        inventory["interfaces"] = {
            (
                names[i["virtual_machine"]["id"]],
                i["name"],
                (i["primary_mac_address"] or {}).get("mac_address"),
            )
            for i in ifaces
        }
        iface_by_id = {i["id"]: (names[i["virtual_machine"]["id"]], i["name"]) for i in ifaces}
        ips = of_vms(netbox, "/ipam/ip-addresses/", names) if "ips" in parts else []
        inventory["ips"] = {(*iface_by_id[ip["assigned_object_id"]], ip["address"]) for ip in ips}
    if "disks" in parts:
        disks = of_vms(netbox, "/virtualization/virtual-disks/", names)
        inventory["disks"] = {
            (names[d["virtual_machine"]["id"]], d["name"], d["size"]) for d in disks
        }
    return {part: inventory[part] for part in (*parts, "raw_vms")}


# -- pytest fixtures ----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def sync_workdir():
    with tempfile.TemporaryDirectory(prefix="pbsync-e2e-") as path:
        yield Path(path)


@pytest.fixture(scope="session")
def netbox_server(sync_workdir):
    server = NetBoxServer(sync_workdir)
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture(scope="session")
def cluster_simulator(sync_workdir):
    simulator = Simulator("cluster", "small", 1, sync_workdir)
    try:
        yield simulator.start()
    finally:
        simulator.stop()


@pytest.fixture(scope="session")
def second_simulator(sync_workdir):
    """Another cluster that Proxmox also calls `pvesim` (one node), own addresses."""
    simulator = Simulator("second", "single", 2, sync_workdir)
    try:
        simulator.start().renumber("10.77.0")
        yield simulator
    finally:
        simulator.stop()


@pytest.fixture(scope="session")
def third_simulator(sync_workdir):
    """A third `pvesim` (one node), own addresses."""
    simulator = Simulator("third", "single", 3, sync_workdir)
    try:
        simulator.start().renumber("10.78.0")
        yield simulator
    finally:
        simulator.stop()
