"""Staging and refresh: the application service between uploads and revisions.

Both hold the Project lock while they create or reuse a revision row and
write its stored content; status changes are conditional UPDATEs, so a
revision that another actor owns (the validation worker) or deleted is never
overwritten.
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path

from django.db import IntegrityError, connection, transaction

from ..choices import RevisionStatusChoices as Status
from ..choices import StorageErrorCodes
from ..constants import get_limits
from ..snapshot import build_script_file_snapshot, check_revision_snapshot
from .archive import read_upload
from .errors import (
    RevisionCorrupt,
    RevisionNotReusable,
    RevisionVanished,
    StorageWriteFailed,
    SubmissionRejected,
    VerificationFailed,
)
from .locks import project_lock, require_default_routing
from .manifest import (
    ManifestEntry,
    build_manifest,
    document_digest,
    manifest_entries,
    manifest_problems,
)
from .store import get_storage, verify_tree, write_tree

logger = logging.getLogger("netbox_script_projects.storage")


@dataclass(frozen=True)
class StagingResult:
    revision: object
    # created: a new identity; resumed: an earlier write completed now;
    # reused: complete stored content, verified and returned unchanged.
    outcome: str

    @property
    def created(self) -> bool:
        return self.outcome == "created"


def _revisions():
    from ..models import ScriptProjectRevision

    return ScriptProjectRevision.objects


def stage_upload(project, upload, name: str, *, using: str | None = None) -> StagingResult:
    """Store an uploaded .py file or archive as a revision of `project`.

    Raises SubmissionRejected (policy/limits; recorded with null digests),
    StorageWriteFailed (retry by staging again), VerificationFailed,
    RevisionCorrupt, RevisionVanished or ProjectBusy.
    """
    require_default_routing(using)
    with tempfile.TemporaryDirectory(prefix="nbsp-upload-") as workdir:
        contents = read_upload(upload, name, Path(workdir), get_limits())
        if contents.errors:
            revision = _record_rejection(project, contents)
            raise SubmissionRejected(revision, revision.validation_errors)

        entries = [ManifestEntry(f.path, f.size, f.sha256) for f in contents.files]
        manifest = build_manifest(entries)
        digest = document_digest(manifest)
        spools = {f.path: f.spool for f in contents.files}

        with project_lock(project.storage_key):
            # Built under the lock: Script File writes take the same key.
            snapshot, snapshot_digest = build_script_file_snapshot(project)
            if (
                _revisions()
                .filter(project=project, digest=digest, status__in=Status.STORED)
                .exists()
            ):
                # The tree is complete (possibly under another selection):
                # verify it, never write over it; a mismatch is evidence.
                return _adopt_stored_tree(project, digest, manifest, snapshot, snapshot_digest)
            revision, created = _get_or_create(project, digest, manifest, snapshot, snapshot_digest)
            if revision.status in Status.STORED:
                return _reuse(revision)
            return _write(revision, created, spools.__getitem__)


def _record_rejection(project, contents):
    """The rejected submission's row (null digests), or RevisionNotReusable."""
    try:
        with transaction.atomic():
            revision = _revisions().create(
                project=project,
                status=Status.INVALID,
                validation_errors=[error.as_dict() for error in contents.errors],
                file_count=len(contents.files),
                total_size=sum(f.size for f in contents.files),
            )
            # The foreign key is deferred: check it now, not at some outer commit.
            connection.check_constraints(table_names=[revision._meta.db_table])
    except IntegrityError:
        raise RevisionNotReusable(f"Project {project.pk} no longer exists") from None
    return revision


def _get_or_create(project, digest, manifest, snapshot, snapshot_digest, status=Status.STAGING):
    identity = {"project": project, "digest": digest, "script_file_digest": snapshot_digest}
    # Checked under the Project lock; REST deletion holds the same lock.
    if not type(project).objects.filter(pk=project.pk).exists():
        raise RevisionNotReusable(f"Project {project.pk} no longer exists")
    try:
        with transaction.atomic():
            revision = _revisions().create(
                **identity,
                manifest=manifest,
                script_file_snapshot=snapshot,
                file_count=len(manifest["files"]),
                total_size=sum(f["size"] for f in manifest["files"]),
                status=status,
            )
        return revision, True
    except IntegrityError:
        # The identity exists (possibly created without the lock): use it.
        existing = _revisions().filter(**identity).first()
        if existing is None:
            # Not a duplicate: the project itself is gone (foreign key).
            raise RevisionNotReusable(f"Project {project.pk} no longer exists") from None
        return existing, False


def _reload(revision):
    try:
        return _revisions().select_related("project").get(pk=revision.pk)
    except revision.DoesNotExist:
        raise RevisionVanished(revision.pk) from None


def _checked_entries(revision) -> list[ManifestEntry]:
    problems = manifest_problems(revision.manifest, revision.digest)
    if problems:
        raise RevisionCorrupt(revision, problems)
    return manifest_entries(revision.manifest)


