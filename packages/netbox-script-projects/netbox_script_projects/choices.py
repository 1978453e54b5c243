from django.utils.translation import gettext_lazy as _
from utilities.choices import ChoiceSet


class ActivationPolicyChoices(ChoiceSet):
    AUTOMATIC = "automatic"
    MANUAL = "manual"

    CHOICES = (
        (AUTOMATIC, _("Automatic if valid"), "green"),
        (MANUAL, _("Manual"), "blue"),
    )


class RevisionStatusChoices(ChoiceSet):
    STAGING = "staging"
    MATERIALIZED = "materialized"
    VALIDATING = "validating"
    VALID = "valid"
    INVALID = "invalid"
    ACTIVE = "active"
    RETIRED = "retired"

    CHOICES = (
        (STAGING, _("Staging"), "cyan"),
        (MATERIALIZED, _("Materialized"), "blue"),
        (VALIDATING, _("Validating"), "yellow"),
        (VALID, _("Valid"), "teal"),
        (INVALID, _("Invalid"), "orange"),
        (ACTIVE, _("Active"), "green"),
        (RETIRED, _("Retired"), "gray"),
    )

    # Storage writes and their retries: a failed write stays staging (with
    # its storage errors) until a re-stage resumes it under the Project lock.
    WRITABLE = (STAGING,)
    # Stored and verified: the content is complete and may be reused as-is.
    STORED = (MATERIALIZED, VALIDATING, VALID, INVALID, ACTIVE, RETIRED)
    # A verdict was reached; re-staging never reopens it.
    VERDICT = (VALID, INVALID, ACTIVE, RETIRED)
    # Activation accepts only these.
    ACTIVATABLE = (VALID, RETIRED)


class ScriptFileDiscoveryChoices(ChoiceSet):
    PENDING = "pending"
    DISCOVERED = "discovered"
    EMPTY = "empty"
    FAILED = "failed"

    CHOICES = (
        (PENDING, _("Pending"), "gray"),
        (DISCOVERED, _("Scripts found"), "green"),
        (EMPTY, _("No scripts found"), "yellow"),
        (FAILED, _("Import failed"), "red"),
    )


class StorageErrorCodes:
    """Fixed codes of storage-time errors (`{path, code, message}`)."""

    PATH_TRAVERSAL = "path_traversal"
    ABSOLUTE_PATH = "absolute_path"
    COMPILED_ARTIFACT = "compiled_artifact"
    PATH_COMPONENT_TOO_LONG = "path_component_too_long"
    PATH_TOO_LONG = "path_too_long"
    PATH_TOO_DEEP = "path_too_deep"
    DUPLICATE_PATH = "duplicate_path"
    PATH_CONFLICT = "path_conflict"
    CASE_FOLD_CONFLICT = "case_fold_conflict"
    FILE_TOO_LARGE = "file_too_large"
    TOO_MANY_FILES = "too_many_files"
    PROJECT_TOO_LARGE = "project_too_large"
    STORAGE_WRITE_FAILED = "storage_write_failed"
    # Archive-level rejections the path rules cannot express.
    UNSUPPORTED_MEMBER = "unsupported_member"
    INVALID_PATH = "invalid_path"
    INVALID_MODULE_NAME = "invalid_module_name"
    INVALID_PATH_ENCODING = "invalid_path_encoding"
    INVALID_ARCHIVE = "invalid_archive"
    EMPTY_PROJECT = "empty_project"


class VerificationCodes:
    """Codes of verification findings (stored content against its manifest)."""

    MISSING = "missing"
    SIZE_MISMATCH = "size_mismatch"
    CHECKSUM_MISMATCH = "checksum_mismatch"
    UNREADABLE = "unreadable"
