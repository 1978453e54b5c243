"""PBS single-file restore, import metadata and OCI pulls, through the HTTP API."""

from __future__ import annotations

import base64
import hashlib
import http.server
import io
import json
import subprocess
import tarfile
import threading
import uuid
import zipfile

import httpx
import pytest
from simtest_support import Session, expect_data, expect_error, make_vm

LIST = "/nodes/{node}/storage/{storage}/file-restore/list"
DOWNLOAD = "/nodes/{node}/storage/{storage}/file-restore/download"
TEMPLATE = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"


def b64(path: str) -> str:
    return base64.b64encode(path.encode()).decode()


@pytest.fixture(scope="module")
def pbs(root):
    """A PBS storage (the simulator keeps its snapshots), removed afterwards."""
    name = f"pbs{uuid.uuid4().hex[:6]}"
    data = {
        "storage": name,
        "type": "pbs",
        "server": "pbs.example.test",
        "datastore": "store1",
        "username": "backup@pbs",
        "password": "pbspass",
    }
    expect_data(root.post("/storage", data=data))
    yield name
    root.delete(f"/storage/{name}")


def _backup(root, node: str, vmid: int, storage: str) -> dict:
    upid = expect_data(root.post(f"/nodes/{node}/vzdump", data={"vmid": vmid, "storage": storage}))
    assert root.wait(upid)["exitstatus"] == "OK"
    content = root.get(f"/nodes/{node}/storage/{storage}/content", params={"vmid": vmid})
    [archive] = expect_data(content, "/nodes/{node}/storage/{storage}/content")
    return archive


def _list(root, node, storage, volume, filepath="/"):
    answer = root.get(
        f"/nodes/{node}/storage/{storage}/file-restore/list",
        params={"volume": volume, "filepath": filepath},
    )
    return {e["text"]: e for e in expect_data(answer, LIST)}


def test_pbs_snapshot_of_a_vm_is_browsable_and_downloadable(root, pbs, unique_vmid):
    vmid = make_vm(
        root,
        "pve1",
        unique_vmid,
        name="files01",
        scsi1="local-lvm:1",
        net0="virtio,bridge=vmbr0",
    )
    archive = _backup(root, "pve1", vmid, pbs)
    volid = archive["volid"]
    assert volid.startswith(f"{pbs}:backup/vm/{vmid}/") and volid.endswith("Z")
    assert archive["format"] == "pbs-vm" and archive["subtype"] == "qemu"

    top = _list(root, "pve1", pbs, volid)
    assert set(top) == {"drive-scsi0.img.fidx", "drive-scsi1.img.fidx"}
    disk = top["drive-scsi0.img.fidx"]
    assert disk["type"] == "v" and disk["leaf"] == 0 and disk["size"] == 2 * 1024**3
    assert base64.b64decode(disk["filepath"]) == b"/drive-scsi0.img.fidx"

    part = _list(root, "pve1", pbs, volid, disk["filepath"])["part"]
    assert part["type"] == "v" and part["leaf"] == 0
    first = _list(root, "pve1", pbs, volid, part["filepath"])["1"]
    assert first["type"] == "d" and first["leaf"] == 0
    etc = _list(root, "pve1", pbs, volid, b64("/drive-scsi0.img.fidx/part/1/etc"))
    hostname = etc["hostname"]
    assert hostname["type"] == "f" and hostname["leaf"] == 1
    assert hostname["size"] == len(b"files01\n") and hostname["mtime"] == archive["ctime"]
    # The volume name alone (without the storage) is accepted too.
    again = _list(root, "pve1", pbs, volid.split(":", 1)[1].removeprefix("backup/"), "/")
    assert set(again) == set(top)
    # A data disk holds an empty filesystem.
    assert _list(root, "pve1", pbs, volid, b64("/drive-scsi1.img.fidx/part/1")) == {}

    file_ = root.get(
        f"/nodes/pve1/storage/{pbs}/file-restore/download",
        params={"volume": volid, "filepath": hostname["filepath"]},
    )
    assert file_.status_code == 200 and file_.content == b"files01\n"
    tasks = expect_data(
        root.get("/nodes/pve1/tasks", params={"typefilter": "pbs-download", "source": "all"})
    )
    upid = tasks[0]["upid"]
    assert root.wait(upid)["exitstatus"] == "OK"
    log = [line["t"] for line in expect_data(root.get(f"/nodes/pve1/tasks/{upid}/log"))]
    assert "Starting download of file: /drive-scsi0.img.fidx/part/1/etc/hostname" in log
    folder = root.get(
        f"/nodes/pve1/storage/{pbs}/file-restore/download",
        params={"volume": volid, "filepath": b64("/drive-scsi0.img.fidx/part/1/etc")},
    )
    assert folder.status_code == 200
    with zipfile.ZipFile(io.BytesIO(folder.content)) as zipped:
        assert zipped.read("etc/hostname") == b"files01\n"
        assert b"iface" in zipped.read("etc/network/interfaces")
    tarred = root.get(
        f"/nodes/pve1/storage/{pbs}/file-restore/download",
        params={"volume": volid, "filepath": b64("/drive-scsi0.img.fidx/part/1/etc"), "tar": 1},
    )
    plain = subprocess.run(
        ["zstd", "-d", "-c"], input=tarred.content, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(plain)) as tar:
        assert tar.extractfile("etc/hostname").read() == b"files01\n"

    # The guest changing later does not change what its backup holds.
    expect_data(root.put(f"/nodes/pve1/qemu/{vmid}/config", data={"name": "renamed"}))
    etc = _list(root, "pve1", pbs, volid, b64("/drive-scsi0.img.fidx/part/1/etc"))
    assert etc["hostname"]["size"] == len(b"files01\n")


