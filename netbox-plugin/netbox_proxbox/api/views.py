"""REST views. Thin: the claim's rules live in ownership/, the invariants on the models."""

from __future__ import annotations

from core.api.serializers import JobSerializer
from drf_spectacular.utils import OpenApiResponse, extend_schema
from netbox.api.viewsets import NetBoxModelViewSet
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.permissions import SAFE_METHODS, BasePermission, IsAuthenticated
from rest_framework.response import Response
from rest_framework.routers import APIRootView
from users.models import Token
from virtualization.api.serializers_.clusters import ClusterSerializer

from .. import filtersets
from ..credentials import may_reveal_credentials
from ..encryption import SecretDecryptionError
from ..models import (
    ProxboxClusterSyncState,
    ProxmoxAssignmentRule,
    ProxmoxCluster,
    ProxmoxEndpoint,
    ProxmoxNodeTypeOverride,
)
from ..ownership import permissions
from ..ownership.claim import UNSET, ClaimRequest, claim_native_cluster
from ..ownership.errors import ClaimError, ConcurrentInventoryChange, is_retryable
from ..sync.jobs import record_live_run
from ..sync.service import (
    SyncForbidden,
    SyncRequestError,
    find_endpoint,
    may_request_sync,
    preview_sync,
    request_sync,
    target_of,
)
from . import serializers

# What the actions answer when they refuse (each carries `detail`): documented so that
# clients and the schema fuzzing (e2e/test_plugin_api_fuzz.py) know them.
REFUSALS = {
    400: OpenApiResponse(description="The request or the endpoint's state is invalid."),
    403: OpenApiResponse(description="The token or user may not do this."),
    404: OpenApiResponse(description="No such endpoint visible to the user."),
    409: OpenApiResponse(description="Conflicts with the current state."),
}


class ProxboxRootView(APIRootView):
    def get_view_name(self):
        return "Proxbox"


class WriteEnabledCredentials(BasePermission):
    """Token credentials must allow writes; session users are checked by object permissions."""

    message = "This API token does not permit write operations."

    def has_permission(self, request, view):
        if isinstance(request.auth, Token):
            return request.method in SAFE_METHODS or request.auth.write_enabled
        return True


class ConcurrencyConflictsAs409:
    """Deadlocks and serialization failures surfacing anywhere in a write answer 409 (retry)."""

    def handle_exception(self, exc):
        if is_retryable(exc):
            exc = ConcurrentInventoryChange(
                "The request collided with a concurrent inventory change."
            )
        return super().handle_exception(exc)


