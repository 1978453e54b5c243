from django.urls import include, path
from utilities.urls import get_model_urls

from . import views

app_name = "netbox_proxbox"

INVENTORY_PATHS = (
    ("storages", "proxmoxstorage"),
    ("backups", "proxmoxbackup"),
    ("backup-jobs", "proxmoxbackupjob"),
    ("snapshots", "proxmoxsnapshot"),
    ("replication-jobs", "proxmoxreplicationjob"),
    ("ha-groups", "proxmoxhagroup"),
    ("ha-resources", "proxmoxharesource"),
    ("ha-rules", "proxmoxharule"),
)

urlpatterns = [
    path("sync-jobs/<int:pk>/report/", views.SyncJobReportView.as_view(), name="sync_job_report"),
    path(
        "sync-object/<str:model>/<int:pk>/",
        views.SyncObjectView.as_view(),
        name="sync_object",
    ),
    path("endpoints/", include(get_model_urls("netbox_proxbox", "proxmoxendpoint", detail=False))),
    path("endpoints/<int:pk>/", include(get_model_urls("netbox_proxbox", "proxmoxendpoint"))),
    path(
        "node-type-overrides/",
        include(get_model_urls("netbox_proxbox", "proxmoxnodetypeoverride", detail=False)),
    ),
    path(
        "node-type-overrides/<int:pk>/",
        include(get_model_urls("netbox_proxbox", "proxmoxnodetypeoverride")),
    ),
    path("clusters/", include(get_model_urls("netbox_proxbox", "proxmoxcluster", detail=False))),
    path("clusters/<int:pk>/", include(get_model_urls("netbox_proxbox", "proxmoxcluster"))),
    path(
        "sync-states/",
        include(get_model_urls("netbox_proxbox", "proxboxclustersyncstate", detail=False)),
    ),
    path(
        "sync-states/<int:pk>/",
        include(get_model_urls("netbox_proxbox", "proxboxclustersyncstate")),
    ),
    *(
        path(
            f"inventory/{prefix}/",
            include(get_model_urls("netbox_proxbox", model, detail=False)),
        )
        for prefix, model in INVENTORY_PATHS
    ),
    *(
        path(f"inventory/{prefix}/<int:pk>/", include(get_model_urls("netbox_proxbox", model)))
        for prefix, model in INVENTORY_PATHS
    ),
]
