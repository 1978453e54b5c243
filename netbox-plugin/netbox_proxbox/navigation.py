from django.utils.translation import gettext_lazy as _
from netbox.plugins import PluginMenu, PluginMenuButton, PluginMenuItem


def _record(model, label):
    """Records the claim and the sync write (tracking, sync states, inventory): no Add button."""
    return PluginMenuItem(
        link=f"plugins:netbox_proxbox:{model}_list",
        link_text=label,
        permissions=[f"netbox_proxbox.view_{model}"],
    )


def _item(model, label):
    return PluginMenuItem(
        link=f"plugins:netbox_proxbox:{model}_list",
        link_text=label,
        permissions=[f"netbox_proxbox.view_{model}"],
        buttons=(
            PluginMenuButton(
                link=f"plugins:netbox_proxbox:{model}_add",
                title=_("Add"),
                icon_class="mdi mdi-plus-thick",
                permissions=[f"netbox_proxbox.add_{model}"],
            ),
        ),
    )


menu = PluginMenu(
    label="Proxbox",
    icon_class="mdi mdi-server-network",
    groups=(
        (
            _("Proxmox"),
            (
                _item("proxmoxendpoint", _("Endpoints")),
                _item("proxmoxassignmentrule", _("Assignment rules")),
                _item("proxmoxnodetypeoverride", _("Node type overrides")),
                _record("proxmoxcluster", _("Tracked clusters")),
                _record("proxboxclustersyncstate", _("Cluster sync states")),
            ),
        ),
        (
            _("Inventory"),
            (
                _record("proxmoxstorage", _("Storages")),
                _record("proxmoxbackup", _("Backups")),
                _record("proxmoxbackupjob", _("Backup jobs")),
                _record("proxmoxsnapshot", _("Snapshots")),
                _record("proxmoxreplicationjob", _("Replication jobs")),
                _record("proxmoxhagroup", _("HA groups")),
                _record("proxmoxharesource", _("HA resources")),
                _record("proxmoxharule", _("HA rules")),
            ),
        ),
        (
            _("Compliance"),
            (
                PluginMenuItem(
                    link="plugins:netbox_proxbox:compliance_list",
                    link_text=_("Data protection"),
                    permissions=["virtualization.view_virtualmachine"],
                ),
            ),
        ),
    ),
)
