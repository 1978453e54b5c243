"""Observed behaviour of a real PVE endpoint, kept apart from the declared contracts.

Layout, beside the declared snapshots in ``<data_dir>/contracts/``::

    <data_dir>/observations/<major>/<id>/{observations.json, manifest.json}

An observation set is immutable: its id ends in the first 12 hex digits of the
SHA-256 of ``observations.json`` and the manifest records the full checksum,
which is verified on every load.  Nothing here ever writes into a declared
snapshot: a profile (``contracts/selection.py``) combines the two at runtime.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from proxmox_simulator.contracts.model import Contract, Endpoint, canonical_json

FORMAT = "proxmox-simulator/observations@1"
_ID = re.compile(r"^\d{8}T\d{6}Z-[0-9a-f]{12}$")


class ObservationError(ValueError):
    """An observation set failed its checksum or format check."""


@dataclass(frozen=True)
class Observation:
    """What one GET of a path template answered on the observed server."""

    path: str
    method: str
    status: int
    # False when the server answered "not implemented" (501): the method does not exist there.
    present: bool
    # False when the recorded identity got 403: the method exists, the caller may not use it.
    permitted: bool = True
    returns: dict | None = None
    sample: Any = None
    # True for a path the server's directory index listed but no declared contract has.
    undeclared: bool = False
    message: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return (self.path, self.method)

    def to_dict(self) -> dict:
        out = {
            "path": self.path,
            "method": self.method,
            "status": self.status,
            "present": self.present,
            "permitted": self.permitted,
            "undeclared": self.undeclared,
        }
        if self.returns is not None:
            out["returns"] = self.returns
        if self.sample is not None:
            out["sample"] = self.sample
        if self.message:
            out["message"] = self.message
        return out

    @classmethod
    def from_dict(cls, data: dict) -> Observation:
        return cls(
            path=data["path"],
            method=data["method"],
            status=int(data["status"]),
            present=bool(data["present"]),
            permitted=bool(data.get("permitted", True)),
            returns=data.get("returns"),
            sample=data.get("sample"),
            undeclared=bool(data.get("undeclared")),
            message=data.get("message", ""),
        )


@dataclass(frozen=True)
class ObservationSet:
    major: int
    version: str  # the release the observed server reported
    observations: tuple[Observation, ...]
    manifest: dict = field(default_factory=dict, compare=False)

    @property
    def id(self) -> str:
        return self.manifest.get("id", "")

    def by_key(self) -> dict[tuple[str, str], Observation]:
        return {o.key: o for o in self.observations}

    def to_dict(self) -> dict:
        return {
            "format": FORMAT,
            "major": self.major,
            "version": self.version,
            "observations": [
                o.to_dict() for o in sorted(self.observations, key=lambda o: (o.path, o.method))
            ],
        }

    def as_contract(self) -> Contract:
        """What the observed server answers, as a snapshot the semantic diff can compare."""
        return Contract(
            version=f"observed:{self.version}",
            endpoints=tuple(
                Endpoint(
                    path=o.path,
                    method=o.method,
                    returns=o.returns or {},
                    # One identity's 200 or 403 says nothing about the permission rule
                    # itself; the compatibility report lists refusals separately.
                    permissions=None,
                )
                for o in self.observations
                if o.present
            ),
        )

    @classmethod
    def from_dict(cls, data: dict, manifest: dict | None = None) -> ObservationSet:
        if data.get("format") != FORMAT:
            raise ObservationError(f"not an observation set ({data.get('format')!r})")
        return cls(
            major=int(data["major"]),
            version=str(data["version"]),
            observations=tuple(Observation.from_dict(o) for o in data["observations"]),
            manifest=manifest or {},
        )


class ObservationStore:
    def __init__(self, data_dir: Path) -> None:
        self.root = Path(data_dir) / "observations"

    def store(self, observed: ObservationSet, provenance: dict) -> dict:
        """Write a new immutable set; returns its manifest (with ``id``)."""
        body = canonical_json(observed.to_dict())
        digest = hashlib.sha256(body).hexdigest()
        now = datetime.now(UTC)
        ident = f"{now:%Y%m%dT%H%M%SZ}-{digest[:12]}"
        present = sum(1 for o in observed.observations if o.present)
        manifest = {
            "id": ident,
            "format": FORMAT,
            "major": observed.major,
            "version": observed.version,
            "recorded_at": now.isoformat(timespec="seconds"),
            "sha256": digest,
            "bytes": len(body),
            "counts": {
                "observations": len(observed.observations),
                "present": present,
                "absent": len(observed.observations) - present,
                "forbidden": sum(1 for o in observed.observations if not o.permitted),
                "undeclared": sum(1 for o in observed.observations if o.undeclared),
            },
            "provenance": provenance,
        }
        target = self.root / str(observed.major) / ident
        staging = target.with_name(f".{ident}.tmp")
        staging.mkdir(parents=True, exist_ok=False)
        (staging / "observations.json").write_bytes(body)
        (staging / "manifest.json").write_bytes(canonical_json(manifest))
        staging.rename(target)
        return manifest

    def import_dir(self, source: Path) -> dict:
        """Copy a set recorded elsewhere, after checking it against its own manifest."""
        manifest = json.loads((Path(source) / "manifest.json").read_text())
        body = (Path(source) / "observations.json").read_bytes()
        if hashlib.sha256(body).hexdigest() != manifest.get("sha256"):
            raise ObservationError(f"{source}: observations.json does not match its manifest")
        observed = ObservationSet.from_dict(json.loads(body), manifest)
        ident = manifest.get("id", "")
        if not _ID.match(ident) or not manifest["sha256"].startswith(ident[-12:]):
            raise ObservationError(f"{source}: manifest id {ident!r} is not a recorded set id")
        target = self.root / str(observed.major) / ident
        if target.exists():
            return self.manifest(observed.major, ident)
        staging = target.with_name(f".{ident}.tmp")
        staging.mkdir(parents=True, exist_ok=False)
        (staging / "observations.json").write_bytes(body)
        (staging / "manifest.json").write_bytes(canonical_json(manifest))
        staging.rename(target)
        return manifest

    def manifests(self, major: int | None = None) -> list[dict]:
        if not self.root.exists():
            return []
        pattern = f"{major}/*/manifest.json" if major is not None else "*/*/manifest.json"
        found = [json.loads(p.read_text()) for p in self.root.glob(pattern)]
        return sorted(found, key=lambda m: (m["major"], m["id"]))

    def manifest(self, major: int, ident: str) -> dict:
        if not _ID.match(ident):
            raise KeyError(ident)
        path = self.root / str(major) / ident / "manifest.json"
        if not path.exists():
            raise KeyError(ident)
        return json.loads(path.read_text())

    def load(self, major: int, ident: str) -> ObservationSet:
        manifest = self.manifest(major, ident)
        body = (self.root / str(major) / ident / "observations.json").read_bytes()
        if hashlib.sha256(body).hexdigest() != manifest["sha256"]:
            raise ObservationError(f"observation set {ident} does not match its manifest checksum")
        return ObservationSet.from_dict(json.loads(body), manifest)

    def latest(self, major: int) -> ObservationSet | None:
        manifests = self.manifests(major)
        return self.load(major, manifests[-1]["id"]) if manifests else None


def infer_schema(value: Any, depth: int = 0) -> dict:
    """A PVE-style ``returns`` schema describing one observed value."""
    if depth > 8:
        return {"type": "any"}
    if value is None:
        return {"type": "null"}
    if isinstance(value, bool):
        return {"type": "boolean"}
    if isinstance(value, int):
        return {"type": "integer"}
    if isinstance(value, float):
        return {"type": "number"}
    if isinstance(value, str):
        return {"type": "string"}
    if isinstance(value, list):
        merged: dict | None = None
        for item in value[:20]:
            merged = _merge(merged, infer_schema(item, depth + 1))
        return {"type": "array", "items": merged or {"type": "any"}}
    if isinstance(value, dict):
        return {
            "type": "object",
            "properties": {str(k): infer_schema(v, depth + 1) for k, v in sorted(value.items())},
        }
    return {"type": "any"}


def _merge(a: dict | None, b: dict) -> dict:
    """Two observed item shapes as one: a key missing from either item is optional."""
    if a is None:
        return b
    if a.get("type") != b.get("type"):
        if {a.get("type"), b.get("type")} == {"integer", "number"}:
            return {"type": "number"}
        return {"type": "any"}
    if a.get("type") == "object":
        pa, pb = a.get("properties", {}), b.get("properties", {})
        props = {}
        for key in sorted(set(pa) | set(pb)):
            if key in pa and key in pb:
                props[key] = _merge(pa[key], pb[key])
                if pa[key].get("optional") or pb[key].get("optional"):
                    props[key]["optional"] = 1
            else:
                props[key] = {**(pa.get(key) or pb.get(key)), "optional": 1}
        return {"type": "object", "properties": props}
    if a.get("type") == "array":
        return {"type": "array", "items": _merge(a.get("items"), b.get("items") or {"type": "any"})}
    return a
