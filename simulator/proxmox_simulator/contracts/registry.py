"""Registry of imported contract snapshots in the data directory.

Layout: ``<data_dir>/contracts/<version>/{contract.json, manifest.json, raw/<file>}``.
Snapshots are immutable: re-importing a version with different content is
refused, so a manifest's checksums always describe what is on disk.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path

from proxmox_simulator.contracts.model import Contract, canonical_json
from proxmox_simulator.contracts.parser import ParseResult
from proxmox_simulator.contracts.sources import RawArtifact, parse_artifact, read_fakepve

PARSER_VERSION = "1"


class UnknownContract(ValueError):
    """A contract named on the command line or in the settings that cannot be resolved."""


class SnapshotConflict(ValueError):
    pass


def build_manifest(artifact: RawArtifact, result: ParseResult) -> dict:
    contract = result.contract
    return {
        "version": contract.version,
        "major": contract.major,
        "source": {
            "kind": artifact.source_kind,
            "location": artifact.location,
            "filename": artifact.filename,
            "sha256": artifact.sha256,
            "bytes": len(artifact.data),
        },
        "parser": {"version": PARSER_VERSION, "warnings": result.warnings},
        "counts": contract.counts(),
        "normalized_sha256": contract.sha256(),
    }


class ContractRegistry:
    def __init__(self, data_dir: Path) -> None:
        self.root = Path(data_dir) / "contracts"

    def _dir(self, version: str) -> Path:
        if not version or "/" in version or version.startswith("."):
            raise ValueError(f"invalid contract version {version!r}")
        return self.root / version

    def store(self, artifact: RawArtifact, result: ParseResult) -> dict:
        contract = result.contract
        target = self._dir(contract.version)
        manifest = build_manifest(artifact, result)
        existing = target / "manifest.json"
        if existing.exists():
            old = json.loads(existing.read_text())
            if old["normalized_sha256"] != manifest["normalized_sha256"]:
                raise SnapshotConflict(
                    f"version {contract.version} already imported with different content"
                )
            return old
        manifest["imported_at"] = datetime.now(UTC).isoformat(timespec="seconds")
        staging = target.with_name(f".{contract.version}.tmp")
        (staging / "raw").mkdir(parents=True, exist_ok=True)
        # A package-provided artifact stays in its package; only record its checksum.
        if artifact.source_kind != "package":
            (staging / "raw" / artifact.filename).write_bytes(artifact.data)
        (staging / "contract.json").write_bytes(contract.to_json())
        (staging / "manifest.json").write_bytes(canonical_json(manifest))
        staging.rename(target)
        return manifest

    def versions(self) -> list[dict]:
        if not self.root.exists():
            return []
        manifests = [json.loads(p.read_text()) for p in self.root.glob("*/manifest.json")]
        return sorted(manifests, key=lambda m: _version_key(m["version"]))

    def manifest(self, version: str) -> dict:
        path = self._dir(version) / "manifest.json"
        if not path.exists():
            raise KeyError(version)
        return json.loads(path.read_text())

    def load(self, version: str) -> Contract:
        raw = (self._dir(version) / "contract.json").read_bytes()
        manifest = self.manifest(version)
        if hashlib.sha256(raw).hexdigest() != manifest["normalized_sha256"]:
            raise SnapshotConflict(f"snapshot {version} does not match its manifest checksum")
        return Contract.from_dict(json.loads(raw))


def _version_key(version: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in version.replace("-", ".").split("."))


def resolve_contract(spec: str, data_dir: Path) -> Contract:
    """Resolve the serve-time contract: "fakepve", a registry version, or a file path."""
    from proxmox_simulator.contracts.sources import (
        FAKEPVE_SCHEMA_VERSION,
        guess_version,
        read_file,
    )

    if spec in ("fakepve", "9", "bundled"):
        return parse_artifact(read_fakepve(), FAKEPVE_SCHEMA_VERSION).contract
    registry = ContractRegistry(data_dir)
    if "/" not in spec and not spec.startswith("."):
        try:
            return registry.load(spec)
        except (KeyError, FileNotFoundError):
            pass  # not imported: maybe a file in the working directory
    path = Path(spec)
    if path.exists():
        version = guess_version(path.name)
        if version is None:
            raise UnknownContract(
                f"cannot tell the PVE version of {path}; import it with --version"
            )
        return parse_artifact(read_file(path), version).contract
    raise UnknownContract(
        f"unknown contract {spec!r}: not 'fakepve', an imported version or a file"
    )
