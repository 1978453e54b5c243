"""Stored revision content: one key per file, idempotent writes, verification.

Keys are `netbox-scripts/<storage_key>/revisions/<digest>/<path>` in the
Django storage named STORAGES["script_projects"]. Only keys derived from a
checked manifest are ever read, written or deleted.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable
from pathlib import Path

from django.conf import settings
from django.core.files import File
from django.core.files.storage import FileSystemStorage, InvalidStorageError, storages

from ..choices import StorageErrorCodes, VerificationCodes
from ..constants import CHUNK_SIZE, STORAGE_ALIAS, STORAGE_ROOT
from .manifest import ManifestEntry
from .paths import PathError

logger = logging.getLogger("netbox_script_projects.storage")


def get_storage():
    """The configured backend; a filesystem store under MEDIA_ROOT otherwise."""
    try:
        return storages[STORAGE_ALIAS]
    except InvalidStorageError:
        return FileSystemStorage(location=Path(settings.MEDIA_ROOT) / "script-projects")


def revision_prefix(storage_key, digest: str) -> str:
    return f"{STORAGE_ROOT}/{storage_key}/revisions/{digest}/"


def file_key(storage_key, digest: str, path: str) -> str:
    return revision_prefix(storage_key, digest) + path


def _stored_sha256(storage, key: str) -> str:
    digest = hashlib.sha256()
    with storage.open(key, "rb") as stored:
        while chunk := stored.read(CHUNK_SIZE):
            digest.update(chunk)
    return digest.hexdigest()


def check_stored_file(storage, key: str, entry: ManifestEntry) -> dict | None:
    """A verification finding for one key, or None when it matches its entry."""
    try:
        if not storage.exists(key):
            return _finding(entry.path, VerificationCodes.MISSING, "Stored file is missing.")
        size = storage.size(key)
        if size != entry.size:
            return _finding(
                entry.path,
                VerificationCodes.SIZE_MISMATCH,
                f"Stored size {size} differs from {entry.size}.",
            )
        if _stored_sha256(storage, key) != entry.sha256:
            return _finding(
                entry.path, VerificationCodes.CHECKSUM_MISMATCH, "Stored content differs (sha256)."
            )
    except OSError as exc:
        logger.warning("Reading %s failed: %s", key, exc)
        return _finding(
            entry.path,
            VerificationCodes.UNREADABLE,
            f"Stored file cannot be read ({failure_kind(exc)}).",
        )
    return None


def failure_kind(exc: BaseException) -> str:
    """What a recorded error may say about a backend failure: its kind only.

    Backend messages name locations and keys (the storage_key, digest
    paths); they go to the server log, never into revisions or responses.
    """
    return type(exc).__name__


def _finding(path, code, message):
    return {"path": path, "code": code, "message": message}


def verify_tree(storage, storage_key, digest: str, entries: Iterable[ManifestEntry]) -> list[dict]:
    """Findings for every manifest entry whose stored key does not match.

    Reports and never repairs: a completed tree that differs is evidence.
    """
    findings = []
    for entry in entries:
        if finding := check_stored_file(storage, file_key(storage_key, digest, entry.path), entry):
            findings.append(finding)
    return findings


def write_tree(
    storage,
    storage_key,
    digest: str,
    entries: Iterable[ManifestEntry],
    source: Callable[[str], Path],
) -> list[PathError]:
    """Write every entry whose stored key does not already match it.

    Files that match their recorded size and checksum are kept, so resuming
    an interrupted write only transfers what is missing or wrong.
    Returns storage_write_failed errors for keys that could not be written.
    """
    errors = []
    for entry in entries:
        key = file_key(storage_key, digest, entry.path)
        try:
            if check_stored_file(storage, key, entry) is None:
                continue
            if storage.exists(key):
                # A partial or wrong file from an earlier attempt; saving
                # over it would make the backend pick another name.
                storage.delete(key)
            with open(source(entry.path), "rb") as data:
                stored_as = storage.save(key, File(data, name=entry.path))
            if stored_as != key:
                storage.delete(stored_as)
                raise OSError(f"backend stored the file under another name ({stored_as})")
        except Exception as exc:  # any backend failure is a failed write of this key
            logger.warning("Writing %s failed: %s", key, exc)
            errors.append(
                PathError(
                    entry.path,
                    StorageErrorCodes.STORAGE_WRITE_FAILED,
                    f"Storage write failed ({failure_kind(exc)}).",
                )
            )
    return errors
