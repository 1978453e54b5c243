"""Statuses, limits and storage layout of Script Projects, in one place.

Limits are deployment policy: each can be overridden through
``PLUGINS_CONFIG["netbox_script_projects"]``. Path rules are fixed, because a
revision's digest and stored keys must mean the same thing on every node.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

PLUGIN_NAME = "netbox_script_projects"

# The Django storage alias that holds revision content (STORAGES[...]).
STORAGE_ALIAS = "script_projects"
# Every stored key lives below netbox-scripts/<storage_key>/revisions/<digest>/.
STORAGE_ROOT = "netbox-scripts"

# Versions of the canonical documents; part of what their digests cover.
MANIFEST_VERSION = 1
SCRIPT_FILE_SNAPSHOT_VERSION = 1

# Fixed path rules (bytes of UTF-8; a key prefix of ~130 bytes is added on top).
MAX_PATH_LENGTH = 512
MAX_PATH_COMPONENT_LENGTH = 255
MAX_PATH_DEPTH = 16
COMPILED_SUFFIXES = (".pyc", ".pyo", ".pyd", ".so")
COMPILED_DIRECTORIES = ("__pycache__",)
SCRIPT_FILE_SUFFIX = ".py"

# Read/write chunk size for hashing, spooling and storage transfers.
CHUNK_SIZE = 1024 * 1024

# Advisory lock namespace (the first int4 of the two-key form); the second key
# comes from the Project's storage_key, so NetBox's single-bigint locks never
# collide with ours.
ADVISORY_LOCK_NAMESPACE = 0x4E425350  # "NBSP"

# Name of the NetBox Job that removes unreferenced revision content.
CLEANUP_JOB_NAME = "Script project storage cleanup"

DEFAULT_LIMITS = {
    # Largest single file, decompressed.
    "max_file_size": 10 * 1024 * 1024,
    # Largest project (sum of decompressed file sizes).
    "max_project_size": 100 * 1024 * 1024,
    # Most files in one project.
    "max_file_count": 5000,
    # Seconds to wait for the Project lock before reporting the Project busy.
    "lock_timeout": 60,
}


@dataclass(frozen=True)
class Limits:
    max_file_size: int
    max_project_size: int
    max_file_count: int
    lock_timeout: float


def get_limits() -> Limits:
    """Limits in force now: plugin defaults overridden by PLUGINS_CONFIG."""
    configured = getattr(settings, "PLUGINS_CONFIG", {}).get(PLUGIN_NAME, {}) or {}
    values = {name: configured.get(name, default) for name, default in DEFAULT_LIMITS.items()}
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise ValueError(f"PLUGINS_CONFIG[{PLUGIN_NAME!r}][{name!r}] must be a positive number")
    return Limits(
        max_file_size=int(values["max_file_size"]),
        max_project_size=int(values["max_project_size"]),
        max_file_count=int(values["max_file_count"]),
        lock_timeout=float(values["lock_timeout"]),
    )


# Name of the NetBox Job that validates a revision (imports and discovers its Scripts).
VALIDATION_JOB_NAME = "Script project validation"

DEFAULT_VALIDATION_TIMING = {
    # RQ timeout of a validation Job, in seconds.
    "validation_job_timeout": 300,
    # How long a validation claim stays exclusive; must exceed the Job timeout,
    # so a lease only expires once its Job can no longer be running.
    "validation_lease": 900,
}


@dataclass(frozen=True)
class ValidationTiming:
    job_timeout: int
    lease: int


def get_validation_timing() -> ValidationTiming:
    configured = getattr(settings, "PLUGINS_CONFIG", {}).get(PLUGIN_NAME, {}) or {}
    values = {
        name: configured.get(name, default) for name, default in DEFAULT_VALIDATION_TIMING.items()
    }
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(
                f"PLUGINS_CONFIG[{PLUGIN_NAME!r}][{name!r}] must be a positive number of seconds"
            )
    if values["validation_lease"] <= values["validation_job_timeout"]:
        raise ValueError(
            f"PLUGINS_CONFIG[{PLUGIN_NAME!r}]['validation_lease'] must exceed 'validation_job_timeout'"
        )
    return ValidationTiming(
        job_timeout=values["validation_job_timeout"], lease=values["validation_lease"]
    )
