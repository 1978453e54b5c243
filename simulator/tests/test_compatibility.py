"""Profiles, the recorder and compatibility reports.

A second simulator plays the "real" PVE: it answers from a contract that lacks
one declared method (``GET /nodes/{node}/dns``) and has one no document declares
(``GET /nodes/{node}/observed-extra``). The recorder walks the declared 9.2
contract against it; the simulator under test then answers per profile.
"""

from __future__ import annotations

import dataclasses
import json
import shutil

import httpx
import pytest
from simtest_support import ROOT_PASSWORD, Session

from proxmox_simulator.api.app import create_app
from proxmox_simulator.cli import main
from proxmox_simulator.contracts.model import Contract, Endpoint
from proxmox_simulator.contracts.registry import resolve_contract
from proxmox_simulator.server import SimulatorServer

MISSING = "/nodes/{node}/dns"
EXTRA = "/nodes/{node}/observed-extra"
ONLY = ("/version", "/nodes", "/nodes/{node}", MISSING, "/nodes/{node}/hosts", "/cluster/status")


def _real_contract() -> Contract:
    declared = resolve_contract("fakepve", None)
    extra = Endpoint(
        path=EXTRA,
        method="GET",
        returns={"type": "object", "properties": {"answer": {"type": "integer"}}},
        permissions={"user": "all"},
    )
    kept = tuple(e for e in declared.endpoints if e.key != (MISSING, "GET"))
    return Contract(version=declared.version, endpoints=(*kept, extra))


@pytest.fixture(scope="module")
def real_pve(settings, seeded, tmp_path_factory):
    real = dataclasses.replace(settings, data_dir=tmp_path_factory.mktemp("real-pve"))
    with SimulatorServer(real, tls=True, app=create_app(real, contract=_real_contract())) as srv:
        yield srv, real.data_dir / "tls" / "pve-ssl.pem"


def _record(data_dir, real_pve, monkeypatch, *extra, only=ONLY):
    server, cert = real_pve
    monkeypatch.setenv("PVESIM_RECORD_PASSWORD", ROOT_PASSWORD)
    args = ["--data-dir", str(data_dir), "contract", "record", "--url", server.base_url]
    args += ["--username", "root@pam", "--password-env", "PVESIM_RECORD_PASSWORD"]
    args += ["--ca-cert", str(cert), *extra]
    for template in only:
        args += ["--only", template]
    return main(args)


