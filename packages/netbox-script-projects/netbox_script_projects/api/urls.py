from netbox.api.routers import NetBoxRouter

from . import views

router = NetBoxRouter()
router.APIRootView = views.ScriptProjectsRootView
router.register("projects", views.ScriptProjectViewSet)
router.register("script-files", views.ScriptFileViewSet)
router.register("project-revisions", views.ScriptProjectRevisionViewSet)
router.register("published-scripts", views.PublishedScriptViewSet)

app_name = "netbox_script_projects-api"
urlpatterns = router.urls
