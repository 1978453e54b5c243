"""REST views. Thin: the claim's rules live in ownership/, the invariants on the models."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from netbox.api.viewsets import NetBoxModelViewSet
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.permissions import SAFE_METHODS, BasePermission, IsAuthenticated
from rest_framework.response import Response
from rest_framework.routers import APIRootView
from users.models import Token
from virtualization.api.serializers_.clusters import ClusterSerializer

from .. import filtersets
from ..models import ProxboxClusterSyncState, ProxmoxCluster, ProxmoxEndpoint
from ..ownership import permissions
from ..ownership.claim import UNSET, ClaimRequest, claim_native_cluster
from ..ownership.errors import ClaimError
from . import serializers


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


class ProxmoxEndpointViewSet(NetBoxModelViewSet):
    queryset = ProxmoxEndpoint.objects.select_related("site", "tenant", "netbox_cluster")
    serializer_class = serializers.ProxmoxEndpointSerializer
    filterset_class = filtersets.ProxmoxEndpointFilterSet

    def get_permissions(self):
        if self.action == "sync_cluster":
            # Object-level checks (endpoint, native cluster, references) happen in the service.
            return [IsAuthenticated(), WriteEnabledCredentials()]
        return super().get_permissions()

    @extend_schema(
        request=serializers.SyncClusterRequestSerializer,
        responses={
            200: serializers.SyncClusterResponseSerializer,
            201: serializers.SyncClusterResponseSerializer,
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


class ProxmoxClusterViewSet(NetBoxModelViewSet):
    queryset = ProxmoxCluster.objects.select_related("endpoint", "netbox_cluster")
    serializer_class = serializers.ProxmoxClusterSerializer
    filterset_class = filtersets.ProxmoxClusterFilterSet


class ProxboxClusterSyncStateViewSet(NetBoxModelViewSet):
    queryset = ProxboxClusterSyncState.objects.select_related("cluster", "proxmox_cluster")
    serializer_class = serializers.ProxboxClusterSyncStateSerializer
    filterset_class = filtersets.ProxboxClusterSyncStateFilterSet
