"""The canonical manifest of a source tree and the digest that names it.

The manifest lists every stored file (path, size, sha256) sorted by path;
the digest is the sha256 of its canonical JSON encoding. The same tree
therefore has the same digest on every node, whatever order it arrived in.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

from ..constants import MANIFEST_VERSION
from .paths import normalize_member_name, path_rule_errors, tree_conflicts

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class ManifestEntry:
    path: str
    size: int
    sha256: str

    def as_dict(self) -> dict:
        return {"path": self.path, "size": self.size, "sha256": self.sha256}


def canonical_json(document) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(
        "utf-8"
    )


def document_digest(document) -> str:
    return hashlib.sha256(canonical_json(document)).hexdigest()


def build_manifest(entries: Iterable[ManifestEntry]) -> dict:
    files = sorted((entry.as_dict() for entry in entries), key=lambda e: e["path"])
    return {"version": MANIFEST_VERSION, "files": files}


def manifest_entries(manifest: dict) -> list[ManifestEntry]:
    return [ManifestEntry(f["path"], f["size"], f["sha256"]) for f in manifest["files"]]


def manifest_problems(manifest, expected_digest: str | None) -> list[str]:
    """Why a stored manifest cannot be trusted (empty when it can).

    Checked before any key is derived from it: a tampered manifest must not
    steer reads or deletions outside the revision prefix.
    """
    if not isinstance(manifest, dict) or set(manifest) != {"version", "files"}:
        return ["manifest: unexpected shape"]
    if manifest["version"] != MANIFEST_VERSION:
        return [f"manifest: unsupported version {manifest['version']!r}"]
    files = manifest["files"]
    if not isinstance(files, list):
        return ["manifest: files is not a list"]
    problems = []
    paths = []
    for index, entry in enumerate(files):
        if not isinstance(entry, dict) or set(entry) != {"path", "size", "sha256"}:
            problems.append(f"manifest: entry {index} has an unexpected shape")
            continue
        path, size, sha = entry["path"], entry["size"], entry["sha256"]
        if (
            not isinstance(path, str)
            or normalize_member_name(path) != (path, None)
            or path_rule_errors(path)
        ):
            problems.append(f"manifest: entry {index} has an unacceptable path")
            continue
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            problems.append(f"manifest: entry {index} has an invalid size")
        if not isinstance(sha, str) or not _SHA256.match(sha):
            problems.append(f"manifest: entry {index} has an invalid sha256")
        paths.append(path)
    if paths != sorted(paths):
        problems.append("manifest: entries are not sorted by path")
    problems.extend(f"manifest: {error.path}: {error.code}" for error in tree_conflicts(paths))
    if (
        not problems
        and expected_digest is not None
        and document_digest(manifest) != expected_digest
    ):
        problems.append("manifest: digest does not match the revision")
    return problems
