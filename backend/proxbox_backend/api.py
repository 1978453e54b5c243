"""The HTTP service: start a sync, read its state, follow its progress (SSE)."""

from __future__ import annotations

import asyncio
import hmac
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Literal

from fastapi import Depends, FastAPI, HTTPException, Path, Query, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.sse import EventSourceResponse, ServerSentEvent
from pydantic import BaseModel, ConfigDict

from proxbox_backend.background import abandon
from proxbox_backend.baselines import open_baselines
from proxbox_backend.clients.http import TransportError
from proxbox_backend.clients.netbox import NetBoxError
from proxbox_backend.config import API_TOKEN_ENV, ConfigurationError, Settings
from proxbox_backend.domain.policy import TARGET_REF, PolicyError, Target
from proxbox_backend.domain.webhook import MAX_BODY, Notification, WebhookInvalid
from proxbox_backend.metrics import METRICS
from proxbox_backend.runs import (
    RunActive,
    RunStoreUnavailable,
    open_store,
    recorded,
    watch_leases,
)
from proxbox_backend.secrets import scrub
from proxbox_backend.service import SyncService
from proxbox_backend.watch import WatchSupervisor
from proxbox_backend.webhooks import HEADER, digest, open_webhooks


class Health(BaseModel):
    status: Literal["ok"]


class SyncStarted(BaseModel):
    run_id: str
    url: str


class RunState(BaseModel):
    id: str
    endpoint: str
    state: Literal["queued", "running", "finished"]
    events: int
    report: dict | None


class PlannedTypes(BaseModel):
    create: int
    update: int
    delete: int
    creates: list[dict]  # {placeholder, label, payload[, because]}
    updates: list[dict]  # {id, label, changes: {field: {old, new}}[, because]}
    deletes: list[dict]  # {id, label}


class Plan(BaseModel):
    object_types: dict[str, PlannedTypes]
    placeholders: dict[str, dict]  # placeholder id → {object_type, label}
    notes: list[str]


class HygieneFinding(BaseModel):
    """An IPAM conflict the run would create or inherit (`domain.hygiene`)."""

    rule: Literal["duplicate_address", "mac_collision", "outside_prefix", "vlan_clash"]
    severity: Literal["error", "warning", "info"]
    guest: str
    value: str
    detail: str
    where: str
    prefix: str | None


class Preview(BaseModel):
    """A dry run's report: the run report's fields (counters as predicted) and the plan."""

    model_config = ConfigDict(extra="allow")

    ok: bool
    status: Literal["previewed", "previewed_with_errors", "failed"]
    dry_run: Literal[True]
    endpoint: dict
    cluster: dict
    counters: dict[str, dict[str, int]]
    failures: list[dict]
    warnings: list[str]
    error: str | None
    plan: Plan
    hygiene: list[HygieneFinding]


class Problem(BaseModel):
    detail: str


class WebhookAccepted(BaseModel):
    """`watched` false: no replica watches the endpoint, so nothing starts."""

    watched: bool
    detail: str


class SyncRunning(BaseModel):
    detail: dict


# Every answer a route can give is in the schema: clients and fuzzers rely on it.
UNAUTHORIZED = {401: {"model": Problem, "description": "missing or wrong bearer token"}}
NO_SUCH_RUN = {404: {"model": Problem, "description": "no run with this id"}}
NO_SUCH_ENDPOINT = {404: {"model": Problem, "description": "NetBox has no endpoint with this id"}}
NETBOX_DOWN = {
    502: {"model": Problem, "description": "NetBox could not say whether the endpoint exists"}
}
# NetBox's object ids are bigints: a larger id names nothing and is refused as invalid.
EndpointId = Annotated[int, Path(ge=1, le=2**63 - 1)]
# Only with PROXBOX_BACKEND_REDIS_URL: the runs are there, for every replica.
STORE_DOWN = {503: {"model": Problem, "description": "the run store (Redis) does not answer"}}
BEARER = {"bearer": []}
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


def as_json(responses: dict) -> dict:
    """Answers with a model, documented as JSON on a route whose own media type is another
    (FastAPI files an answer's model under the route's media type, here the event stream)."""
    return {
        status: {
            "description": answer["description"],
            "content": {
                "application/json": {
                    "schema": {"$ref": f"#/components/schemas/{answer['model'].__name__}"}
                }
            },
        }
        for status, answer in responses.items()
    }


EVENT_STREAM = {
    200: {
        "description": "Server-sent events: started, stage, progress, finished (the report)",
        # One schema per event (OpenAPI 3.2's itemSchema, as fastapi.sse documents streams),
        # as SSE readers see it: its type and a JSON `data` line.
        "content": {
            "text/event-stream": {
                "itemSchema": {
                    "type": "object",
                    "properties": {
                        "event": {"enum": ["started", "stage", "progress", "finished"]},
                        "data": {"type": "string", "contentMediaType": "application/json"},
                    },
                    "required": ["event", "data"],
                }
            }
        },
    }
}


TargetQuery = Annotated[
    str | None,
    Query(
        pattern=TARGET_REF,
        description="sync only this guest (`qemu/100`, `lxc/105`) or node (`node/pve1`)",
    ),
]


