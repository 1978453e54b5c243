from netbox.api.routers import NetBoxRouter

from . import views

router = NetBoxRouter()
router.APIRootView = views.ProxboxRootView

# Stable public paths (other components depend on them; see README).
router.register("endpoints/proxmox", views.ProxmoxEndpointViewSet)
router.register("clusters", views.ProxmoxClusterViewSet)
router.register("cluster-sync-states", views.ProxboxClusterSyncStateViewSet)

app_name = "netbox_proxbox-api"
urlpatterns = router.urls
