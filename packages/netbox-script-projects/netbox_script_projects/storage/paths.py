"""Path policy: which member names a project may contain, in canonical form.

A stored key is `<revision prefix>/<path>`, so every rule here protects the
storage namespace as much as the importer: a path that escapes, aliases or
shadows another path must never reach a storage backend.
"""

from __future__ import annotations

import re
import unicodedata
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from ..choices import StorageErrorCodes as Codes
from ..constants import (
    COMPILED_DIRECTORIES,
    COMPILED_SUFFIXES,
    MAX_PATH_COMPONENT_LENGTH,
    MAX_PATH_DEPTH,
    MAX_PATH_LENGTH,
    SCRIPT_FILE_SUFFIX,
)

_DRIVE = re.compile(r"^[A-Za-z]:")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True, order=True)
class PathError:
    """A storage-time error; `path` is None for project-wide limits."""

    path: str | None
    code: str
    message: str

    def as_dict(self) -> dict:
        return {"path": self.path, "code": self.code, "message": self.message}


def display_name(raw: str) -> str:
    """A printable, JSON-safe rendering of an untrusted member name."""
    raw = raw.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", raw)


def normalize_member_name(raw: str) -> tuple[str | None, PathError | None]:
    """Canonical Project-relative path of an archive member or upload name.

    `.` and empty components are dropped (tar writes `./x`); anything that
    could resolve outside the root, or that a filesystem would read
    differently (NUL, control characters, backslashes), is refused.
    """
    shown = display_name(raw)
    if _CONTROL.search(raw):
        return None, PathError(
            shown, Codes.INVALID_PATH, "Path contains NUL or control characters."
        )
    if raw.startswith(("/", "\\")) or _DRIVE.match(raw):
        return None, PathError(
            shown, Codes.ABSOLUTE_PATH, "Absolute and drive paths are not allowed."
        )
    components = [part for part in re.split(r"[/\\]", raw) if part not in ("", ".")]
    if ".." in components:
        return None, PathError(shown, Codes.PATH_TRAVERSAL, "Path leaves the project root ('..').")
    if "\\" in raw:
        return None, PathError(shown, Codes.INVALID_PATH, "Backslash is not a path separator here.")
    if not components:
        return None, PathError(shown, Codes.INVALID_PATH, "Path names no file.")
    return "/".join(components), None


def path_rule_errors(path: str) -> list[PathError]:
    """Fixed rules on a canonical path (length, depth, compiled artifacts)."""
    errors = []
    components = path.split("/")
    if path.endswith(COMPILED_SUFFIXES) or any(c in COMPILED_DIRECTORIES for c in components):
        errors.append(
            PathError(
                path, Codes.COMPILED_ARTIFACT, "Compiled artifacts are not accepted; upload source."
            )
        )
    if any(len(c.encode("utf-8")) > MAX_PATH_COMPONENT_LENGTH for c in components):
        errors.append(
            PathError(
                path,
                Codes.PATH_COMPONENT_TOO_LONG,
                f"A path component exceeds {MAX_PATH_COMPONENT_LENGTH} bytes.",
            )
        )
    if len(path.encode("utf-8")) > MAX_PATH_LENGTH:
        errors.append(
            PathError(path, Codes.PATH_TOO_LONG, f"Path exceeds {MAX_PATH_LENGTH} bytes.")
        )
    if len(components) > MAX_PATH_DEPTH:
        errors.append(
            PathError(
                path, Codes.PATH_TOO_DEEP, f"Path is deeper than {MAX_PATH_DEPTH} components."
            )
        )
    return errors


def module_name(path: str) -> str | None:
    """The dotted module a .py path imports as (`a/__init__.py` → `a`)."""
    if not path.endswith(SCRIPT_FILE_SUFFIX):
        return None
    stem = path[: -len(SCRIPT_FILE_SUFFIX)]
    if stem == "__init__":
        return ""
    if stem.endswith("/__init__"):
        stem = stem[: -len("/__init__")]
    return stem.replace("/", ".")


def _directories(path: str) -> Iterable[str]:
    components = path.split("/")
    for depth in range(1, len(components)):
        yield "/".join(components[:depth])


def tree_conflicts(paths: Iterable[str]) -> list[PathError]:
    """Conflicts between canonical paths of one tree.

    duplicate_path: the same path twice. path_conflict: a path is both a file
    and a directory, or two files import as the same module (`a.py` beside
    `a/__init__.py` or `a/…`). case_fold_conflict: names equal after Unicode
    normalization and case folding, which alias on case-insensitive storage.
    """
    errors: set[PathError] = set()
    files: set[str] = set()
    for path in paths:
        if path in files:
            errors.add(
                PathError(path, Codes.DUPLICATE_PATH, "The same path appears more than once.")
            )
        files.add(path)

    directories = {directory for path in files for directory in _directories(path)}
    for path in files & directories:
        errors.add(PathError(path, Codes.PATH_CONFLICT, "Path is both a file and a directory."))

    # Case-insensitive and normalizing filesystems (NFC/NFD) alias these.
    spellings: dict[str, set[str]] = defaultdict(set)
    for name in files | directories:
        spellings[unicodedata.normalize("NFC", name).casefold()].add(name)
    for names in spellings.values():
        if len(names) > 1:
            first, *others = sorted(names)
            for other in others:
                errors.add(
                    PathError(
                        other, Codes.CASE_FOLD_CONFLICT, f"Differs from {first!r} only in case."
                    )
                )

    modules: dict[str, list[str]] = defaultdict(list)
    for path in files:
        if (name := module_name(path)) is not None:
            modules[name].append(path)
    for name, owners in modules.items():
        for path in sorted(owners)[1:]:
            errors.add(
                PathError(
                    path,
                    Codes.PATH_CONFLICT,
                    f"Imports as module {name!r}, like {sorted(owners)[0]!r}.",
                )
            )
        # A plain module shadowed by (or shadowing) a package directory.
        plain = [p for p in owners if not p.endswith("__init__.py")]
        package_dir = name.replace(".", "/")
        if plain and name and package_dir in directories:
            for path in plain:
                errors.add(
                    PathError(
                        path,
                        Codes.PATH_CONFLICT,
                        f"Module {name!r} collides with directory {package_dir!r}.",
                    )
                )
    return sorted(errors)


def script_file_path_errors(path: str) -> list[PathError]:
    """Why `path` cannot be a Script File declaration (empty when it can)."""
    normalized, error = normalize_member_name(path)
    if error:
        return [error]
    if normalized != path:
        return [PathError(path, Codes.INVALID_PATH, f"Use the canonical form {normalized!r}.")]
    errors = path_rule_errors(path)
    if not path.endswith(SCRIPT_FILE_SUFFIX):
        errors.append(PathError(path, Codes.INVALID_PATH, "A script file is a .py file."))
    return errors


def script_module_name_errors(path: str) -> list[PathError]:
    """Why a Script File's module name could not be published (empty when it can).

    NetBox names each Script `<module>.<class>` and activation refuses module
    names that are not dotted Python identifiers, so a declaration such as
    `scripts/vm-report.py` could validate but never be activated.
    """
    name = module_name(path)
    if not name:
        return []
    bad = [part for part in name.split(".") if not part.isidentifier()]
    if not bad:
        return []
    return [
        PathError(
            path,
            Codes.INVALID_MODULE_NAME,
            f"{bad[0]!r} is not a Python identifier; a script file and its directories must "
            "be importable names (letters, digits and underscores, not starting with a digit).",
        )
    ]
