"""Data Source projects: each completed sync of a Data Source reconciles the
Projects that mirror one of its directories.

The directory's DataFiles are packed into an in-memory archive and staged
exactly like an upload (same path policy, limits and revision identity), so
an unchanged tree resolves to the existing revision and a changed one to a
new revision, which then gets its validation Job.
"""

from __future__ import annotations

import logging
import tempfile
import zipfile

from core.models import DataFile
from core.signals import post_sync
from django.dispatch import receiver

from .storage.errors import ScriptProjectStorageError
from .storage.service import stage_upload
from .validation import accept_source

logger = logging.getLogger("netbox_script_projects.reconciliation")


def reconcile_project(project):
    """Stage the mirrored directory as a revision of `project` and accept it."""
    prefix = project.data_source_path.strip("/")
    prefix = f"{prefix}/" if prefix else ""
    files = DataFile.objects.filter(source_id=project.data_source_id, path__startswith=prefix)
    with tempfile.SpooledTemporaryFile(max_size=16 * 1024 * 1024) as packed:
        with zipfile.ZipFile(packed, "w", zipfile.ZIP_DEFLATED) as archive:
            count = 0
            for datafile in files.order_by("path").iterator():
                archive.writestr(datafile.path[len(prefix) :], bytes(datafile.data))
                count += 1
        if not count:
            logger.warning("Data Source directory of project %s holds no files", project.pk)
            return None
        packed.seek(0)
        result = stage_upload(project, packed, "data-source.zip")
    accept_source(result.revision)
    return result


@receiver(post_sync)
def reconcile_data_source_projects(instance, **kwargs):
    from .models import ScriptProject

    for project in ScriptProject.objects.filter(data_source=instance, enabled=True):
        try:
            reconcile_project(project)
        except ScriptProjectStorageError as exc:
            # A rejected or failed tree is recorded on its revision; the sync itself succeeded.
            logger.warning("Reconciling project %s failed: %s", project.pk, exc)
