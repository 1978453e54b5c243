"""What the plugin adds to NetBox's own pages: the owning endpoint on a Cluster page, Sync
now on synced VMs and node devices, the sync report on a sync Job's page."""

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


class SyncObjectButton(PluginTemplateExtension):
    """ "Sync now" on a synced VM's or node device's page, for users who may sync its endpoint."""

    models = ["virtualization.virtualmachine", "dcim.device"]

    def buttons(self):
        from .sync.service import SyncRequestError, may_request_sync, target_of

        obj = self.context["object"]
        user = self.context["request"].user
        try:
            endpoint, _target = target_of(user, obj)
        except SyncRequestError:
            return ""
        if not may_request_sync(user, endpoint):
            return ""
        return self.render(
            "netbox_proxbox/inc/sync_object_button.html",
            extra_context={"model": obj._meta.model_name, "endpoint": endpoint},
        )


class SyncJobReportPanel(PluginTemplateExtension):
    """A sync Job's report as tables (counters, failures, warnings) on NetBox's Job page,
    following the run live while the Job waits or runs."""

    models = ["core.job"]

    def full_width_page(self):
        from .sync.report import is_sync_job, sync_job_report_context

        job = self.context["object"]
        if not is_sync_job(job):
            return ""
        return self.render(
            "netbox_proxbox/inc/sync_job_report.html", extra_context=sync_job_report_context(job)
        )


template_extensions = [NativeClusterOwnerPanel, SyncObjectButton, SyncJobReportPanel]
