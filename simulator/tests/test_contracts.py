"""Contract plane: parsing, normalization, manifests, registry, diff, import limits."""

from __future__ import annotations

import json

import httpx
import pytest
from simtest_support import official_apidoc

from proxmox_simulator.contracts import sources
from proxmox_simulator.contracts.diff import diff_contracts
from proxmox_simulator.contracts.parser import ContractParseError, extract_schema_array
from proxmox_simulator.contracts.registry import (
    ContractRegistry,
    SnapshotConflict,
    resolve_contract,
)

EXPECTED = {
    "6.4-15": (338, 504),
    "7.4-16": (364, 540),
    "8.4.5": (398, 605),
}


def _official(version: str):
    return sources.read_file(official_apidoc(version))


@pytest.mark.parametrize("version", sorted(EXPECTED))
def test_official_viewer_counts(version):
    result = sources.parse_artifact(_official(version), version)
    paths, methods = EXPECTED[version]
    assert result.contract.counts() == {"paths": paths, "methods": methods}
    assert result.warnings == []
    assert result.contract.major == int(version[0])


def test_fakepve_major_nine_counts():
    result = sources.parse_artifact(sources.read_fakepve(), sources.FAKEPVE_SCHEMA_VERSION)
    assert result.contract.counts() == {"paths": 449, "methods": 680}
    assert result.contract.major == 9


def test_normalized_model_keeps_declared_facts():
    contract = sources.parse_artifact(_official("8.4.5"), "8.4.5").contract
    create = contract.endpoint("/nodes/{node}/qemu", "POST")
    params = {p.name: p for p in create.parameters}
    assert params["vmid"].type == "integer" and not params["vmid"].optional
    assert params["vmid"].minimum == 100
    assert params["net[n]"].indexed_stem == "net"
    assert params["ostype"].enum and "l26" in params["ostype"].enum
    assert create.permissions["user"] == "all"
    assert create.protected is True and create.allowtoken is True
    # Unknown source keys survive in "extra" (e.g. the description).
    assert "description" in create.extra
    volume = contract.endpoint("/nodes/{node}/storage/{storage}/content/{volume}", "GET")
    assert volume.path_params == ("node", "storage", "volume")


def test_normalized_json_is_deterministic():
    artifact = _official("7.4-16")
    first = sources.parse_artifact(artifact, "7.4-16").contract
    second = sources.parse_artifact(artifact, "7.4-16").contract
    assert first.to_json() == second.to_json()
    assert first.sha256() == second.sha256()
    assert json.loads(first.to_json())["version"] == "7.4-16"


def test_extracts_array_without_executing_and_ignores_brackets_in_strings():
    js = 'var pveapi = [{"path": "/a", "text": "a ] tricky [ string", "info": {}}];\nfunction x() { return [1]; }'
    assert extract_schema_array(js)[0]["text"] == "a ] tricky [ string"
    with pytest.raises(ContractParseError):
        extract_schema_array("const somethingElse = [1, 2];")
    with pytest.raises(ContractParseError):
        extract_schema_array("const apiSchema = [{broken json}];")


def test_registry_stores_manifest_and_refuses_conflicting_reimport(tmp_path):
    registry = ContractRegistry(tmp_path)
    artifact = _official("6.4-15")
    result = sources.parse_artifact(artifact, "6.4-15")
    manifest = registry.store(artifact, result)
    assert manifest["counts"] == {"paths": 338, "methods": 504}
    assert (
        manifest["source"]["sha256"]
        == "374156fc7188fb23c40982d0ff63fb7dce601f80f7319032bbb94882f47af69f"
    )
    assert manifest["normalized_sha256"] == result.contract.sha256()
    assert manifest["parser"]["warnings"] == []
    # Idempotent for identical content.
    assert registry.store(artifact, result)["normalized_sha256"] == manifest["normalized_sha256"]
    other = sources.parse_artifact(_official("7.4-16"), "6.4-15")
    with pytest.raises(SnapshotConflict):
        registry.store(artifact, other)
    assert [m["version"] for m in registry.versions()] == ["6.4-15"]
    loaded = registry.load("6.4-15")
    assert loaded.counts() == {"paths": 338, "methods": 504}
    # A tampered snapshot no longer matches its manifest.
    (tmp_path / "contracts" / "6.4-15" / "contract.json").write_text(
        '{"version": "x", "endpoints": []}'
    )
    with pytest.raises(SnapshotConflict):
        registry.load("6.4-15")


def test_semantic_diff_between_majors():
    old = sources.parse_artifact(_official("7.4-16"), "7.4-16").contract
    new = sources.parse_artifact(_official("8.4.5"), "8.4.5").contract
    diff = diff_contracts(old, new)
    assert len(new.paths) - len(old.paths) == len(diff.added_paths) - len(diff.removed_paths)
    assert "/cluster/mapping/pci" in diff.added_paths
    assert any(m.endswith(" /cluster/mapping/pci") for m in diff.added_methods)
    changed = diff.parameters["POST /nodes/{node}/qemu"]
    assert changed["added"] or changed["changed"]
    assert diff_contracts(new, new).to_dict()["added_paths"] == []


