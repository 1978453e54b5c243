"""Failures of the storage service, each naming what the caller can do."""

from __future__ import annotations


class ScriptProjectStorageError(Exception):
    """Base class of storage-service failures."""


class SubmissionRejected(ScriptProjectStorageError):
    """The upload broke the path policy or a limit; nothing was stored."""

    def __init__(self, revision, errors):
        self.revision = revision
        self.errors = errors
        super().__init__(f"Submission rejected with {len(errors)} error(s)")


class StorageWriteFailed(ScriptProjectStorageError):
    """The backend did not store the tree; re-staging resumes the write."""

    def __init__(self, revision, errors):
        self.revision = revision
        self.errors = errors
        super().__init__(f"Storage write failed for {len(errors)} file(s)")


class VerificationFailed(ScriptProjectStorageError):
    """Stored content does not match the manifest. Reported, never repaired."""

    def __init__(self, revision, findings):
        self.revision = revision
        self.findings = findings
        super().__init__(f"Stored content differs from the manifest in {len(findings)} file(s)")


class RevisionCorrupt(ScriptProjectStorageError):
    """A stored document (manifest or Script File snapshot) fails its checks.

    This is corruption, not an invalid-content verdict: the operation is refused.
    """

    def __init__(self, revision, problems):
        self.revision = revision
        self.problems = problems
        super().__init__("; ".join(problems))


class RevisionVanished(ScriptProjectStorageError):
    """The revision row was deleted while this operation was working on it."""

    def __init__(self, revision_id):
        self.revision_id = revision_id
        super().__init__(f"Revision {revision_id} was deleted during staging")


class RevisionNotReusable(ScriptProjectStorageError):
    """The requested source revision has no complete stored tree to reuse."""


class ProjectBusy(ScriptProjectStorageError):
    """The Project lock was not granted within the configured timeout."""


class UnsafeDatabaseAlias(ScriptProjectStorageError):
    """Revision rows and cleanup Jobs must share the default database."""
