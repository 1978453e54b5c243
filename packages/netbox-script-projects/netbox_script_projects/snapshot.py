"""The Script File snapshot: the enabled declarations frozen into a revision.

One canonical builder creates it; refresh, validation and activation check it
before use. A failed check is revision corruption, never a content verdict.
"""

from __future__ import annotations

from .constants import SCRIPT_FILE_SNAPSHOT_VERSION
from .storage.errors import RevisionCorrupt
from .storage.manifest import document_digest
from .storage.paths import script_file_path_errors, tree_conflicts


def build_script_file_snapshot(project) -> tuple[dict, str]:
    """Snapshot of the Project's enabled Script Files and its digest."""
    from .models import ScriptFile

    declarations = (
        ScriptFile.objects.filter(project=project, enabled=True)
        .order_by("path")
        .values_list("pk", "path")
    )
    snapshot = {
        "version": SCRIPT_FILE_SNAPSHOT_VERSION,
        "script_files": [
            {"id": pk, "path": path} for pk, path in sorted(declarations, key=lambda d: d[1])
        ],
    }
    problems = snapshot_problems(snapshot, None)
    if problems:
        # Declarations that break the snapshot rules never get frozen.
        raise RevisionCorrupt(None, problems)
    return snapshot, document_digest(snapshot)


def snapshot_problems(snapshot, expected_digest: str | None) -> list[str]:
    """Shape, paths, ordering, uniqueness (incl. case and module names), digest."""
    if not isinstance(snapshot, dict) or set(snapshot) != {"version", "script_files"}:
        return ["script file snapshot: unexpected shape"]
    if snapshot["version"] != SCRIPT_FILE_SNAPSHOT_VERSION:
        return [f"script file snapshot: unsupported version {snapshot['version']!r}"]
    entries = snapshot["script_files"]
    if not isinstance(entries, list):
        return ["script file snapshot: script_files is not a list"]
    problems = []
    paths = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict) or set(entry) != {"id", "path"}:
            problems.append(f"script file snapshot: entry {index} has an unexpected shape")
            continue
        if isinstance(entry["id"], bool) or not isinstance(entry["id"], int) or entry["id"] <= 0:
            problems.append(f"script file snapshot: entry {index} has an invalid id")
        path = entry["path"]
        if not isinstance(path, str) or script_file_path_errors(path):
            problems.append(f"script file snapshot: entry {index} has an unacceptable path")
            continue
        paths.append(path)
    if any(a >= b for a, b in zip(paths, paths[1:], strict=False)):
        problems.append("script file snapshot: entries are not strictly ordered by path")
    ids = [e["id"] for e in entries if isinstance(e, dict) and "id" in e]
    if len(ids) != len(set(ids)):
        problems.append("script file snapshot: a script file appears twice")
    problems.extend(
        f"script file snapshot: {error.path}: {error.code}" for error in tree_conflicts(paths)
    )
    if (
        not problems
        and expected_digest is not None
        and document_digest(snapshot) != expected_digest
    ):
        problems.append("script file snapshot: digest does not match the revision")
    return problems


def check_revision_snapshot(revision) -> dict:
    """The revision's snapshot, or RevisionCorrupt: the operation is refused."""
    problems = snapshot_problems(revision.script_file_snapshot, revision.script_file_digest)
    if problems:
        raise RevisionCorrupt(revision, problems)
    return revision.script_file_snapshot