def test_pbs_snapshot_of_a_container_lists_its_pxar_tree(root, pbs, unique_vmid):
    data = {
        "vmid": unique_vmid,
        "ostemplate": TEMPLATE,
        "hostname": "ct-files",
        "rootfs": "local-lvm:4",
        "net0": "name=eth0,bridge=vmbr0,ip=192.0.2.20/24,gw=192.0.2.1",
    }
    assert root.wait(expect_data(root.post("/nodes/pve2/lxc", data=data)))["exitstatus"] == "OK"
    archive = _backup(root, "pve2", unique_vmid, pbs)
    assert archive["volid"].startswith(f"{pbs}:backup/ct/{unique_vmid}/")
    assert archive["format"] == "pbs-ct" and archive["subtype"] == "lxc"
    top = _list(root, "pve2", pbs, archive["volid"])
    assert list(top) == ["root.pxar.didx"]
    assert top["root.pxar.didx"]["type"] == "d" and top["root.pxar.didx"]["size"] == 4 * 1024**3
    network = _list(root, "pve2", pbs, archive["volid"], b64("/root.pxar.didx/etc/network"))
    got = root.get(
        f"/nodes/pve2/storage/{pbs}/file-restore/download",
        params={"volume": archive["volid"], "filepath": network["interfaces"]["filepath"]},
    )
    assert b"address 192.0.2.20/24" in got.content and b"gateway 192.0.2.1" in got.content


