"""How NetBox's Script machinery loads the modules this plugin published.

A published ScriptModule has no file in NetBox's scripts root. NetBox calls
`ScriptModule.get_module()` whenever it needs the classes (the Scripts list,
the run form, the REST run action, the ScriptJob in the worker); for modules
this plugin owns, that call loads the pinned revision's verified stored
content and returns a module holding exactly the live, enabled published
classes. Every other module takes NetBox's own path.
"""

from __future__ import annotations

import types

from .loader import evict_revisions_except, load_revision, module_name_for

_netbox_get_module = None


def published_module(script_module):
    """The module NetBox should see for a plugin-published ScriptModule, else None."""
    from ..models import PublishedScript

    publications = list(
        PublishedScript.objects.filter(script__module_id=script_module.pk).select_related(
            "revision__project"
        )
    )
    if not publications:
        return None
    serving = [p for p in publications if p.revision_id is not None and p.enabled]
    if not serving:
        # Retired (or disabled): no classes, as NetBox shows a script removed
        # from its file. Raising would log an error on every Scripts page view.
        module = types.ModuleType(f"retired_{script_module.pk}")
        module.script_order = []
        return module
    revision = serving[0].revision
    # Publication order is the revision's discovery order (script_order first).
    position = {
        (record["module"], record["class_name"]): index
        for index, record in enumerate(revision.discovered_scripts or [])
    }
    serving.sort(key=lambda p: position.get((p.module_name, p.class_name), len(position)))
    # Retired revisions' modules go before the serving one is loaded.
    evict_revisions_except(
        PublishedScript.objects.filter(revision__isnull=False, enabled=True)
        .values_list("revision_id", flat=True)
        .distinct()
    )
    loaded = load_revision(revision)
    module = types.ModuleType(f"{loaded.namespace}.{module_name_for(serving[0].script_file_path)}")
    order = []
    for publication in serving:
        if publication.revision_id != revision.pk:
            continue
        defining = loaded.import_module(publication.module_name)
        cls = getattr(defining, publication.class_name)
        setattr(module, publication.class_name, cls)
        order.append(cls)
    module.script_order = order
    return module


def _is_published_path(file_root, file_path) -> bool:
    from core.choices import ManagedFileRootPathChoices

    from ..activation import MODULE_PATH_PREFIX

    return file_root == ManagedFileRootPathChoices.SCRIPTS and str(file_path or "").startswith(
        MODULE_PATH_PREFIX + "/"
    )


def published_module_ids() -> list[int]:
    """The primary keys of every ScriptModule this plugin publishes (one query)."""
    from core.choices import ManagedFileRootPathChoices
    from extras.models import ScriptModule

    from ..activation import MODULE_PATH_PREFIX

    return list(
        ScriptModule.objects.filter(
            file_root=ManagedFileRootPathChoices.SCRIPTS,
            file_path__startswith=MODULE_PATH_PREFIX + "/",
        ).values_list("pk", flat=True)
    )


def is_published_module(script_module, stored=False) -> bool:
    """Whether a ScriptModule (or its ManagedFile) is one this plugin publishes.

    stored: judge by the row as saved, not by edits pending on the instance.
    """
    from core.models import ManagedFile

    if stored and script_module.pk:
        row = ManagedFile.objects.filter(pk=script_module.pk).values("file_root", "file_path")
        row = row.first()
        if row is not None:
            return _is_published_path(row["file_root"], row["file_path"])
    return _is_published_path(script_module.file_root, script_module.file_path)


def published_module_title(script_module) -> str | None:
    """`<project>: <module>` for a plugin-published module, else None.

    NetBox titles a module by its Python name, which for these is the
    Project-local `scripts.hello`: two Projects would look alike.
    """
    from ..models import PublishedScript

    if not is_published_module(script_module):
        return None
    publication = (
        PublishedScript.objects.filter(script__module_id=script_module.pk)
        .select_related("project")
        .order_by("pk")
        .first()
    )
    if publication is None:
        return None
    return f"{publication.project.name}: {module_name_for(publication.script_file_path)}"


def install():
    """Route ScriptModule.get_module() through published_module() and title
    plugin-published modules by their Project (idempotent)."""
    global _netbox_get_module
    from extras.models import ScriptModule

    if _netbox_get_module is not None:
        return
    _netbox_get_module = ScriptModule.get_module
    netbox_str = ScriptModule.__str__

    def get_module(self):
        module = published_module(self)
        if module is not None:
            return module
        return _netbox_get_module(self)

    def title(self):
        return published_module_title(self) or netbox_str(self)

    ScriptModule.get_module = get_module
    ScriptModule.__str__ = title
