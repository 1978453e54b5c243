from contextlib import ExitStack, contextmanager

from django.core.exceptions import ValidationError as ModelValidationError
from django.db.models import Case, IntegerField, Value, When
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from netbox.api.authentication import TokenWritePermission
from netbox.api.viewsets import NetBoxModelViewSet, NetBoxReadOnlyModelViewSet
from rest_framework import serializers as drf
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.exceptions import APIException, PermissionDenied, ValidationError
from rest_framework.generics import get_object_or_404
from rest_framework.parsers import MultiPartParser
from rest_framework.response import Response
from rest_framework.routers import APIRootView

from .. import filtersets
from ..activation import ACTIVATE_ACTION, ActivationRefused, activate_revision, deactivate_revision
from ..choices import RevisionStatusChoices
from ..models import PublishedScript, ScriptFile, ScriptProject, ScriptProjectRevision
from ..storage import errors
from ..storage.locks import lock_key, project_lock
from ..storage.service import refresh_revision, stage_upload
from ..validation import accept_source
from . import serializers


class ScriptProjectsRootView(APIRootView):
    def get_view_name(self):
        return "Script Projects"


# What upload/ and refresh/ answer, documented so that clients and the schema fuzzing
# (e2e/test_plugin_api_fuzz.py) know every status they can get.
STAGED = inline_serializer(
    "StagedRevision",
    {
        "outcome": drf.CharField(),
        "revision": serializers.ScriptProjectRevisionSerializer(),
        # What followed the staging, reported apart from it: a failed automatic
        # activation does not turn a stored upload into an error response.
        "activation": inline_serializer(
            "StagedRevisionActivation",
            {
                "outcome": drf.ChoiceField(choices=["queued", "activated", "none", "failed"]),
                "detail": drf.CharField(allow_null=True),
            },
        ),
    },
)
STAGING_RESPONSES = {
    200: STAGED,
    201: STAGED,
    400: OpenApiResponse(description="The request or the submitted source is invalid."),
    403: OpenApiResponse(description="Adding revisions of this project is not permitted."),
    404: OpenApiResponse(description="No such project visible to the user."),
    409: OpenApiResponse(description="The stored source failed verification."),
    503: OpenApiResponse(description="The project is busy or storage failed; retry."),
}
LIFECYCLE_RESPONSES = {
    200: serializers.ScriptProjectRevisionSerializer,
    400: OpenApiResponse(description="The stored source is refused."),
    403: OpenApiResponse(description="Activating revisions of this project is not permitted."),
    404: OpenApiResponse(description="No such revision visible to the user."),
    409: OpenApiResponse(description="The revision's status or stored source forbids it."),
    503: OpenApiResponse(description="The project is busy or storage failed; retry."),
}


