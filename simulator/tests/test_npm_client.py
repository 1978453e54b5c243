"""The npm ``proxmox-api`` client (1.1.1) against the served simulator.

The package is installed with npm into a folder of the test session; a node
script (``npm_client.mjs``) drives guest, storage and access calls with it and
prints what each call answered; proxmoxer then checks the state it left.
Node trusts the simulator's certificate through ``NODE_EXTRA_CA_CERTS``.
Without node/npm the module is skipped, except under CI, where it fails.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from proxmoxer.core import ResourceException
from proxmoxer.tools import Tasks
from simtest_support import ROOT_PASSWORD, close_proxmoxer, proxmoxer_client

PACKAGE = "proxmox-api@1.1.1"
SCRIPT = Path(__file__).with_name("npm_client.mjs")
NPM, NODE = shutil.which("npm"), shutil.which("node")

if os.environ.get("CI") and not (NPM and NODE):
    raise RuntimeError("CI needs node and npm on PATH for the proxmox-api client test")
pytestmark = pytest.mark.skipif(not (NPM and NODE), reason="needs node and npm")


@pytest.fixture(scope="session")
def npm_client(tmp_path_factory) -> Path:
    """A scratch folder with proxmox-api installed and the client script beside it."""
    folder = tmp_path_factory.mktemp("npm-proxmox-api")
    (folder / "package.json").write_text('{"name": "pvesim-npm-client", "private": true}\n')
    completed = subprocess.run(
        [NPM, "install", PACKAGE, "--no-audit", "--no-fund"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, f"npm install {PACKAGE} failed:\n{completed.stderr}"
    shutil.copy(SCRIPT, folder / SCRIPT.name)
    return folder


@pytest.fixture(scope="module")
def prox(server):
    api = proxmoxer_client(server)
    yield api
    close_proxmoxer(api)


def _run(npm_client: Path, server, cfg: dict) -> dict:
    env = {
        **os.environ,
        "NODE_EXTRA_CA_CERTS": str(server.settings.data_dir / "tls" / "pve-ssl.pem"),
    }
    env.pop("NODE_TLS_REJECT_UNAUTHORIZED", None)
    completed = subprocess.run(
        [NODE, SCRIPT.name, json.dumps(cfg)],
        cwd=npm_client,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout)


def test_proxmox_api_drives_guest_storage_and_access(npm_client, server, prox, unique_vmid):
    vmid = unique_vmid
    tag = uuid.uuid4().hex[:6]
    cfg = {
        "port": server.port,
        "password": ROOT_PASSWORD,
        "node": "pve1",
        "vmid": vmid,
        "user": f"npm{tag}@pve",
        "tokenid": "ci",
    }
    try:
        out = _run(npm_client, server, cfg)
        _check(out, cfg, prox)
    finally:
        _clean(prox, cfg)


def _check(out: dict, cfg: dict, prox) -> None:
    vmid = cfg["vmid"]
    # Guest.
    assert out["create"] == "OK"
    config = out["config"]
    assert (config["name"], config["memory"], config["cores"]) == (f"npm-{vmid}", "512", 1)
    assert (
        config["scsi0"].startswith(f"local-lvm:vm-{vmid}-disk-0,") and "size=1G" in config["scsi0"]
    )
    assert config["net0"].startswith("virtio=") and config["net0"].endswith(",bridge=vmbr0")
    assert out["set"] is None
    after = out["configAfterSet"]
    assert (after["memory"], after["description"]) == ("1024", "set by proxmox-api")
    assert after["digest"] != config["digest"]
    assert "return Error 400 Parameter verification failed." in out["badSet"]
    assert "memory.current: value must have a minimum value of 16" in out["badSet"]
    assert out["start"] == "OK" and out["running"]["status"] == "running"
    assert out["running"]["maxmem"] == 1024 * 1024**2
    assert out["stop"] == "OK" and out["stopped"]["status"] == "stopped"

    # Storage.
    storages = {s["storage"]: s for s in out["storages"]}
    assert "local-lvm" in storages and "images" in storages["local-lvm"]["content"].split(",")
    assert all("images" in s["content"].split(",") for s in out["storages"])
    assert [(v["volid"], v["size"]) for v in out["content"]] == [
        (f"local-lvm:vm-{vmid}-disk-0", 1024**3)
    ]

    # Access.
    user, full_id = cfg["user"], f"{cfg['user']}!ci"
    assert out["acl"] is None
    token = out["token"]
    assert token["full-tokenid"] == full_id
    uuid.UUID(token["value"])  # PVE's token secrets are UUIDs
    assert token["info"]["privsep"] == 0 and token["info"]["comment"] == "proxmox-api token"
    assert [t["tokenid"] for t in out["tokens"]] == ["ci"]
    # The token (no privilege separation) has its user's rights: this VM only, read-only.
    assert [r["vmid"] for r in out["tokenResources"]] == [vmid]
    assert out["tokenConfig"]["memory"] == "1024"
    assert f"403 Permission check failed (/vms/{vmid}, VM.Config.Memory)" in out["tokenWrite"]

    # The state the client left, seen by another client.
    stored = prox.nodes("pve1").qemu(vmid).config.get()
    # The refused token write changed nothing.
    assert (str(stored["memory"]), stored["description"]) == ("1024", "set by proxmox-api")
    current = prox.nodes("pve1").qemu(vmid).status.current.get()
    assert (current["status"], current["maxmem"]) == ("stopped", 1024 * 1024**2)
    acl = {(a["path"], a["ugid"], a["roleid"]) for a in prox.access.acl.get() if a["ugid"] == user}
    assert acl == {(f"/vms/{vmid}", user, "PVEVMUser"), (f"/vms/{vmid}", user, "PVEAuditor")}
    assert prox.access.users(user).get()["comment"] == "made by proxmox-api"
    assert [t["tokenid"] for t in prox.access.users(user).token.get()] == ["ci"]


def _clean(prox, cfg: dict) -> None:
    """Drop what the script made, whatever it got to."""
    if cfg["user"] in {u["userid"] for u in prox.access.users.get()}:
        prox.access.users(cfg["user"]).delete()
    guest = prox.nodes("pve1").qemu(cfg["vmid"])
    if cfg["vmid"] not in {g["vmid"] for g in prox.nodes("pve1").qemu.get()}:
        return
    if guest.status.current.get()["status"] != "stopped":
        Tasks.blocking_status(prox, guest.status.stop.post(), polling_interval=0.02)
    try:
        Tasks.blocking_status(prox, guest.delete(), polling_interval=0.02)
    except ResourceException as exc:
        pytest.fail(f"VM {cfg['vmid']} left behind: {exc}")
