"""Files onto storages through proxmoxer: multipart upload, download-url from a
loopback HTTP server (the only network the simulator reaches), aplinfo."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import threading
from pathlib import Path

import pytest
from proxmoxer.core import ResourceException
from proxmoxer.tools import Tasks
from simtest_support import close_proxmoxer, proxmoxer_client


@pytest.fixture(scope="module")
def prox(server):
    api = proxmoxer_client(server)
    yield api
    close_proxmoxer(api)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("transfer")


@pytest.fixture(scope="module")
def web(files):
    """A plain HTTP server on 127.0.0.1 serving ``files``."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(files), **kwargs)

        def log_message(self, *_args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def _finish(prox, upid) -> tuple[dict, list[str]]:
    status = Tasks.blocking_status(prox, upid, polling_interval=0.02)
    log = Tasks.decode_log(prox.nodes(status["node"]).tasks(upid).log.get())
    return status, log.splitlines()


def _content(prox, storage: str, content: str, node: str = "pve1") -> dict[str, dict]:
    return {v["volid"]: v for v in prox.nodes(node).storage(storage).content.get(content=content)}


def _file(files: Path, name: str, size: int, seed: bytes = b"pvesim") -> Path:
    path = files / name
    path.write_bytes((seed * (size // len(seed) + 1))[:size])
    return path


def test_multipart_upload_of_iso_vztmpl_and_import(prox, files, unique_vmid):
    local = prox.nodes("pve1").storage("local")
    iso = _file(files, f"tools-{unique_vmid}.iso", 70_000)
    with iso.open("rb") as handle:
        upid = local.upload.post(content="iso", filename=handle)
    assert Tasks.decode_upid(upid)["type"] == "imgcopy" and Tasks.decode_upid(upid)["id"] == ""
    status, log = _finish(prox, upid)
    assert status["exitstatus"] == "OK", log
    assert log[0].startswith("starting file import from: /var/tmp/pveupload-")
    assert f"target file: /var/lib/vz/template/iso/{iso.name}" in log
    assert "file size is: 70000" in log and "finished file import successfully" in log
    volume = _content(prox, "local", "iso")[f"local:iso/{iso.name}"]
    assert (volume["size"], volume["format"]) == (70_000, "iso")
    # Not on another node's local storage: the file went to pve1 only.
    assert f"local:iso/{iso.name}" not in _content(prox, "local", "iso", node="pve2")

    # The same name again replaces the file (PVE overwrites uploads).
    iso.write_bytes(b"x" * 1234)
    with iso.open("rb") as handle:
        assert _finish(prox, local.upload.post(content="iso", filename=handle))[0]["exitstatus"]
    assert _content(prox, "local", "iso")[f"local:iso/{iso.name}"]["size"] == 1234

    # Checksums are verified against the bytes sent.
    digest = hashlib.sha256(iso.read_bytes()).hexdigest()
    with iso.open("rb") as handle:
        status, log = _finish(
            prox,
            local.upload.post(
                content="iso", filename=handle, checksum=digest, **{"checksum-algorithm": "sha256"}
            ),
        )
    assert status["exitstatus"] == "OK" and "calculating checksum...OK, checksum verified" in log
    with iso.open("rb") as handle:
        status, _log = _finish(
            prox,
            local.upload.post(
                content="iso",
                filename=handle,
                checksum="0" * 64,
                **{"checksum-algorithm": "sha256"},
            ),
        )
    assert status["exitstatus"] == f"checksum mismatch: got '{digest}' != expect '{'0' * 64}'"

    # Container templates; file names are normalized as PVE does.
    tmpl = _file(files, f"alpine 3.20 ({unique_vmid}).tar.xz", 4096)
    with tmpl.open("rb") as handle:
        assert (
            _finish(prox, local.upload.post(content="vztmpl", filename=handle))[0]["exitstatus"]
            == "OK"
        )
    name = f"local:vztmpl/alpine_3.20__{unique_vmid}_.tar.xz"
    assert _content(prox, "local", "vztmpl")[name]["format"] == "txz"

    # Refusals, in PVE's words.
    with iso.open("rb") as handle, pytest.raises(ResourceException, match="wrong file extension"):
        local.upload.post(content="vztmpl", filename=handle)
    with iso.open("rb") as handle, pytest.raises(ResourceException) as enum:
        local.upload.post(content="snippets", filename=handle)
    assert enum.value.status_code == 400 and "content" in str(enum.value)
    with iso.open("rb") as handle, pytest.raises(ResourceException, match="storage type 'lvmthin'"):
        prox.nodes("pve1").storage("local-lvm").upload.post(content="iso", filename=handle)
    disk = _file(files, f"cloud-{unique_vmid}.qcow2", 8192)
    with disk.open("rb") as handle, pytest.raises(ResourceException, match="not support 'import'"):
        local.upload.post(content="import", filename=handle)
    with pytest.raises(ResourceException, match="missing temporary file name"):
        local.upload.post(content="iso", filename="no-file-part.iso")

    # import content (PVE 8.2+) on a storage configured for it.
    store = f"imp{unique_vmid}"
    prox.storage.post(storage=store, type="dir", path=f"/srv/{store}", content="import")
    try:
        with disk.open("rb") as handle:
            upid = prox.nodes("pve1").storage(store).upload.post(content="import", filename=handle)
        assert _finish(prox, upid)[0]["exitstatus"] == "OK"
        volume = _content(prox, store, "import")[f"{store}:import/{disk.name}"]
        assert (volume["size"], volume["format"]) == (8192, "qcow2")
        upid = prox.nodes("pve1").storage(store).content(f"{store}:import/{disk.name}").delete()
        assert _finish(prox, upid)[0]["exitstatus"] == "OK"
    finally:
        prox.storage(store).delete()


def test_download_url_fetches_only_what_the_simulator_can_reach(prox, files, web, unique_vmid):
    local = prox.nodes("pve2").storage("local")
    source = _file(files, f"netinst-{unique_vmid}.iso", 50_000, seed=b"iso9660")
    digest = hashlib.sha512(source.read_bytes()).hexdigest()
    url = f"{web}/{source.name}"
    upid = local("download-url").post(
        url=url,
        content="iso",
        filename=source.name,
        checksum=digest,
        **{"checksum-algorithm": "sha512"},
    )
    assert Tasks.decode_upid(upid)["type"] == "download"
    assert Tasks.decode_upid(upid)["id"] == source.name
    status, log = _finish(prox, upid)
    dest = f"/var/lib/vz/template/iso/{source.name}"
    assert status["exitstatus"] == "OK", log
    assert log[0] == f"downloading {url} to {dest}"
    assert "calculating checksum...OK, checksum verified" in log
    assert f"download of '{url}' to '{dest}' finished" in log
    assert _content(prox, "local", "iso", node="pve2")[f"local:iso/{source.name}"]["size"] == 50_000

    # An existing file is never overwritten by a download.
    status, _log = _finish(
        prox, local("download-url").post(url=url, content="iso", filename=source.name)
    )
    assert status["exitstatus"] == f"refusing to override existing file '{dest}'"

    # Compressed ISO images are decompressed on the way.
    packed = files / f"packed-{unique_vmid}.iso.gz"
    packed.write_bytes(gzip.compress(b"\0" * 30_000))
    name = f"unpacked-{unique_vmid}.iso"
    status, _log = _finish(
        prox,
        local("download-url").post(
            url=f"{web}/{packed.name}", content="iso", filename=name, compression="gz"
        ),
    )
    assert status["exitstatus"] == "OK"
    assert _content(prox, "local", "iso", node="pve2")[f"local:iso/{name}"]["size"] == 30_000

    # Failures end the task as wget's would; nothing appears.
    missing = f"absent-{unique_vmid}.iso"
    status, _log = _finish(
        prox, local("download-url").post(url=f"{web}/{missing}", content="iso", filename=missing)
    )
    assert status["exitstatus"].startswith("download failed: command 'wget --progress=dot:giga")
    assert status["exitstatus"].endswith("failed: exit code 8")
    outside = f"outside-{unique_vmid}.iso"
    status, log = _finish(
        prox,
        local("download-url").post(
            url=f"https://download.example.org/{outside}", content="iso", filename=outside
        ),
    )
    assert status["exitstatus"].endswith("failed: exit code 4")
    assert any("no network beyond loopback" in line for line in log)
    wrong = f"wrong-{unique_vmid}.iso"
    status, _log = _finish(
        prox,
        local("download-url").post(
            url=url, content="iso", filename=wrong, checksum="ab", **{"checksum-algorithm": "md5"}
        ),
    )
    assert status["exitstatus"].startswith("checksum mismatch: got '")
    isos = _content(prox, "local", "iso", node="pve2")
    assert not {f"local:iso/{n}" for n in (missing, outside, wrong)} & set(isos)

    with pytest.raises(ResourceException, match="not configured for content-type 'vztmpl'"):
        prox.nodes("pve2").storage("shared-nfs")("download-url").post(
            url=url, content="vztmpl", filename="x.tar.zst"
        )
    with pytest.raises(ResourceException, match="not a file based storage"):
        prox.nodes("pve2").storage("local-lvm")("download-url").post(
            url=url, content="iso", filename="x.iso"
        )
    with pytest.raises(ResourceException, match="wrong file extension"):
        local("download-url").post(url=url, content="iso", filename="x.txt")


def test_appliance_index_is_empty_without_network(prox):
    # pveam's index comes from download.proxmox.com; a node without network has none.
    assert prox.nodes("pve1").aplinfo.get() == []
    with pytest.raises(ResourceException, match="no such template") as refused:
        prox.nodes("pve1").aplinfo.post(
            storage="local", template="debian-12-standard_12.7-1_amd64.tar.zst"
        )
    assert refused.value.status_code == 400