def test_resolve_contract_by_version_file_and_package(tmp_path):
    assert resolve_contract("fakepve", tmp_path).counts()["methods"] == 680
    path = official_apidoc("8.4.5")
    assert resolve_contract(str(path), tmp_path).version == "8.4.5"
    with pytest.raises(ValueError):
        resolve_contract("no-such-version", tmp_path)


# -- import --url refusals (no network: a mock transport stands in) -------------


def _transport(handler):
    return httpx.MockTransport(handler)


def test_url_import_refuses_plain_http_and_foreign_hosts():
    with pytest.raises(sources.SourceRefused, match="https"):
        sources.fetch_url("http://pve.proxmox.com/pve-docs/api-viewer/apidoc.js")
    with pytest.raises(sources.SourceRefused, match="allowlist"):
        sources.fetch_url("https://evil.example.com/apidoc.js")
    with pytest.raises(sources.SourceRefused, match="credentials"):
        sources.fetch_url("https://user:pw@pve.proxmox.com/apidoc.js")


def test_url_import_rechecks_every_redirect_hop():
    def handler(request):
        return httpx.Response(302, headers={"location": "https://mirror.example.net/apidoc.js"})

    with pytest.raises(sources.SourceRefused, match="allowlist"):
        sources.fetch_url("https://pve.proxmox.com/a.js", transport=_transport(handler))


def test_url_import_limits_redirect_count_and_size():
    hops = []

    def looping(request):
        hops.append(request.url)
        return httpx.Response(302, headers={"location": f"https://pve.proxmox.com/{len(hops)}.js"})

    with pytest.raises(sources.SourceRefused, match="redirected more than"):
        sources.fetch_url(
            "https://pve.proxmox.com/0.js", transport=_transport(looping), max_redirects=2
        )
    assert len(hops) == 3

    def big(request):
        return httpx.Response(200, content=b"x" * 2048)

    with pytest.raises(sources.SourceRefused, match="limit|bytes"):
        sources.fetch_url(
            "https://pve.proxmox.com/big.js", transport=_transport(big), max_bytes=1024
        )


def test_url_import_downloads_allowed_artifact():
    body = b'const apiSchema = [{"path": "/version", "text": "version", "info": {"GET": {"permissions": {"user": "all"}}}}];'

    def ok(request):
        assert request.url.host == "pve.proxmox.com"
        return httpx.Response(200, content=body)

    artifact = sources.fetch_url(
        "https://pve.proxmox.com/pve-docs/api-viewer/apidoc.js", transport=_transport(ok)
    )
    assert artifact.source_kind == "url"
    assert sources.parse_artifact(artifact, "9.0").contract.counts() == {"paths": 1, "methods": 1}


def test_url_import_retries_transient_failures_then_gives_up():
    calls = []

    def failing(request):
        calls.append(1)
        raise httpx.ConnectError("boom", request=request)

    with pytest.raises(sources.SourceRefused, match="after 2 attempts"):
        sources.fetch_url("https://pve.proxmox.com/a.js", transport=_transport(failing), attempts=2)
    assert len(calls) == 2


def test_url_import_limits_a_streamed_body_without_content_length():
    def chunked(request):
        # No Content-Length: only counting the streamed bytes can stop it.
        return httpx.Response(200, content=(b"x" * 512 for _ in range(8)))

    with pytest.raises(sources.SourceRefused, match="exceeded the 1024-byte limit"):
        sources.fetch_url(
            "https://pve.proxmox.com/big.js", transport=_transport(chunked), max_bytes=1024
        )


def test_gzip_artifact_may_not_expand_past_the_limit():
    import gzip

    bomb = sources.RawArtifact(gzip.compress(b"[" + b" " * 4096 + b"]"), "url", "x", "x.gz")
    assert len(bomb.data) < 1024
    with pytest.raises(sources.SourceRefused, match="decompresses to more than 1024 bytes"):
        sources.parse_artifact(bomb, "9.0", max_bytes=1024)
    # Within the limit it is read as before.
    assert sources.parse_artifact(bomb, "9.0", max_bytes=8192).contract.counts()["paths"] == 0


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://pve.proxmox.com/pve-docs/api-viewer/apidoc.js", "only https://"),
        ("https://169.254.169.254/latest/meta-data/", "not in the allowlist"),
        ("https://127.0.0.1:5432/apidoc.js", "not in the allowlist"),
        ("https://pve.proxmox.com@10.0.0.1/apidoc.js", "not in the allowlist"),
        ("https://pve.proxmox.com.evil.example/apidoc.js", "not in the allowlist"),
    ],
)
def test_cli_import_refuses_foreign_sources_in_one_line(tmp_path, url, reason):
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "proxmox_simulator.cli", "contract", "import", "--url", url],
        env={"PATH": "/usr/bin:/bin", "PROXMOX_SIMULATOR_DATA_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and reason in result.stderr, result.stderr
    assert not any(tmp_path.rglob("*.json"))  # nothing stored


def test_missing_official_schemas_fail_in_ci_and_skip_elsewhere(monkeypatch, tmp_path):
    """Without ../shared/pve-apidoc the apidoc-dependent tests must not pass silently in CI."""
    monkeypatch.setenv("PROXMOX_SIMULATOR_APIDOC_DIR", str(tmp_path))
    monkeypatch.setenv("CI", "1")
    with pytest.raises(pytest.fail.Exception, match="CI is set"):
        official_apidoc("8.4.5")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception):
        official_apidoc("8.4.5")
