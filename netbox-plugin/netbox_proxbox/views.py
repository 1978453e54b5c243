from netbox.views import generic
from utilities.views import register_model_view
from virtualization.models import Cluster

from . import filtersets, forms, tables
from .models import ProxboxClusterSyncState, ProxmoxCluster, ProxmoxEndpoint

#
# Endpoints
#


@register_model_view(ProxmoxEndpoint, "list", path="", detail=False)
class ProxmoxEndpointListView(generic.ObjectListView):
    queryset = ProxmoxEndpoint.objects.select_related("site", "tenant", "netbox_cluster")
    table = tables.ProxmoxEndpointTable
    filterset = filtersets.ProxmoxEndpointFilterSet
    filterset_form = forms.ProxmoxEndpointFilterForm


@register_model_view(ProxmoxEndpoint)
class ProxmoxEndpointView(generic.ObjectView):
    queryset = ProxmoxEndpoint.objects.all()

    def get_extra_context(self, request, instance):
        # The relation is shown as a link only to viewers who may see the native cluster.
        native_cluster = None
        if instance.netbox_cluster_id is not None:
            native_cluster = (
                Cluster.objects.restrict(request.user, "view")
                .filter(pk=instance.netbox_cluster_id)
                .first()
            )
        tracking = ProxmoxCluster.objects.restrict(request.user, "view").filter(endpoint=instance)
        return {"native_cluster": native_cluster, "tracking_records": tracking}


@register_model_view(ProxmoxEndpoint, "add", detail=False)
@register_model_view(ProxmoxEndpoint, "edit")
class ProxmoxEndpointEditView(generic.ObjectEditView):
    queryset = ProxmoxEndpoint.objects.all()
    form = forms.ProxmoxEndpointForm


@register_model_view(ProxmoxEndpoint, "delete")
class ProxmoxEndpointDeleteView(generic.ObjectDeleteView):
    queryset = ProxmoxEndpoint.objects.all()


@register_model_view(ProxmoxEndpoint, "bulk_edit", path="edit", detail=False)
class ProxmoxEndpointBulkEditView(generic.BulkEditView):
    queryset = ProxmoxEndpoint.objects.all()
    filterset = filtersets.ProxmoxEndpointFilterSet
    table = tables.ProxmoxEndpointTable
    form = forms.ProxmoxEndpointBulkEditForm


@register_model_view(ProxmoxEndpoint, "bulk_delete", path="delete", detail=False)
class ProxmoxEndpointBulkDeleteView(generic.BulkDeleteView):
    queryset = ProxmoxEndpoint.objects.all()
    filterset = filtersets.ProxmoxEndpointFilterSet
    table = tables.ProxmoxEndpointTable


#
# Tracking records
#


@register_model_view(ProxmoxCluster, "list", path="", detail=False)
class ProxmoxClusterListView(generic.ObjectListView):
    queryset = ProxmoxCluster.objects.select_related("endpoint", "netbox_cluster")
    table = tables.ProxmoxClusterTable
    filterset = filtersets.ProxmoxClusterFilterSet
    filterset_form = forms.ProxmoxClusterFilterForm


@register_model_view(ProxmoxCluster)
class ProxmoxClusterView(generic.ObjectView):
    queryset = ProxmoxCluster.objects.all()


@register_model_view(ProxmoxCluster, "add", detail=False)
@register_model_view(ProxmoxCluster, "edit")
class ProxmoxClusterEditView(generic.ObjectEditView):
    queryset = ProxmoxCluster.objects.all()
    form = forms.ProxmoxClusterForm


@register_model_view(ProxmoxCluster, "delete")
class ProxmoxClusterDeleteView(generic.ObjectDeleteView):
    queryset = ProxmoxCluster.objects.all()


@register_model_view(ProxmoxCluster, "bulk_delete", path="delete", detail=False)
class ProxmoxClusterBulkDeleteView(generic.BulkDeleteView):
    queryset = ProxmoxCluster.objects.all()
    filterset = filtersets.ProxmoxClusterFilterSet
    table = tables.ProxmoxClusterTable


#
# Typed sidecars
#


@register_model_view(ProxboxClusterSyncState, "list", path="", detail=False)
class ProxboxClusterSyncStateListView(generic.ObjectListView):
    queryset = ProxboxClusterSyncState.objects.select_related("cluster", "proxmox_cluster")
    table = tables.ProxboxClusterSyncStateTable
    filterset = filtersets.ProxboxClusterSyncStateFilterSet
    filterset_form = forms.ProxboxClusterSyncStateFilterForm


@register_model_view(ProxboxClusterSyncState)
class ProxboxClusterSyncStateView(generic.ObjectView):
    queryset = ProxboxClusterSyncState.objects.all()


@register_model_view(ProxboxClusterSyncState, "add", detail=False)
@register_model_view(ProxboxClusterSyncState, "edit")
class ProxboxClusterSyncStateEditView(generic.ObjectEditView):
    queryset = ProxboxClusterSyncState.objects.all()
    form = forms.ProxboxClusterSyncStateForm


@register_model_view(ProxboxClusterSyncState, "delete")
class ProxboxClusterSyncStateDeleteView(generic.ObjectDeleteView):
    queryset = ProxboxClusterSyncState.objects.all()


@register_model_view(ProxboxClusterSyncState, "bulk_delete", path="delete", detail=False)
class ProxboxClusterSyncStateBulkDeleteView(generic.BulkDeleteView):
    queryset = ProxboxClusterSyncState.objects.all()
    filterset = filtersets.ProxboxClusterSyncStateFilterSet
    table = tables.ProxboxClusterSyncStateTable