def create_app(
    settings: Settings,
    service: SyncService | None = None,
    api_token: str | None = None,
    *,
    watch: bool = False,
) -> FastAPI:
    """The service; with `watch`, this replica also runs the live-sync watchers."""
    api_token = api_token if api_token is not None else os.environ.get(API_TOKEN_ENV, "")
    if not api_token:
        # Starting syncs acts with the backend's NetBox token: an open service would lend
        # that token to anyone who can reach the port.
        raise ConfigurationError(
            f"backend API token missing: set {API_TOKEN_ENV} (callers present it as "
            "'Authorization: Bearer <token>')"
        )
    expected = api_token.encode("utf-8")
    # The schema is served behind the token like every route but /health.
    store = open_store(settings.redis_url, lease_ttl=settings.lease_ttl)
    # Shared with this replica's watches (without Redis, they are the only ones).
    leases, webhooks = watch_leases(store), open_webhooks(store)

    @asynccontextmanager
    async def lifespan(_app):
        watching = None
        if watch:
            watching = asyncio.create_task(
                WatchSupervisor(settings, service, store, leases, webhooks=webhooks).run()
            )
        try:
            yield
        finally:
            if watching is not None:
                await abandon(watching)
            await store.close()

    app = FastAPI(
        title="Proxbox sync backend",
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
    )
    service = service or SyncService(settings, baselines=open_baselines(settings.redis_url))
    background: set[asyncio.Task] = set()

    @app.exception_handler(RunStoreUnavailable)
    async def store_unavailable(_request: Request, exc: RunStoreUnavailable):
        return JSONResponse({"detail": str(exc)}, status_code=503)

    def authorized(request: Request) -> None:
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        # Bytes, compared in constant time: a non-ASCII header is just a wrong token.
        presented = value.encode("utf-8", "surrogateescape")
        if not (scheme.lower() == "bearer" and hmac.compare_digest(presented, expected)):
            raise HTTPException(401, "a valid 'Authorization: Bearer <token>' is required")

    guarded = {"dependencies": [Depends(authorized)], "openapi_extra": {"security": [BEARER]}}

    @app.get("/health")
    async def health() -> Health:
        return Health(status="ok")

    def requested_target(request: Request, target: str | None) -> Target | None:
        # A mistyped parameter (`?taget=qemu/100`) must not start a sync of everything.
        unknown = sorted(set(request.query_params) - {"target"})
        if unknown:
            raise HTTPException(
                422,
                [
                    {"loc": ["query", name], "msg": "unknown parameter", "type": "extra_forbidden"}
                    for name in unknown
                ],
            )
        try:
            return Target.from_ref(target)
        except PolicyError as exc:  # the pattern admits only what parses; kept as a guard
            raise HTTPException(422, str(exc)) from None

    @app.post(
        "/sync/{endpoint_id}",
        status_code=202,
        **guarded,
        responses={
            **UNAUTHORIZED,
            **NO_SUCH_ENDPOINT,
            409: {"model": SyncRunning, "description": "a run of this endpoint is active"},
            **NETBOX_DOWN,
            **STORE_DOWN,
        },
    )
    async def start_sync(
        request: Request, endpoint_id: EndpointId, target: TargetQuery = None
    ) -> SyncStarted:
        """Start a run; `?target=qemu/100` or `?target=node/pve1` syncs only that guest or node."""
        wanted = requested_target(request, target)
        # Before anything is recorded: no run (and no lease) for an endpoint that is not there.
        try:
            exists = await service.endpoint_exists(endpoint_id)
        except (NetBoxError, TransportError) as exc:
            raise HTTPException(
                502,
                f"NetBox could not say whether endpoint {endpoint_id} exists: {scrub(str(exc))}",
            ) from None
        if not exists:
            raise HTTPException(404, f"no Proxmox endpoint with id {endpoint_id} in NetBox")
        key = str(endpoint_id)
        try:
            run = await store.start(key)
        except RunActive as active:
            raise HTTPException(
                409, {"detail": "a sync of this endpoint is running", "run_id": active.run_id}
            ) from None

        async def work(record):
            return await service.run(endpoint_id, record, wanted)

        task = asyncio.create_task(recorded(run, key, work))
        background.add(task)
        task.add_done_callback(background.discard)
        return SyncStarted(run_id=run.id, url=f"/runs/{run.id}")

    @app.post(
        "/sync/{endpoint_id}/preview",
        **guarded,
        responses={
            200: {"description": "the plan; `ok` false and `error` set when planning failed"},
            **UNAUTHORIZED,
        },
    )
    async def preview_sync(
        request: Request, endpoint_id: EndpointId, target: TargetQuery = None
    ) -> Preview:
        """Preview (dry run): plan the sync against NetBox's current state and answer with
        what it would create, update (field: old → new) and delete; nothing is written."""
        wanted = requested_target(request, target)
        report = await service.run(endpoint_id, lambda _event: None, wanted, dry_run=True)
        return Preview(**report.as_dict())

    @app.get(
        "/metrics",
        **guarded,
        response_class=PlainTextResponse,
        responses={
            200: {
                "description": "Prometheus text format: runs by outcome and duration, last "
                "success, the watchers' polls and lag (per endpoint)",
                "content": {"text/plain": {"schema": {"type": "string"}}},
            },
            **as_json(UNAUTHORIZED),
        },
    )
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(METRICS.render(), media_type=PROMETHEUS_TEXT)

    def refused(status: int, outcome: str, endpoint: str, detail) -> HTTPException:
        METRICS.webhooks[(endpoint, outcome)] += 1
        return HTTPException(status, detail)

    def webhook_authorized(request: Request) -> None:
        """A dependency, so a wrong secret is a 401 before anything about the request
        (its path included) is judged."""
        raw = request.path_params.get("endpoint_id", "")
        secret = settings.webhook_secret(int(raw)) if raw.isascii() and raw.isdigit() else None
        presented = request.headers.get(HEADER, "").encode("utf-8", "surrogateescape")
        # Compared even without a secret, so the answer's time says nothing of which
        # endpoints have one; the label stays empty (the path is the caller's).
        wanted = secret.reveal().encode() if secret else b"\0" * 32
        if not (hmac.compare_digest(presented, wanted) and secret):
            raise refused(401, "unauthorized", "", f"a valid {HEADER} header is required")

    @app.post(
        "/webhooks/proxmox/{endpoint_id}",
        status_code=202,
        dependencies=[Depends(webhook_authorized)],
        openapi_extra={"security": [{"webhook": []}]},
        responses={
            401: {"model": Problem, "description": f"missing or wrong {HEADER}"},
            409: {"model": Problem, "description": "stale (outside the window) or replayed"},
            413: {"model": Problem, "description": f"a body over {MAX_BODY} bytes"},
            422: {"description": "the body is not the documented notification (field named)"},
            **STORE_DOWN,
        },
    )
    async def proxmox_webhook(request: Request, endpoint_id: EndpointId) -> WebhookAccepted:
        """A PVE notification (a webhook target, PVE 8.3+; docs/operator-guide.md): the
        endpoint's watch starts a run now instead of at its next poll."""
        key = str(endpoint_id)
        body = await request.body()
        if len(body) > MAX_BODY:
            raise refused(413, "invalid", key, f"the body exceeds {MAX_BODY} bytes")
        try:
            note = Notification.parse(body)
        except WebhookInvalid as exc:
            loc = ["body", *exc.field.split(".")] if exc.field != "body" else ["body"]
            detail = [{"loc": loc, "msg": exc.message, "type": "value_error"}]
            raise refused(422, "invalid", key, detail) from None
        window = settings.webhook_window
        skew = time.time() - note.timestamp
        if abs(skew) > window:
            raise refused(
                409,
                "stale",
                key,
                f"stale: the notification's timestamp is {skew:+.0f} s off this backend's "
                f"clock, outside the {window:g} s window",
            )
        # Its timestamp is accepted for 2 windows at most: remembered that long.
        if not await webhooks.first_time(digest(key, body), 2 * window + 1):
            raise refused(409, "replayed", key, "replayed: this notification came before")
        if await leases.holder(key) is None:
            METRICS.webhooks[(key, "unwatched")] += 1
            return WebhookAccepted(
                watched=False,
                detail=f"endpoint {endpoint_id} is not watched by any replica (set its "
                "watch interval): nothing starts",
            )
        await webhooks.nudge(key, note.changes(), 2 * window)
        METRICS.webhooks[(key, "accepted")] += 1
        return WebhookAccepted(watched=True, detail="the endpoint's watch starts a run")

    @app.get(
        "/runs/{run_id}",
        **guarded,
        responses={**UNAUTHORIZED, **NO_SUCH_RUN, **STORE_DOWN},
    )
    async def get_run(run_id: str) -> RunState:
        run = await store.get(run_id)
        if run is None:
            raise HTTPException(404, f"no run {run_id}")
        return RunState(**run)

    async def existing_run(run_id: str) -> str:
        """A dependency, so an unknown run is a 404 before the event stream starts."""
        if await store.get(run_id) is None:
            raise HTTPException(404, f"no run {run_id}")
        return run_id

    @app.get(
        "/runs/{run_id}/events",
        **guarded,
        response_class=EventSourceResponse,
        responses={**EVENT_STREAM, **as_json({**UNAUTHORIZED, **NO_SUCH_RUN, **STORE_DOWN})},
    )
    async def run_events(run_id: str = Depends(existing_run)) -> AsyncIterator[ServerSentEvent]:
        async for event in store.follow(run_id):
            yield ServerSentEvent(data=event, event=event.get("event", "message"))

    def document() -> dict:
        if app.openapi_schema is None:
            schema = FastAPI.openapi(app)
            schema["components"]["securitySchemes"] = {
                "bearer": {"type": "http", "scheme": "bearer"},
                "webhook": {"type": "apiKey", "in": "header", "name": HEADER},
            }
        return app.openapi_schema

    app.openapi = document

    @app.get("/openapi.json", include_in_schema=False, dependencies=[Depends(authorized)])
    async def openapi() -> dict:
        return document()

    app.state.runs = store
    return app
