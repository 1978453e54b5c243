from django.utils.translation import gettext_lazy as _
from netbox.plugins import PluginMenu, PluginMenuButton, PluginMenuItem

menu = PluginMenu(
    label=_("Script Projects"),
    icon_class="mdi mdi-script-text-outline",
    groups=(
        (
            _("Source"),
            (
                PluginMenuItem(
                    link="plugins:netbox_script_projects:scriptproject_list",
                    link_text=_("Projects"),
                    permissions=["netbox_script_projects.view_scriptproject"],
                    buttons=(
                        PluginMenuButton(
                            "plugins:netbox_script_projects:scriptproject_add",
                            _("Add"),
                            "mdi mdi-plus-thick",
                            permissions=["netbox_script_projects.add_scriptproject"],
                        ),
                    ),
                ),
                PluginMenuItem(
                    link="plugins:netbox_script_projects:scriptfile_list",
                    link_text=_("Script Files"),
                    permissions=["netbox_script_projects.view_scriptfile"],
                ),
            ),
        ),
    ),
)
