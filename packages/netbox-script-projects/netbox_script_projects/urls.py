from django.urls import include, path
from utilities.urls import get_model_urls

from . import views  # noqa: F401  (registers the model views)

urlpatterns = (
    path(
        "projects/",
        include(get_model_urls("netbox_script_projects", "scriptproject", detail=False)),
    ),
    path("projects/<int:pk>/", include(get_model_urls("netbox_script_projects", "scriptproject"))),
    path(
        "script-files/",
        include(get_model_urls("netbox_script_projects", "scriptfile", detail=False)),
    ),
    path("script-files/<int:pk>/", include(get_model_urls("netbox_script_projects", "scriptfile"))),
    path(
        "published-scripts/<int:pk>/",
        include(get_model_urls("netbox_script_projects", "publishedscript")),
    ),
    path(
        "revisions/<int:pk>/",
        include(get_model_urls("netbox_script_projects", "scriptprojectrevision")),
    ),
)
