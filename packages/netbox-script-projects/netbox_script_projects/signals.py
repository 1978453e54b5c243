"""Deletion receivers: the one path every revision deletion takes.

Registered receivers also keep Django off its signal-free fast-delete path,
so QuerySet.delete() and Project cascades arrive here too.
"""

import logging
from contextvars import ContextVar

from django.db.models.signals import post_delete, pre_delete, pre_save
from django.dispatch import receiver
from django.utils.translation import gettext as _
from utilities.exceptions import AbortRequest

from .jobs import StorageCleanupJob
from .models import PublishedScript, ScriptFile, ScriptProject, ScriptProjectRevision
from .storage.locks import project_write_lock, require_default_database
from .storage.manifest import manifest_problems

logger = logging.getLogger("netbox_script_projects.cleanup")


@receiver(pre_delete, sender=ScriptProjectRevision)
def capture_revision_content(sender, instance, using, **kwargs):
    """Capture the manifest's exact keys before the row disappears."""
    require_default_database(using)
    if not instance.digest:
        return  # rejected submissions store nothing
    storage_key = (
        ScriptProject.objects.using(using)
        .values_list("storage_key", flat=True)
        .get(pk=instance.project_id)
    )
    if problems := manifest_problems(instance.manifest, instance.digest):
        # Keys cannot be derived safely from a corrupt manifest: leave the
        # content in storage rather than delete by guesswork.
        logger.error(
            "Revision %s has a corrupt manifest (%s); its content is not cleaned up.",
            instance.pk,
            problems,
        )
        return
    instance._captured_content = (
        storage_key,
        instance.digest,
        [f["path"] for f in instance.manifest["files"]],
    )


@receiver(pre_delete, sender=ScriptProjectRevision)
def retire_scripts_of_deleted_revision(sender, instance, using, **kwargs):
    """A deleted revision serves nothing: its Scripts stop being executable.

    The publications' revision becomes null through SET_NULL, which saves no
    Script; without this the NetBox Scripts would stay runnable with nothing
    behind them.
    """
    from extras.models import Script

    serving = PublishedScript.objects.using(using).filter(revision_id=instance.pk)
    Script.objects.using(using).filter(
        pk__in=list(serving.values_list("script_id", flat=True))
    ).update(is_executable=False)


@receiver(post_delete, sender=ScriptProjectRevision)
def record_content_cleanup(sender, instance, using, **kwargs):
    """Record the cleanup Job in the deleting transaction, unless still referenced."""
    captured = getattr(instance, "_captured_content", None)
    if captured is None:
        return
    storage_key, digest, paths = captured
    # Another selection of the same source shares the tree.
    if (
        ScriptProjectRevision.objects.using(using)
        .filter(project_id=instance.project_id, digest=digest)
        .exists()
    ):
        return
    StorageCleanupJob.record(storage_key, digest, paths, using=using)


@receiver(pre_delete, sender=ScriptFile)
def lock_project_for_script_file_deletion(sender, instance, using, **kwargs):
    """Script File deletions (always Project cascades) take the Project write lock."""
    storage_key = (
        ScriptProject.objects.using(using)
        .values_list("storage_key", flat=True)
        .get(pk=instance.project_id)
    )
    project_write_lock(storage_key, using)


# Set while a Project deletion withdraws its own modules: the one deletion
# of a plugin-published ScriptModule that is allowed.
_withdrawing_project_modules = ContextVar("withdrawing_project_modules", default=False)


def refuse_unmanaged_module_change(sender, instance, **kwargs):
    """Plugin-published ScriptModules are managed only through their Project.

    Deleting one from NetBox's Scripts page removed its Scripts, their Job
    history and `enabled` settings while the revision stayed active; editing
    one would replace the module with a file. Both are refused; deactivate or
    delete the Project instead.
    """
    from .runtime.published import is_published_module

    if _withdrawing_project_modules.get() or not is_published_module(instance, stored=True):
        return
    raise AbortRequest(
        _(
            "{module} is published by a Script Project; deactivate or delete the project instead."
        ).format(module=instance)
    )


def _connect_module_guards():
    from core.models import ManagedFile
    from extras.models import ScriptModule

    for model in (ScriptModule, ManagedFile):
        pre_delete.connect(refuse_unmanaged_module_change, sender=model, weak=False)
    # Activation writes ManagedFile rows itself; NetBox's edit form saves a ScriptModule.
    pre_save.connect(refuse_unmanaged_module_change, sender=ScriptModule, weak=False)


_connect_module_guards()


@receiver(pre_delete, sender=ScriptProject)
def withdraw_published_scripts(sender, instance, using, **kwargs):
    """A deleted Project takes its NetBox ScriptModules, Scripts and their Jobs along.

    As when an administrator deletes a script module in NetBox: its Scripts
    and their Job history go (NetBox's ScriptModule.delete() batch-deletes the
    Jobs). Deactivation, not deletion, is the way to keep history.
    """
    from extras.models import ScriptModule

    module_ids = (
        PublishedScript.objects.using(using)
        .filter(project_id=instance.pk)
        .values_list("script__module_id", flat=True)
    )
    token = _withdrawing_project_modules.set(True)
    try:
        for module in ScriptModule.objects.using(using).filter(pk__in=list(module_ids)):
            module.delete(using=using)
    finally:
        _withdrawing_project_modules.reset(token)
