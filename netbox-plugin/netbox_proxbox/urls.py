from django.urls import include, path
from utilities.urls import get_model_urls

from . import views

app_name = "netbox_proxbox"

urlpatterns = [
    path(
        "sync-object/<str:model>/<int:pk>/",
        views.SyncObjectView.as_view(),
        name="sync_object",
    ),
    path("endpoints/", include(get_model_urls("netbox_proxbox", "proxmoxendpoint", detail=False))),
    path("endpoints/<int:pk>/", include(get_model_urls("netbox_proxbox", "proxmoxendpoint"))),
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
]
