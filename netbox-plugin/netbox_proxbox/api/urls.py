from netbox.api.routers import NetBoxRouter

from . import compliance, inventory, views

router = NetBoxRouter()
router.APIRootView = views.ProxboxRootView

# Stable public paths (other components depend on them; see README).
router.register("endpoints/proxmox", views.ProxmoxEndpointViewSet)
router.register("assignment-rules", views.ProxmoxAssignmentRuleViewSet)
router.register("clusters", views.ProxmoxClusterViewSet)
router.register("cluster-sync-states", views.ProxboxClusterSyncStateViewSet)
router.register("node-type-overrides", views.ProxmoxNodeTypeOverrideViewSet)
for prefix, viewset in inventory.ROUTES:
    router.register(f"inventory/{prefix}", viewset)

# Data-protection compliance (read-only, computed from the inventory).
router.register("compliance", compliance.ComplianceViewSet, basename="compliance")

app_name = "netbox_proxbox-api"
urlpatterns = router.urls