@pytest.fixture(scope="module")
def recorded(real_pve, tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("observed")
    with pytest.MonkeyPatch.context() as mp, _capture() as out:
        code = _record(data_dir, real_pve, mp, "--allow-network", "--allow-host", "127.0.0.1")
    assert code == 0, out.text
    return data_dir, json.loads(out.text)


class _capture:
    """stdout of a CLI call inside a module fixture (capsys is function-scoped)."""

    def __enter__(self):
        import contextlib
        import io

        self._buffer = io.StringIO()
        self._redirect = contextlib.redirect_stdout(self._buffer)
        self._redirect.__enter__()
        return self

    def __exit__(self, *exc):
        self._redirect.__exit__(*exc)
        self.text = self._buffer.getvalue()


def test_recording_is_sanitized_checksummed_and_kept_apart(recorded, settings):
    import hashlib

    data_dir, manifest = recorded
    assert manifest["major"] == 9 and manifest["version"] == "9.2.12"
    folder = data_dir / "observations" / "9" / manifest["id"]
    body = (folder / "observations.json").read_bytes()
    assert hashlib.sha256(body).hexdigest() == manifest["sha256"]
    assert manifest["id"].endswith(manifest["sha256"][:12])
    assert json.loads((folder / "manifest.json").read_text()) == manifest
    # Declared snapshots are untouched: nothing was written into the contract registry.
    assert not (data_dir / "contracts").exists()
    observations = {(o["method"], o["path"]): o for o in json.loads(body)["observations"]}
    assert observations[("GET", MISSING)]["present"] is False
    assert observations[("GET", EXTRA)]["undeclared"] is True
    assert observations[("GET", "/nodes/{node}/hosts")]["returns"]["type"] == "object"
    text = body.decode()
    # Identities and secrets of the observed server are gone: nodes, the cluster, the password.
    for secret in ('"pve1"', "pve2", "pvesim", ROOT_PASSWORD, "PVE:root@pam"):
        assert secret not in text, secret
    assert '"node":"node1"' in text
    assert manifest["provenance"]["limits"]["max_requests"] == 300


def test_profiles_decide_what_the_simulator_answers(recorded, settings):
    data_dir, manifest = recorded
    lab = dataclasses.replace(settings, data_dir=data_dir, lab_enabled=True, profile="observed")
    with (
        SimulatorServer(lab, tls=True) as sim,
        httpx.Client(base_url=sim.base_url, verify=False, timeout=30) as admin,
        httpx.Client(base_url=sim.base_url + "/api2/json", verify=False, timeout=30) as client,
    ):
        api = Session(client)

        def answers():
            return (
                api.get("/nodes/pve1/dns").status_code,
                api.get("/nodes/pve1/observed-extra").status_code,
            )

        # observed: the real server's behaviour wins (no dns, an extra method)
        assert answers() == (501, 200)
        assert api.get("/nodes/pve1/observed-extra").json()["data"] == {"answer": 0}
        document = admin.get("/openapi.json").json()
        assert document["paths"]["/api2/json" + EXTRA]["get"]["x-pve-observed"] == 1
        assert "get" not in document["paths"]["/api2/json" + MISSING]  # its PUT stays
        report = admin.get("/admin/compatibility.json").json()
        assert report["profile"] == "observed" and report["observed"]["id"] == manifest["id"]
        assert report["differing"]["declared_but_absent"] == [f"GET {MISSING}"]
        assert report["differing"]["observed_not_declared"] == [f"GET {EXTRA}"]
        assert "GET /nodes/{node}/hosts" not in report["handled"]["unhandled_501"]
        page = admin.get("/admin/compatibility")
        assert page.status_code == 200 and f"GET {MISSING}" in page.text

        # strict-docs: the documentation only
        assert admin.post("/ui/api/contract/apply", data={"profile": "strict-docs"}).is_success
        assert answers() == (200, 501)
        assert admin.get("/admin/compatibility.json").json()["observed"] is None
        # hybrid: documented methods stay, observations add what the documents lack
        assert admin.post("/ui/api/contract/apply", data={"profile": "hybrid"}).is_success
        assert answers() == (200, 200)


def test_cli_report_and_diff_against_the_observations(recorded, capsys):
    data_dir, _ = recorded
    data = ["--data-dir", str(data_dir)]
    assert main([*data, "contract", "report", "--major", "9", "--profile", "observed"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["declared"]["methods"] == 680
    assert report["observed"]["absent"] == 1 and report["observed"]["undeclared"] == 1
    assert report["differing"]["counts"]["observed_not_declared"] == 1
    assert main([*data, "contract", "report", "--major", "8"]) == 2
    assert "no contract of major 8" in capsys.readouterr().err
    assert main([*data, "contract", "diff", "fakepve", "observed:9"]) == 0
    diff = json.loads(capsys.readouterr().out)
    assert f"GET {EXTRA}" in diff["added_methods"]
    assert f"GET {MISSING}" in diff["removed_methods"]
    assert main([*data, "contract", "observations"]) == 0
    assert "9\t" in capsys.readouterr().out


def test_importer_verifies_checksums(recorded, tmp_path, capsys):
    data_dir, manifest = recorded
    source = data_dir / "observations" / "9" / manifest["id"]
    copy = tmp_path / "copy"
    shutil.copytree(source, copy)
    target = ["--data-dir", str(tmp_path / "other")]
    assert main([*target, "contract", "import-observed", str(copy)]) == 0
    assert json.loads(capsys.readouterr().out)["id"] == manifest["id"]
    (copy / "observations.json").write_text((copy / "observations.json").read_text() + " ")
    assert main([*target, "contract", "import-observed", str(copy)]) == 2
    assert "does not match its manifest" in capsys.readouterr().err


def test_recorder_needs_opt_in_https_and_an_allowlisted_host(
    real_pve, tmp_path, monkeypatch, capsys
):
    server, _ = real_pve
    ok = ("--allow-network", "--allow-host", "127.0.0.1")
    assert _record(tmp_path, real_pve, monkeypatch, "--allow-host", "127.0.0.1") == 2
    assert "--allow-network" in capsys.readouterr().err
    assert _record(tmp_path, real_pve, monkeypatch, "--allow-network") == 2
    assert "allowlist" in capsys.readouterr().err
    assert (
        _record(tmp_path, real_pve, monkeypatch, "--allow-network", "--allow-host", "pve.example")
        == 2
    )
    assert "not in the allowlist" in capsys.readouterr().err
    plain = server.base_url.replace("https://", "http://")
    monkeypatch.setenv("PVESIM_RECORD_PASSWORD", ROOT_PASSWORD)
    args = ["--data-dir", str(tmp_path), "contract", "record", "--url", plain, *ok]
    assert main([*args, "--username", "root@pam", "--password-env", "PVESIM_RECORD_PASSWORD"]) == 2
    assert "HTTPS only" in capsys.readouterr().err
    assert not (tmp_path / "observations").exists()
    # Limits end a recording early and say so in the manifest.
    assert _record(tmp_path, real_pve, monkeypatch, *ok, "--max-requests", "3") == 0
    assert "request budget of 3" in json.loads(capsys.readouterr().out)["provenance"]["truncated"]
    assert _record(tmp_path, real_pve, monkeypatch, *ok, "--max-bytes", "200") == 0
    assert "over 200 bytes" in json.loads(capsys.readouterr().out)["provenance"]["truncated"]
