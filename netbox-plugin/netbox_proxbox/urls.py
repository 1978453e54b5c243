from django.urls import include, path
from utilities.urls import get_model_urls

from . import views, views_compliance

app_name = "netbox_proxbox"

MODEL_PATHS = (
    ("endpoints", "proxmoxendpoint"),
    ("assignment-rules", "proxmoxassignmentrule"),
    ("node-type-overrides", "proxmoxnodetypeoverride"),
    ("clusters", "proxmoxcluster"),
    ("sync-states", "proxboxclustersyncstate"),
)
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
    # Data-protection compliance (computed from the inventory).
    path("compliance/", views_compliance.ComplianceListView.as_view(), name="compliance_list"),
    path("sync-jobs/<int:pk>/report/", views.SyncJobReportView.as_view(), name="sync_job_report"),
    path(
        "sync-object/<str:model>/<int:pk>/",
        views.SyncObjectView.as_view(),
        name="sync_object",
    ),
    *(
        path(f"{prefix}/", include(get_model_urls("netbox_proxbox", model, detail=False)))
        for prefix, model in MODEL_PATHS
    ),
    *(
        path(f"{prefix}/<int:pk>/", include(get_model_urls("netbox_proxbox", model)))
        for prefix, model in MODEL_PATHS
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