def test_file_restore_errors(root, server, pbs, unique_vmid):
    vmid = make_vm(root, "pve1", unique_vmid)
    volid = _backup(root, "pve1", vmid, pbs)["volid"]
    url = f"/nodes/pve1/storage/{pbs}/file-restore/list"
    answer = root.get(
        "/nodes/pve1/storage/local/file-restore/list", params={"volume": "x", "filepath": "/"}
    )
    assert answer.status_code == 400
    assert answer.json()["errors"] == {"storage": "Only PBS storages supported for file-restore."}
    answer = root.get(
        url, params={"volume": "local:backup/vm/1/2020-01-01T00:00:00Z", "filepath": "/"}
    )
    assert answer.json()["errors"] == {"volume": f"storage ID mismatch (local != {pbs})."}
    expect_error(
        root.get(url, params={"volume": "vzdump-qemu-1.vma", "filepath": "/"}),
        500,
        "unable to parse PBS volume name 'backup/vzdump-qemu-1.vma'",
    )
    expect_error(
        root.get(url, params={"volume": f"backup/vm/{vmid}/2000-01-01T00:00:00Z", "filepath": "/"}),
        400,
        "snapshot does not exist",
    )
    expect_error(
        root.get(url, params={"volume": volid, "filepath": b64("/index.json.blob")}),
        500,
        "'index.json.blob' is not supported for file-restore",
    )
    expect_error(
        root.get(url, params={"volume": volid, "filepath": b64("/drive-scsi7.img.fidx")}),
        500,
        "manifest does not contain file 'drive-scsi7.img.fidx'",
    )
    expect_error(
        root.get(
            url, params={"volume": volid, "filepath": b64("/drive-scsi0.img.fidx/part/1/nope")}
        ),
        500,
        "no such file or directory",
    )
    expect_error(
        root.get(url, params={"volume": volid, "filepath": "%%%"}), 500, "Failed base64-decoding"
    )
    download = f"/nodes/pve1/storage/{pbs}/file-restore/download"
    expect_error(
        root.get(download, params={"volume": volid, "filepath": b64("/")}), 500, "cannot extract"
    )

    # A user with only Datastore.AllocateSpace on the storage also needs VM.Backup on the guest.
    userid = f"rst{unique_vmid}@pve"
    expect_data(root.post("/access/users", data={"userid": userid, "password": "rst-pw-123"}))
    acl = {"path": f"/storage/{pbs}", "users": userid, "roles": "PVEDatastoreUser"}
    expect_data(root.put("/access/acl", data=acl))
    try:
        with httpx.Client(base_url=server.base_url + "/api2/json", verify=False, timeout=30) as c:
            user = Session(c, userid, "rst-pw-123")
            params = {"volume": volid, "filepath": "/"}
            expect_error(user.get(url, params=params), 403, f"/vms/{vmid}")
            grant = {"path": f"/vms/{vmid}", "users": userid, "roles": "PVEVMAdmin"}
            expect_data(root.put("/access/acl", data=grant))
            assert user.get(url, params=params).status_code == 200
    finally:
        root.delete(f"/access/users/{userid}")


# -- import-metadata -------------------------------------------------------------------

OVF = """<?xml version="1.0" encoding="UTF-8"?>
<Envelope xmlns="http://schemas.dmtf.org/ovf/envelope/1"
  xmlns:ovf="http://schemas.dmtf.org/ovf/envelope/1"
  xmlns:rasd="http://schemas.dmtf.org/wbem/wscim/1/cim-schema/2/CIM_ResourceAllocationSettingData"
  xmlns:vmw="http://www.vmware.com/schema/ovf">
  <References><ovf:File ovf:id="file1" ovf:href="web01-disk1.vmdk"/></References>
  <DiskSection>
    <Disk ovf:diskId="vmdisk1" ovf:fileRef="file1" ovf:capacity="10"
          ovf:capacityAllocationUnits="byte * 2^30"/>
  </DiskSection>
  <VirtualSystem ovf:id="web01">
    <Name>web-01 (copy)</Name>
    <OperatingSystemSection ovf:id="96"/>
    <VirtualHardwareSection>
      <Item><rasd:InstanceID>1</rasd:InstanceID><rasd:ResourceType>3</rasd:ResourceType>
        <rasd:VirtualQuantity>2</rasd:VirtualQuantity></Item>
      <Item><rasd:InstanceID>2</rasd:InstanceID><rasd:ResourceType>4</rasd:ResourceType>
        <rasd:VirtualQuantity>2048</rasd:VirtualQuantity></Item>
      <Item><rasd:InstanceID>3</rasd:InstanceID><rasd:ResourceType>6</rasd:ResourceType></Item>
      <Item><rasd:InstanceID>4</rasd:InstanceID><rasd:ResourceType>17</rasd:ResourceType>
        <rasd:Parent>3</rasd:Parent><rasd:AddressOnParent>0</rasd:AddressOnParent>
        <rasd:HostResource>ovf:/disk/vmdisk1</rasd:HostResource></Item>
      <Item><rasd:InstanceID>5</rasd:InstanceID><rasd:ResourceType>10</rasd:ResourceType>
        <rasd:ResourceSubType>VmxNet3</rasd:ResourceSubType></Item>
      <Item><rasd:InstanceID>6</rasd:InstanceID><rasd:ResourceType>10</rasd:ResourceType>
        <rasd:ResourceSubType>PCNet32</rasd:ResourceSubType></Item>
      <vmw:Config vmw:key="firmware" vmw:value="efi"/>
    </VirtualHardwareSection>
  </VirtualSystem>
</Envelope>
"""


