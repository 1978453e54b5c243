"""Activation and deactivation: which revision a Project serves, and its NetBox Scripts.

Both run under the Project lock on the default database. Activation accepts
valid or retired revisions only, verifies stored source again, and rebuilds
Script rows from the revision's recorded discovery (it never imports the
source). Changes go through model saves, so request-driven activation is
change-logged by NetBox's request context and the validation Job's automatic
activation, which has no such context, writes no change record.
"""

from __future__ import annotations

from core.choices import ManagedFileRootPathChoices
from core.models import ManagedFile
from django.db import DEFAULT_DB_ALIAS, DatabaseError, router, transaction
from django.utils import timezone
from extras.models import Script, ScriptModule

from .choices import RevisionStatusChoices as Status
from .runtime.discovery import discovered_scripts_problems
from .storage.errors import RevisionCorrupt, ScriptProjectStorageError, UnsafeDatabaseAlias
from .storage.locks import project_lock
from .storage.service import ensure_revision_ready_for_activation

# Published modules live under this ScriptModule path prefix; no file is ever
# written there (runtime/published.py loads them from verified stored content).
MODULE_PATH_PREFIX = "_script_projects"
MAX_MODULE_PATH_LENGTH = 100  # ManagedFile.file_path (a FilePathField)


# The object-permission action on ScriptProject that governs both operations.
ACTIVATE_ACTION = "activate"


class ActivationRefused(ScriptProjectStorageError):
    """The revision cannot be activated or deactivated in its current state."""


def _require_default_routing():
    from .models import ScriptProjectRevision

    for alias in (router.db_for_write(ScriptProjectRevision), router.db_for_write(Script)):
        if alias not in (None, DEFAULT_DB_ALIAS):
            raise UnsafeDatabaseAlias(
                f"Activation runs on the {DEFAULT_DB_ALIAS!r} database only, not {alias!r}"
            )


def module_file_path(project, module_name: str) -> str:
    path = f"{MODULE_PATH_PREFIX}/{project.pk}/{module_name}.py"
    if len(path) > MAX_MODULE_PATH_LENGTH:
        import hashlib

        path = f"{MODULE_PATH_PREFIX}/{project.pk}/{hashlib.sha256(module_name.encode()).hexdigest()[:32]}.py"
    return path


def _module_for(project, script_file_path: str) -> ScriptModule:
    from .runtime.loader import module_name_for

    file_path = module_file_path(project, module_name_for(script_file_path))
    # ManagedFile directly: ScriptModule.save() would import the file from
    # NetBox's scripts root to sync classes; Script rows come from discovery.
    managed, _created = ManagedFile.objects.get_or_create(
        file_root=ManagedFileRootPathChoices.SCRIPTS, file_path=file_path
    )
    return ScriptModule.objects.get(pk=managed.pk)


def publish(project, revision, records: list[dict]) -> None:
    """Make Script rows match `records`; retire the Project's other published Scripts."""
    from .models import PublishedScript

    existing = {
        (p.module_name, p.class_name): p
        for p in PublishedScript.objects.filter(project=project).select_related("script")
    }
    live = set()
    modules: dict[str, ScriptModule] = {}
    for record in records:
        identity = (record["module"], record["class_name"])
        live.add(identity)
        module = modules.get(record["script_file"]) or _module_for(project, record["script_file"])
        modules[record["script_file"]] = module
        name = f"{record['module']}.{record['class_name']}"
        publication = existing.get(identity)
        if publication is None:
            script = Script.objects.create(module=module, name=name, is_executable=True)
            PublishedScript.objects.create(
                project=project,
                script=script,
                module_name=record["module"],
                class_name=record["class_name"],
                script_file_path=record["script_file"],
                revision=revision,
            )
            continue
        script = publication.script
        script.module = module
        script.name = name
        script.is_executable = publication.enabled
        script.save()
        publication.script_file_path = record["script_file"]
        publication.revision = revision
        publication.save(update_fields=["script_file_path", "revision"])
    for identity, publication in existing.items():
        if identity not in live:
            _retire_publication(publication)


def _retire_publication(publication) -> None:
    publication.revision = None
    publication.save(update_fields=["revision"])
    # NetBox's own "soft delete": the row and its Job history stay.
    Script.objects.filter(pk=publication.script_id).update(is_executable=False)


def _locked_revision(revision):
    from .models import ScriptProjectRevision

    try:
        return ScriptProjectRevision.objects.select_related("project").get(pk=revision.pk)
    except ScriptProjectRevision.DoesNotExist:
        raise ActivationRefused(f"Revision {revision.pk} no longer exists") from None


def _save(instance, fields):
    try:
        instance.save(update_fields=[*fields, "last_updated"])
    except DatabaseError as exc:
        # update_fields on a row deleted meanwhile matches nothing.
        raise ActivationRefused(f"{instance} was deleted meanwhile") from exc


def activate_revision(revision):
    """Serve `revision`: publish its Scripts and retire the previously active revision."""
    _require_default_routing()
    with project_lock(revision.project.storage_key):
        revision = _locked_revision(revision)
        if revision.status not in Status.ACTIVATABLE:
            raise ActivationRefused(
                f"Only valid or retired revisions can be activated; this one is {revision.status}."
            )
        ensure_revision_ready_for_activation(revision)
        records = revision.discovered_scripts or []
        if problems := discovered_scripts_problems(records):
            raise RevisionCorrupt(revision, problems)
        project = revision.project
        with transaction.atomic():
            for previous in project.revisions.filter(status=Status.ACTIVE).exclude(pk=revision.pk):
                previous.snapshot()
                previous.status = Status.RETIRED
                _save(previous, ["status"])
            revision.snapshot()
            revision.status = Status.ACTIVE
            revision.activated = timezone.now()
            _save(revision, ["status", "activated"])
            project.snapshot()
            project.active_revision = revision
            _save(project, ["active_revision"])
            publish(project, revision, records)
        return revision


def deactivate_revision(revision):
    """Retire the active `revision` and its Scripts; the Project serves nothing."""
    _require_default_routing()
    from .models import PublishedScript

    with project_lock(revision.project.storage_key):
        revision = _locked_revision(revision)
        if revision.status != Status.ACTIVE:
            raise ActivationRefused(
                f"Only the active revision can be deactivated; this one is {revision.status}."
            )
        project = revision.project
        with transaction.atomic():
            revision.snapshot()
            revision.status = Status.RETIRED
            _save(revision, ["status"])
            if project.active_revision_id == revision.pk:
                project.snapshot()
                project.active_revision = None
                _save(project, ["active_revision"])
            for publication in PublishedScript.objects.filter(
                project=project, revision__isnull=False
            ):
                _retire_publication(publication)
        return revision
