"""What this plugin adds to NetBox's own pages (NetBox loads `template_extensions`)."""

from __future__ import annotations

from django.urls import reverse
from netbox.plugins import PluginTemplateExtension

from .runtime.published import published_module_ids

SCRIPT_LIST_VIEW = "extras:script_list"


def _css_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("<", "\\3c ") + '"'


class PublishedModuleActions(PluginTemplateExtension):
    """NetBox's Scripts page offers no Edit or Delete for plugin-published modules.

    Those modules are managed only through their Project (the server refuses both
    actions: `signals.refuse_unmanaged_module_change`). NetBox draws the two links on
    every module card for anyone holding the global change/delete permission, and its
    template has no per-module hook, so the page's head carries a rule that takes the
    links of each published module out of the page, found by the URLs NetBox itself
    reverses for them (independent of the card's markup).
    """

    def head(self):
        request = self.context.get("request")
        match = getattr(request, "resolver_match", None)
        if match is None or match.view_name != SCRIPT_LIST_VIEW:
            return ""
        selectors = [
            f"a[href^={_css_string(reverse(f'extras:scriptmodule_{action}', kwargs={'pk': pk}))}]"
            for pk in published_module_ids()
            for action in ("edit", "delete")
        ]
        if not selectors:
            return ""
        rule = ",\n".join(selectors) + " { display: none !important; }"
        return f'<style data-script-projects="published-module-actions">\n{rule}\n</style>'


template_extensions = [PublishedModuleActions]