def _reuse(revision) -> StagingResult:
    """Verify complete stored content before reuse; never reset or reopen."""
    findings = verify_revision_storage(revision)
    if findings:
        raise VerificationFailed(revision, findings)
    # Deletion does not take the Project lock: report a row that vanished.
    return StagingResult(_reload(revision), "reused")


def _adopt_stored_tree(
    project, digest, manifest, snapshot, snapshot_digest, evidence=None
) -> StagingResult:
    """The revision of a complete stored tree under `snapshot`, without writing.

    The tree is verified first; mismatches are reported (on `evidence`, else
    a revision of the tree), never repaired. The new selection starts
    materialized; an interrupted one is completed.
    """
    identity = (
        _revisions()
        .filter(project=project, digest=digest, script_file_digest=snapshot_digest)
        .first()
    )
    if identity is not None and identity.status in Status.STORED:
        return _reuse(identity)
    findings = verify_tree(get_storage(), project.storage_key, digest, manifest_entries(manifest))
    if findings:
        evidence = (
            evidence
            or identity
            or _revisions().filter(project=project, digest=digest, status__in=Status.STORED).first()
        )
        raise VerificationFailed(evidence, findings)
    revision, created = _get_or_create(
        project, digest, manifest, snapshot, snapshot_digest, status=Status.MATERIALIZED
    )
    if created:
        return StagingResult(_reload(revision), "created")
    if revision.status in Status.STORED:
        return StagingResult(_reload(revision), "reused")
    _transition(revision, Status.WRITABLE, status=Status.MATERIALIZED, validation_errors=[])
    return StagingResult(_reload(revision), "resumed")


def _transition(revision, from_statuses, **values) -> None:
    """Conditional UPDATE; RevisionVanished if the row is gone."""
    updated = _revisions().filter(pk=revision.pk, status__in=from_statuses).update(**values)
    if not updated:
        current = _reload(revision)
        raise RevisionNotReusable(
            f"Revision {revision.pk} is {current.status}, not {'/'.join(from_statuses)}; left unchanged"
        )


def _write(revision, created: bool, source) -> StagingResult:
    """Write (or resume writing) the tree, verify it, reach materialized."""
    if not created:
        # Claim an interrupted or failed write for resumption.
        _transition(revision, Status.WRITABLE, status=Status.STAGING, validation_errors=[])
    entries = _checked_entries(revision)
    storage = get_storage()
    storage_key = revision.project.storage_key
    errors = [
        e.as_dict() for e in write_tree(storage, storage_key, revision.digest, entries, source)
    ]
    if not errors:
        # Verify what the backend now holds, not what we meant to write.
        errors = [
            {
                "path": finding["path"],
                "code": StorageErrorCodes.STORAGE_WRITE_FAILED,
                "message": f"Verification after write: {finding['message']}",
            }
            for finding in verify_tree(storage, storage_key, revision.digest, entries)
        ]
    if errors:
        # Still staging: the write failed and a re-stage resumes it.
        _transition(revision, (Status.STAGING,), status=Status.STAGING, validation_errors=errors)
        raise StorageWriteFailed(_reload(revision), errors)
    _transition(revision, (Status.STAGING,), status=Status.MATERIALIZED, validation_errors=[])
    return StagingResult(_reload(revision), "created" if created else "resumed")


def refresh_revision(source, *, using: str | None = None) -> StagingResult:
    """The revision of `source`'s content under the current Script File selection.

    Creates it (sharing the stored tree, no upload) or returns the existing one.
    """
    require_default_routing(using)
    project = source.project
    with project_lock(project.storage_key):
        source = _reload(source)
        if source.digest is None or source.status not in Status.STORED:
            raise RevisionNotReusable(
                f"Revision {source.pk} has no complete stored source to refresh from"
            )
        check_revision_snapshot(source)
        _checked_entries(source)
        snapshot, snapshot_digest = build_script_file_snapshot(project)
        return _adopt_stored_tree(
            project, source.digest, source.manifest, snapshot, snapshot_digest, evidence=source
        )


def verify_revision_storage(revision) -> list[dict]:
    """Findings of the revision's stored content against its manifest."""
    entries = _checked_entries(revision)
    return verify_tree(get_storage(), revision.project.storage_key, revision.digest, entries)


def ensure_revision_ready_for_activation(revision) -> None:
    """Activation's gate: an activatable status, intact documents and stored content."""
    if revision.status not in Status.ACTIVATABLE:
        # Stored content alone is not enough: only a verdict of valid (or a
        # retired revision) may be activated.
        raise RevisionNotReusable(
            f"Revision {revision.pk} is {revision.status}; only valid or retired revisions activate"
        )
    if revision.digest is None:
        raise RevisionNotReusable(f"Revision {revision.pk} has no stored source")
    check_revision_snapshot(revision)
    if findings := verify_revision_storage(revision):
        raise VerificationFailed(revision, findings)