class ProxmoxEndpointViewSet(ConcurrencyConflictsAs409, NetBoxModelViewSet):
    queryset = ProxmoxEndpoint.objects.select_related(
        "site", "tenant", "netbox_cluster", "node_device_type"
    ).prefetch_related("node_type_overrides")
    serializer_class = serializers.ProxmoxEndpointSerializer
    filterset_class = filtersets.ProxmoxEndpointFilterSet

    def get_permissions(self):
        if self.action in ("sync_cluster", "sync", "preview", "live_runs"):
            # Object-level checks (endpoint, native cluster, references) happen in the service.
            return [IsAuthenticated(), WriteEnabledCredentials()]
        if self.action == "credentials":
            # A read: read-only tokens qualify. The object-level check is the action's own.
            return [IsAuthenticated()]
        return super().get_permissions()

    @extend_schema(
        request=None, responses={200: serializers.EndpointCredentialsSerializer, **REFUSALS}
    )
    @action(detail=True, methods=["get"], url_path="credentials")
    def credentials(self, request, pk):
        """The endpoint's decrypted Proxmox API token, for holders of `reveal_credentials` only."""
        try:
            endpoint = find_endpoint(request.user, pk)
        except SyncRequestError as exc:
            return _no_store(Response(exc.as_response_data(), status=exc.status_code))
        if not may_reveal_credentials(request.user, endpoint):
            return _no_store(
                Response(
                    {
                        "detail": "Reading this endpoint's credentials requires the "
                        "'reveal_credentials' action on it.",
                        "code": "permission_denied",
                    },
                    status=status.HTTP_403_FORBIDDEN,
                )
            )
        try:
            secret = endpoint.reveal_token_secret()
        except SecretDecryptionError as exc:
            return _no_store(
                Response({"detail": str(exc), "code": "secret_undecryptable"}, status=409)
            )
        return _no_store(Response({"token_id": endpoint.token_id, "token_secret": secret}))

    @extend_schema(
        request=serializers.SyncTargetSerializer, responses={202: JobSerializer, **REFUSALS}
    )
    @action(detail=True, methods=["post"], url_path="sync")
    def sync(self, request, pk):
        """Sync now: enqueue a Job that has the Proxbox sync backend sync this endpoint.

        With `virtual_machine` or `device` (an ID) only that VM's guest or that node is synced.
        """
        body = serializers.SyncTargetSerializer(data=request.data or {})
        body.is_valid(raise_exception=True)
        try:
            endpoint = find_endpoint(request.user, pk)
            target = None
            if obj := body.target_object():
                owner, target = target_of(request.user, obj)
                if owner.pk != endpoint.pk:
                    raise SyncRequestError("That object belongs to another endpoint's cluster.")
            job = request_sync(request.user, endpoint, target=target)
        except SyncRequestError as exc:
            return Response(exc.as_response_data(), status=exc.status_code)
        return Response(
            JobSerializer(job, context={"request": request}).data,
            status=status.HTTP_202_ACCEPTED,
        )

    @extend_schema(
        request=None,
        responses={
            200: serializers.SyncPreviewSerializer,
            **REFUSALS,
            502: OpenApiResponse(description="The sync backend is unset, unreachable or refused."),
        },
    )
    @action(detail=True, methods=["post"], url_path="preview")
    def preview(self, request, pk):
        """Preview sync: the sync backend's dry run of this endpoint; nothing is written.

        The same permission and state as Sync now; answers the plan per object type.
        """
        try:
            endpoint = find_endpoint(request.user, pk)
            report = preview_sync(request.user, endpoint)
        except SyncRequestError as exc:
            return Response(exc.as_response_data(), status=exc.status_code)
        return Response(report)

    @extend_schema(
        request=serializers.LiveRunSerializer,
        responses={200: JobSerializer, 201: JobSerializer, **REFUSALS},
    )
    @action(detail=True, methods=["post"], url_path="live-runs")
    def live_runs(self, request, pk):
        """Record a finished run the sync backend's live-sync watcher started, as a sync Job
        of this endpoint (201; the same run again answers its Job, 200). Takes the
        permission Sync now takes: change on the endpoint."""
        body = serializers.LiveRunSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            endpoint = find_endpoint(request.user, pk)
            if not may_request_sync(request.user, endpoint):
                raise SyncForbidden(
                    "You may not change this Proxmox endpoint, so you may not record its syncs."
                )
        except SyncRequestError as exc:
            return Response(exc.as_response_data(), status=exc.status_code)
        job, created = record_live_run(request.user, endpoint, **body.validated_data)
        return Response(
            JobSerializer(job, context={"request": request}).data,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )

    @extend_schema(
        request=serializers.SyncClusterRequestSerializer,
        responses={
            200: serializers.SyncClusterResponseSerializer,
            201: serializers.SyncClusterResponseSerializer,
            **REFUSALS,
        },
    )
    @action(detail=True, methods=["post"], url_path="sync-cluster")
    def sync_cluster(self, request, pk):
        """Create or reconcile the native cluster this endpoint owns (local database writes only)."""
        try:
            endpoint = ProxmoxEndpoint.objects.get(pk=int(pk))
            permissions.require_endpoint_access(request.user, endpoint)
        except (ValueError, ProxmoxEndpoint.DoesNotExist):
            return Response({"detail": "No Proxmox endpoint matches the given query."}, status=404)
        except ClaimError as exc:
            return Response(exc.as_response_data(), status=exc.status_code)

        body = serializers.SyncClusterRequestSerializer(
            data=request.data, context={"request": request}
        )
        body.is_valid(raise_exception=True)
        data = body.validated_data
        claim = ClaimRequest(
            name=data["name"],
            mode=data["mode"],
            cluster_type=data["cluster_type"],
            cluster_id=data.get("cluster_id") or "",
            site=data.get("site", UNSET),
            tenant=data.get("tenant", UNSET),
        )
        try:
            result = claim_native_cluster(request.user, endpoint, claim)
        except ClaimError as exc:
            return Response(exc.as_response_data(), status=exc.status_code)

        cluster = ClusterSerializer(result.cluster, context={"request": request}).data
        return Response(
            {
                "cluster": cluster,
                "proxmox_cluster": result.tracking.pk,
                "created": result.created,
                "changed": result.changed,
            },
            status=status.HTTP_201_CREATED if result.created else status.HTTP_200_OK,
        )


def _no_store(response: Response) -> Response:
    # Credentials (and refusals to hand them out) must never sit in a browser or proxy cache.
    response["Cache-Control"] = "no-store"
    response["Pragma"] = "no-cache"
    return response


class ProxmoxClusterViewSet(ConcurrencyConflictsAs409, NetBoxModelViewSet):
    queryset = ProxmoxCluster.objects.select_related("endpoint", "netbox_cluster")
    serializer_class = serializers.ProxmoxClusterSerializer
    filterset_class = filtersets.ProxmoxClusterFilterSet


class ProxmoxAssignmentRuleViewSet(ConcurrencyConflictsAs409, NetBoxModelViewSet):
    queryset = ProxmoxAssignmentRule.objects.select_related(
        "endpoint", "tenant", "vm_role", "platform", "site", "location"
    )
    serializer_class = serializers.ProxmoxAssignmentRuleSerializer
    filterset_class = filtersets.ProxmoxAssignmentRuleFilterSet


class ProxboxClusterSyncStateViewSet(ConcurrencyConflictsAs409, NetBoxModelViewSet):
    queryset = ProxboxClusterSyncState.objects.select_related("cluster", "proxmox_cluster")
    serializer_class = serializers.ProxboxClusterSyncStateSerializer
    filterset_class = filtersets.ProxboxClusterSyncStateFilterSet


class ProxmoxNodeTypeOverrideViewSet(ConcurrencyConflictsAs409, NetBoxModelViewSet):
    queryset = ProxmoxNodeTypeOverride.objects.select_related("endpoint", "device_type")
    serializer_class = serializers.ProxmoxNodeTypeOverrideSerializer
    filterset_class = filtersets.ProxmoxNodeTypeOverrideFilterSet
