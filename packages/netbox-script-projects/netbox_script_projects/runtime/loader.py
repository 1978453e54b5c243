"""A private import system for one revision's verified source.

Every manifest file is read from storage into memory and checked against its
manifest size and sha256 before anything executes; code is then compiled from
those same bytes, so what runs is what was verified. Modules live under a
namespace package private to the revision (``_nbsp_r<pk>``) that only this
finder resolves: nothing is written into NetBox's scripts root, nothing
outside the manifest can be imported, and project modules import one another
with relative imports (``from .lib import helpers``).
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading
from collections import OrderedDict
from dataclasses import dataclass

from ..snapshot import check_revision_snapshot
from ..storage.errors import RevisionCorrupt, VerificationFailed
from ..storage.manifest import manifest_entries, manifest_problems
from ..storage.store import file_key, get_storage

# Loading replaces a revision's namespace in sys.modules; one load at a time.
_load_lock = threading.RLock()

# A long-lived web worker would otherwise keep every revision it ever
# imported (source, modules, classes). Namespaces loaded here, oldest first;
# beyond the bound the oldest is dropped, and callers evict revisions that
# no longer serve anything.
MAX_LOADED_REVISIONS = 8
_loaded_order: OrderedDict[str, None] = OrderedDict()


class StorageUnavailable(Exception):
    """Stored content could not be read (an environment failure, not a verdict)."""


def namespace_for(revision) -> str:
    return namespace_for_id(revision.pk)


def namespace_for_id(revision_id) -> str:
    return f"_nbsp_r{revision_id}"


def read_verified_source(revision) -> dict[str, bytes]:
    """Every manifest file's bytes, each checked against its size and sha256.

    RevisionCorrupt for a manifest or snapshot that fails its checks,
    VerificationFailed for stored content that differs, StorageUnavailable
    when the backend cannot be read.
    """
    if revision.digest is None:
        raise RevisionCorrupt(revision, ["revision has no stored source"])
    if problems := manifest_problems(revision.manifest, revision.digest):
        raise RevisionCorrupt(revision, problems)
    check_revision_snapshot(revision)
    storage = get_storage()
    storage_key = revision.project.storage_key
    files: dict[str, bytes] = {}
    findings = []
    for entry in manifest_entries(revision.manifest):
        key = file_key(storage_key, revision.digest, entry.path)
        try:
            if not storage.exists(key):
                findings.append(
                    {"path": entry.path, "code": "missing", "message": "Stored file is missing."}
                )
                continue
            with storage.open(key, "rb") as stored:
                data = stored.read()
        except OSError as exc:
            raise StorageUnavailable(type(exc).__name__) from exc
        if len(data) != entry.size or hashlib.sha256(data).hexdigest() != entry.sha256:
            findings.append(
                {
                    "path": entry.path,
                    "code": "checksum_mismatch",
                    "message": "Stored content differs.",
                }
            )
            continue
        files[entry.path] = data
    if findings:
        raise VerificationFailed(revision, findings)
    return files


def module_name_for(path: str) -> str:
    """Project-relative dotted module name of a .py path (packages by __init__.py)."""
    parts = path[: -len(".py")].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


@dataclass
class LoadedRevision:
    namespace: str
    files: dict[str, bytes]
    finder: RevisionFinder

    def import_module(self, relative_name: str):
        return importlib.import_module(f"{self.namespace}.{relative_name}")

    def relative(self, module_name: str) -> str:
        """A module name without the private namespace (project-relative)."""
        if module_name == self.namespace:
            return ""
        prefix = self.namespace + "."
        return module_name[len(prefix) :] if module_name.startswith(prefix) else module_name

    def unload(self):
        with _load_lock:
            _drop_namespace(self.namespace)
            if self.finder in sys.meta_path:
                sys.meta_path.remove(self.finder)


class RevisionFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves `<namespace>.*` to manifest files only; nothing else."""

    def __init__(self, namespace: str, files: dict[str, bytes]):
        self.namespace = namespace
        self.files = files
        self.directories = {
            "/".join(p.split("/")[:i]) for p in files for i in range(1, p.count("/") + 1)
        }

    def find_spec(self, fullname, path=None, target=None):
        if fullname == self.namespace:
            return importlib.machinery.ModuleSpec(fullname, self, origin=None, is_package=True)
        if not fullname.startswith(self.namespace + "."):
            return None
        relative = fullname[len(self.namespace) + 1 :].replace(".", "/")
        if f"{relative}/__init__.py" in self.files:
            spec = importlib.machinery.ModuleSpec(
                fullname, self, origin=f"{relative}/__init__.py", is_package=True
            )
        elif f"{relative}.py" in self.files:
            spec = importlib.machinery.ModuleSpec(fullname, self, origin=f"{relative}.py")
        elif relative in self.directories:
            spec = importlib.machinery.ModuleSpec(fullname, self, origin=None, is_package=True)
        else:
            return None
        spec.has_location = False
        return spec

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        origin = module.__spec__.origin
        if origin is None:
            return  # a directory without __init__.py: an empty package
        module.__file__ = origin
        code = compile(self.files[origin], origin, "exec", dont_inherit=True)
        exec(code, module.__dict__)


def _drop_namespace(namespace: str) -> None:
    for name in [n for n in sys.modules if n == namespace or n.startswith(namespace + ".")]:
        del sys.modules[name]
    for finder in [f for f in sys.meta_path if isinstance(f, RevisionFinder)]:
        if finder.namespace == namespace:
            sys.meta_path.remove(finder)
    _loaded_order.pop(namespace, None)


def loaded_namespaces() -> list[str]:
    """Revision namespaces this process holds, oldest first."""
    with _load_lock:
        return list(_loaded_order)


def evict_revisions_except(revision_ids) -> None:
    """Drop every loaded revision namespace except those of `revision_ids`."""
    keep = {namespace_for_id(pk) for pk in revision_ids}
    with _load_lock:
        for namespace in [n for n in _loaded_order if n not in keep]:
            _drop_namespace(namespace)


def load_revision(revision, files: dict[str, bytes] | None = None) -> LoadedRevision:
    """Make the revision's verified source importable under its private namespace.

    A previous load of the same revision is replaced, so every load executes
    freshly verified bytes.
    """
    if files is None:
        files = read_verified_source(revision)
    namespace = namespace_for(revision)
    finder = RevisionFinder(namespace, files)
    with _load_lock:
        _drop_namespace(namespace)
        sys.meta_path.insert(0, finder)
        importlib.import_module(namespace)
        _loaded_order[namespace] = None
        while len(_loaded_order) > MAX_LOADED_REVISIONS:
            _drop_namespace(next(iter(_loaded_order)))
    return LoadedRevision(namespace, files, finder)
