from django.urls import include, path
from utilities.urls import get_model_urls

from . import views  # noqa: F401  (registers the model views)

app_name = "netbox_proxbox"

urlpatterns = [
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