def _ova(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _metadata(root, url: str, volume: str) -> dict:
    # Not checked against the returns schema: it declares source as enum ['esxi'], but
    # PVE's DirPlugin answers the OVA/OVF volume name there (PVE does not verify returns).
    answer = root.get(url, params={"volume": volume})
    assert answer.status_code == 200, answer.text
    return answer.json()["data"]


def _upload(root, storage: str, name: str, data: bytes) -> None:
    answer = root.post(
        f"/nodes/pve1/storage/{storage}/upload",
        data={"content": "import"},
        files={"filename": (name, data)},
    )
    assert root.wait(expect_data(answer))["exitstatus"] == "OK"


@pytest.fixture
def imports(root, unique_vmid):
    name = f"imp{unique_vmid}"
    data = {"storage": name, "type": "dir", "path": f"/srv/{name}", "content": "import"}
    expect_data(root.post("/storage", data=data))
    yield name
    root.delete(f"/storage/{name}")


def test_import_metadata_reads_the_uploaded_ova_and_ovf(root, imports):
    disk = b"KDMV" + b"\0" * 4092
    _upload(root, imports, "web01.ova", _ova({"web01.ovf": OVF.encode(), "web01-disk1.vmdk": disk}))
    url = f"/nodes/pve1/storage/{imports}/import-metadata"
    answer = _metadata(root, url, "import/web01.ova")
    assert answer == {
        "type": "vm",
        "source": "import/web01.ova",
        "create-args": {
            "name": "web-01copy",
            "cores": "2",
            "memory": "2048",
            "ostype": "l26",
            "bios": "ovmf",
            "boot": "order=scsi0",
        },
        "disks": {
            "scsi0": {
                "volid": f"{imports}:import/web01.ova/web01-disk1.vmdk",
                "size": 10 * 1024**3,
            },
            "efidisk0": 1,
        },
        "warnings": [
            {"type": "ova-needs-extracting"},
            {"type": "efi-state-lost", "key": "bios", "value": "ovmf"},
        ],
        "net": {"net0": {"model": "vmxnet3"}, "net1": {"model": "e1000"}},
    }

    # A bare OVF needs its disk beside it; the disk's own size counts then.
    _upload(root, imports, "web01.ovf", OVF.encode())
    expect_error(
        root.get(url, params={"volume": "import/web01.ovf"}),
        500,
        f"error parsing web01-disk1.vmdk, file seems not to exist at /srv/{imports}/import/web01-disk1.vmdk",
    )
    _upload(root, imports, "web01-disk1.vmdk", disk)
    answer = _metadata(root, url, "import/web01.ovf")
    assert answer["disks"]["scsi0"] == {"volid": f"{imports}:import/web01-disk1.vmdk", "size": 4096}
    assert answer["warnings"] == [{"type": "efi-state-lost", "key": "bios", "value": "ovmf"}]

    _upload(root, imports, "broken.ovf", b"<Envelope><oops></Envelope>")
    expect_error(root.get(url, params={"volume": "import/broken.ovf"}), 500, "parser error")
    _upload(root, imports, "empty.ova", _ova({"readme.txt": b"no descriptor"}))
    expect_error(root.get(url, params={"volume": "import/empty.ova"}), 500, "failed: exit code 2")


def test_import_metadata_refusals(root, imports):
    url = f"/nodes/pve1/storage/{imports}/import-metadata"
    cases = {
        "import/web01-disk1.vmdk": "invalid format",
        "iso/debian.iso": "invalid content type 'iso'",
        "not a volume": "unable to parse directory volume name 'not a volume'",
        "import/missing.ovf": 'Could not create file parser context for file "/srv/',
    }
    for volume, message in cases.items():
        expect_error(root.get(url, params={"volume": volume}), 500, message)
    expect_error(
        root.get("/nodes/pve1/storage/local-lvm/import-metadata", params={"volume": "x"}),
        500,
        "storage does not support the importer API",
    )
    esxi = f"esx{uuid.uuid4().hex[:6]}"
    data = {
        "storage": esxi,
        "type": "esxi",
        "server": "esx.example.test",
        "username": "root",
        "password": "pw",
    }
    expect_data(root.post("/storage", data=data))
    try:
        url = f"/nodes/pve1/storage/{esxi}/import-metadata"
        expect_error(
            root.get(url, params={"volume": "ha-datacenter/ds1/web/web.vmdk"}),
            500,
            "does not look like an importable vm config",
        )
        expect_error(
            root.get(url, params={"volume": "ha-datacenter/ds1/web/web.vmx"}),
            500,
            f"storage '{esxi}' is not activated",
        )
    finally:
        root.delete(f"/storage/{esxi}")


# -- identity (9.x) ----------------------------------------------------------------------


def test_storage_identity_names_the_configured_storage(root, pbs):
    template = "/nodes/{node}/storage/{storage}/identity"
    assert expect_data(root.get(f"/nodes/pve1/storage/{pbs}/identity"), template) == {
        "id": pbs,
        "type": "pbs",
    }
    assert expect_data(root.get("/nodes/pve2/storage/local-lvm/identity"), template) == {
        "id": "local-lvm",
        "type": "lvmthin",
    }
    expect_error(root.get("/nodes/pve1/storage/nosuch/identity"), 500, "does not exist")


# -- OCI registries (9.x) ------------------------------------------------------------------


def _blob(data: bytes) -> tuple[str, bytes]:
    return "sha256:" + hashlib.sha256(data).hexdigest(), data


@pytest.fixture(scope="module")
def registry():
    """A tiny OCI distribution registry on 127.0.0.1 (tags list, manifests, blobs)."""
    config = _blob(b'{"architecture":"amd64","os":"linux","config":{"Cmd":["/bin/sh"]}}')
    layer = _blob(b"layer-bytes-" * 100)
    manifest_doc = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config[0],
            "size": len(config[1]),
        },
        "layers": [
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar",
                "digest": layer[0],
                "size": len(layer[1]),
            }
        ],
    }
    manifest = _blob(json.dumps(manifest_doc).encode())
    bad_doc = {
        **manifest_doc,
        "layers": [{**manifest_doc["layers"][0], "digest": "sha256:" + "0" * 64}],
    }
    bad = _blob(json.dumps(bad_doc).encode())
    index_doc = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                "mediaType": manifest_doc["mediaType"],
                "digest": "sha256:" + "1" * 64,
                "size": 1,
                "platform": {"os": "linux", "architecture": "arm64"},
            },
            {
                "mediaType": manifest_doc["mediaType"],
                "digest": manifest[0],
                "size": len(manifest[1]),
                "platform": {"os": "linux", "architecture": "amd64"},
            },
        ],
    }
    index = _blob(json.dumps(index_doc).encode())
    manifests = {
        "1.0": (manifest_doc["mediaType"], manifest[1]),
        "multi": (index_doc["mediaType"], index[1]),
        "bad": (manifest_doc["mediaType"], bad[1]),
        manifest[0]: (manifest_doc["mediaType"], manifest[1]),
    }
    blobs = {config[0]: config[1], layer[0]: layer[1], "sha256:" + "0" * 64: b"tampered"}

    class Registry(http.server.BaseHTTPRequestHandler):
        def log_message(self, *_args):
            pass

        def _send(self, status, body=b"", kind="application/json"):
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            parts = self.path.split("?")[0].split("/")
            if parts[:2] != ["", "v2"]:
                return self._send(404)
            repo, kind, ref = "/".join(parts[2:-2]), parts[-2], parts[-1]
            if repo != "tools/alpine":
                return self._send(404, b'{"errors":[{"code":"NAME_UNKNOWN"}]}')
            if kind == "tags" and ref == "list":
                tags = ["1.0", "bad", "multi"]
                return self._send(200, json.dumps({"name": repo, "tags": tags}).encode())
            if kind == "manifests" and ref in manifests:
                media, body = manifests[ref]
                return self._send(200, body, media)
            if kind == "blobs" and ref in blobs:
                return self._send(200, blobs[ref], "application/octet-stream")
            return self._send(404)

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Registry)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{httpd.server_address[1]}", len(config[1]) + len(layer[1])
    httpd.shutdown()
    httpd.server_close()