class ProjectBusyError(APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "The project is busy; retry shortly."
    default_code = "project_busy"


def storage_error_response(exc, request) -> Response:
    """The REST shape of a storage-service failure."""
    context = {"request": request}

    def revision(rev):
        return (
            serializers.ScriptProjectRevisionSerializer(rev, context=context).data if rev else None
        )

    if isinstance(exc, errors.SubmissionRejected):
        body = {
            "detail": "The upload was rejected.",
            "errors": exc.errors,
            "revision": revision(exc.revision),
        }
        return Response(body, status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, errors.StorageWriteFailed):
        body = {"detail": "Storage write failed; upload again to resume.", "errors": exc.errors,
                "revision": revision(exc.revision)}  # fmt: skip
        return Response(body, status=status.HTTP_503_SERVICE_UNAVAILABLE)
    if isinstance(exc, errors.VerificationFailed):
        body = {"detail": str(exc), "findings": exc.findings, "revision": revision(exc.revision)}
        return Response(body, status=status.HTTP_409_CONFLICT)
    if isinstance(exc, errors.RevisionCorrupt):
        body = {
            "detail": "The revision is corrupt; the operation was refused.",
            "problems": exc.problems,
        }
        return Response(body, status=status.HTTP_409_CONFLICT)
    if isinstance(
        exc,
        errors.RevisionVanished
        | errors.RevisionNotReusable
        | errors.UnsafeDatabaseAlias
        | ActivationRefused,
    ):
        return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
    if isinstance(exc, errors.ProjectBusy):
        return Response(
            {"detail": str(exc)},
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
            headers={"Retry-After": "5"},
        )
    raise exc


def activation_failure_detail(exc) -> str:
    """One line naming why an automatic activation after staging failed."""
    if isinstance(exc, errors.RevisionCorrupt):
        return "The revision is corrupt; automatic activation was refused."
    if isinstance(exc, errors.VerificationFailed):
        return "Stored content differs from its manifest; automatic activation was refused."
    return f"Automatic activation failed: {exc}"


class ScriptProjectViewSet(NetBoxModelViewSet):
    queryset = ScriptProject.objects.select_related("active_revision")
    serializer_class = serializers.ScriptProjectSerializer
    filterset_class = filtersets.ScriptProjectFilterSet

    def get_permissions(self):
        # Source changes are governed by change on the project plus add on
        # revisions (checked in _source_project), not by add_scriptproject.
        if self.action in ("upload", "refresh"):
            return [TokenWritePermission()]
        return super().get_permissions()

    def _source_project(self, request, pk):
        # DRF's get_object_or_404: a malformed id ("abc") is a 404, as on
        # NetBox's own detail routes, not a ValueError.
        changeable = ScriptProject.objects.restrict(request.user, "change")
        project = changeable.filter(pk=pk).first() if str(pk).isdigit() else None
        if project is None:
            # Visible but not changeable: refused (403), not "not found".
            get_object_or_404(ScriptProject.objects.restrict(request.user, "view"), pk=pk)
            raise PermissionDenied("Changing this script project is not permitted.")
        if not request.user.has_perm("netbox_script_projects.add_scriptprojectrevision"):
            raise PermissionDenied("Adding script project revisions is not permitted.")
        return project

    def _staged(self, request, result) -> Response:
        """The staging's own answer, with what followed it (validation or
        automatic activation) reported separately: the source is stored even
        when activating it afterwards fails."""
        try:
            follow_up = {"outcome": accept_source(result.revision) or "none", "detail": None}
        except errors.ScriptProjectStorageError as exc:
            follow_up = {"outcome": "failed", "detail": activation_failure_detail(exc)}
        result.revision.refresh_from_db()
        data = serializers.ScriptProjectRevisionSerializer(
            result.revision, context={"request": request}
        ).data
        code = status.HTTP_201_CREATED if result.created else status.HTTP_200_OK
        return Response(
            {"outcome": result.outcome, "revision": data, "activation": follow_up}, status=code
        )

    @extend_schema(
        request={"multipart/form-data": serializers.UploadSerializer}, responses=STAGING_RESPONSES
    )
    @action(detail=True, methods=["post"], parser_classes=[MultiPartParser])
    def upload(self, request, pk):
        """Stage a .py file or a zip/tar/tar.gz archive as a revision of this project."""
        project = self._source_project(request, pk)
        upload = serializers.UploadSerializer(data=request.data)
        upload.is_valid(raise_exception=True)
        uploaded = upload.validated_data["file"]
        try:
            result = stage_upload(project, uploaded, uploaded.name)
        except errors.ScriptProjectStorageError as exc:
            return storage_error_response(exc, request)
        return self._staged(request, result)

    @extend_schema(request=serializers.RefreshSerializer, responses=STAGING_RESPONSES)
    @action(detail=True, methods=["post"])
    def refresh(self, request, pk):
        """The revision of stored source under the current Script File selection."""
        project = self._source_project(request, pk)
        body = serializers.RefreshSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        revisions = ScriptProjectRevision.objects.restrict(request.user, "view").filter(
            project=project
        )
        if "revision" in body.validated_data:
            source = revisions.filter(pk=body.validated_data["revision"]).first()
            if source is None:
                return Response({"revision": ["No such revision of this project."]}, status=400)
        else:
            source = (
                revisions.filter(status__in=RevisionStatusChoices.STORED)
                .annotate(
                    is_active=Case(
                        When(pk=project.active_revision_id, then=Value(0)),
                        default=Value(1),
                        output_field=IntegerField(),
                    )
                )  # fmt: skip
                .order_by("is_active", "-created", "-pk")
                .first()
            )
            if source is None:
                return Response(
                    {"revision": ["The project has no stored revision to refresh."]}, status=400
                )
        try:
            result = refresh_revision(source)
        except errors.ScriptProjectStorageError as exc:
            return storage_error_response(exc, request)
        return self._staged(request, result)

    def perform_destroy(self, instance):
        # REST deletion takes the Project lock before NetBox's delete, so no
        # staging, refresh or cleanup interleaves with the cascade.
        try:
            with project_lock(instance.storage_key):
                super().perform_destroy(instance)
        except errors.ProjectBusy as exc:
            raise ProjectBusyError(str(exc)) from exc

    def perform_bulk_destroy(self, objects, changelog_messages=None):
        # One lock per project, always taken in key order so two bulk
        # deletions cannot deadlock each other.
        projects = sorted(objects, key=lambda p: lock_key(p.storage_key))
        try:
            with ExitStack() as locks:
                for project in projects:
                    locks.enter_context(project_lock(project.storage_key))
                return super().perform_bulk_destroy(projects, changelog_messages)
        except errors.ProjectBusy as exc:
            raise ProjectBusyError(str(exc)) from exc


class ScriptFileViewSet(NetBoxModelViewSet):
    queryset = ScriptFile.objects.select_related("project")
    serializer_class = serializers.ScriptFileSerializer
    filterset_class = filtersets.ScriptFileFilterSet
    # Script File rows are removed only by Project deletion (disable instead).
    http_method_names = ["get", "post", "put", "patch", "head", "options"]

    def perform_create(self, serializer):
        with _script_file_write_errors():
            super().perform_create(serializer)

    def perform_update(self, serializer):
        with _script_file_write_errors():
            super().perform_update(serializer)


@contextmanager
def _script_file_write_errors():
    """What ScriptFile.save() raises under the Project write lock, as REST errors."""
    try:
        yield
    except errors.ProjectBusy as exc:
        raise ProjectBusyError(str(exc)) from exc
    except ModelValidationError as exc:
        # The declaration check repeated under the lock (a concurrent edit won).
        raise ValidationError(exc.message_dict) from exc


class ScriptProjectRevisionViewSet(NetBoxReadOnlyModelViewSet):
    """Read-only: lifecycle changes go through source and activation actions."""

    queryset = ScriptProjectRevision.objects.select_related("project")
    serializer_class = serializers.ScriptProjectRevisionSerializer
    filterset_class = filtersets.ScriptProjectRevisionFilterSet

    def get_permissions(self):
        # Governed by the owning Project's activate permission (checked in
        # _activation_target), not by a change permission on revisions.
        if self.action in ("activate", "deactivate"):
            return [TokenWritePermission()]
        return super().get_permissions()

    def _activation_target(self, request, pk):
        revision = get_object_or_404(
            ScriptProjectRevision.objects.restrict(request.user, "view").select_related("project"),
            pk=pk,
        )
        allowed = ScriptProject.objects.restrict(request.user, ACTIVATE_ACTION).filter(
            pk=revision.project_id
        )
        if not allowed.exists():
            raise PermissionDenied("Activating revisions of this project is not permitted.")
        return revision

    def _lifecycle(self, request, pk, operation) -> Response:
        revision = self._activation_target(request, pk)
        try:
            revision = operation(revision)
        except errors.ScriptProjectStorageError as exc:
            return storage_error_response(exc, request)
        data = serializers.ScriptProjectRevisionSerializer(revision, context={"request": request})
        return Response(data.data)

    @extend_schema(request=None, responses=LIFECYCLE_RESPONSES)
    @action(detail=True, methods=["post"])
    def activate(self, request, pk):
        """Serve this valid or retired revision and publish its Scripts."""
        return self._lifecycle(request, pk, activate_revision)

    @extend_schema(request=None, responses=LIFECYCLE_RESPONSES)
    @action(detail=True, methods=["post"])
    def deactivate(self, request, pk):
        """Retire this active revision and its Scripts; the Project serves nothing."""
        return self._lifecycle(request, pk, deactivate_revision)


class PublishedScriptViewSet(NetBoxModelViewSet):
    """The NetBox Scripts a Project published; only the administrator's `enabled` changes.

    Rows come and go with activation and Project deletion: no create or delete.
    """

    queryset = PublishedScript.objects.select_related("project", "script", "revision")
    serializer_class = serializers.PublishedScriptSerializer
    filterset_class = filtersets.PublishedScriptFilterSet
    http_method_names = ["get", "put", "patch", "head", "options"]

    def handle_exception(self, exc):
        # The Project write lock (PublishedScript.save) timing out, single or bulk.
        if isinstance(exc, errors.ProjectBusy):
            exc = ProjectBusyError(str(exc))
        return super().handle_exception(exc)
