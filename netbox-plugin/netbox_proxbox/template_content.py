"""A panel on NetBox's own Cluster page linking back to the owning endpoint."""

from netbox.plugins import PluginTemplateExtension

from .models import ProxmoxEndpoint


class NativeClusterOwnerPanel(PluginTemplateExtension):
    models = ["virtualization.cluster"]

    def right_page(self):
        cluster = self.context["object"]
        user = self.context["request"].user
        # Read from the endpoint side, so clusters without a typed sidecar get the link too,
        # and only when the viewer may see the endpoint.
        endpoint = (
            ProxmoxEndpoint.objects.restrict(user, "view").filter(netbox_cluster=cluster).first()
        )
        if endpoint is None:
            return ""
        sync_state = None
        if user.has_perm("netbox_proxbox.view_proxboxclustersyncstate"):
            from .models import ProxboxClusterSyncState

            sync_state = (
                ProxboxClusterSyncState.objects.restrict(user, "view")
                .filter(cluster=cluster)
                .first()
            )
        return self.render(
            "netbox_proxbox/inc/cluster_owner_panel.html",
            extra_context={"endpoint": endpoint, "sync_state": sync_state},
        )


template_extensions = [NativeClusterOwnerPanel]