def test_oci_repo_tags_from_a_reachable_registry_only(root, registry):
    host, _ = registry
    url = "/nodes/pve1/query-oci-repo-tags"
    tags = expect_data(
        root.get(url, params={"reference": f"{host}/tools/alpine"}),
        "/nodes/{node}/query-oci-repo-tags",
    )
    assert tags == ["1.0", "bad", "multi"]
    expect_error(
        root.get(url, params={"reference": f"{host}/tools/nosuch"}),
        500,
        "Error listing repository tags",
    )
    expect_error(
        root.get(url, params={"reference": "registry.example.test/tools/alpine"}),
        500,
        "pinging container registry registry.example.test",
    )
    expect_error(
        root.get(url, params={"reference": "alpine"}), 500, "pinging container registry docker.io"
    )


def test_oci_registry_pull_stores_a_container_template(root, registry):
    host, blob_bytes = registry
    url = "/nodes/pve1/storage/local/oci-registry-pull"
    upid = expect_data(root.post(url, data={"reference": f"{host}/tools/alpine:1.0"}))
    assert upid.split(":")[5:7] == ["ociregistrypull", "alpine_1.0.tar"]
    assert root.wait(upid)["exitstatus"] == "OK"
    content = expect_data(
        root.get("/nodes/pve1/storage/local/content", params={"content": "vztmpl"})
    )
    [pulled] = [v for v in content if v["volid"] == "local:vztmpl/alpine_1.0.tar"]
    assert pulled["size"] > blob_bytes and pulled["format"] == "tar"
    expect_error(
        root.post(url, data={"reference": f"{host}/tools/alpine:1.0"}),
        500,
        "refusing to override existing file 'alpine_1.0.tar'",
    )
    # An index resolves to its linux/amd64 image; filename names the template.
    name = f"multi{uuid.uuid4().hex[:6]}"
    upid = expect_data(
        root.post(url, data={"reference": f"{host}/tools/alpine:multi", "filename": name})
    )
    assert root.wait(upid)["exitstatus"] == "OK"
    volume = f"local:vztmpl/{name}.tar"
    attributes = expect_data(root.get(f"/nodes/pve1/storage/local/content/{volume}"))
    assert attributes["size"] == pulled["size"]
    for volid in ("local:vztmpl/alpine_1.0.tar", volume):
        root.wait(expect_data(root.delete(f"/nodes/pve1/storage/local/content/{volid}")))

    failures = {
        f"{host}/tools/alpine:bad": "Digest did not match",
        f"{host}/tools/alpine:2.0": "manifest unknown",
        "registry.example.test/tools/alpine:1.0": "pinging container registry registry.example.test",
    }
    for reference, logged in failures.items():
        upid = expect_data(
            root.post(url, data={"reference": reference, "filename": f"f{uuid.uuid4().hex[:6]}"})
        )
        status = root.wait(upid)
        assert status["exitstatus"].startswith(
            f"command 'skopeo copy docker://{reference} oci-archive:"
        )
        assert status["exitstatus"].endswith("failed: exit code 1")
        log = [line["t"] for line in expect_data(root.get(f"/nodes/pve1/tasks/{upid}/log"))]
        assert any(logged in line for line in log), log
    expect_error(
        root.post(
            "/nodes/pve1/storage/local-lvm/oci-registry-pull",
            data={"reference": f"{host}/tools/alpine:1.0"},
        ),
        500,
        "can't upload to storage type 'lvmthin', not a file based storage!",
    )
