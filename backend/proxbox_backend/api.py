"""The HTTP service: start a sync, read its state, follow its progress (SSE)."""

from __future__ import annotations

import asyncio
import hmac
import json
import os

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import StreamingResponse

from proxbox_backend.config import API_TOKEN_ENV, ConfigurationError, Settings
from proxbox_backend.runs import RunRegistry
from proxbox_backend.service import SyncService


def create_app(
    settings: Settings, service: SyncService | None = None, api_token: str | None = None
) -> FastAPI:
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
    app = FastAPI(title="Proxbox sync backend", openapi_url=None, docs_url=None, redoc_url=None)
    registry = RunRegistry()
    service = service or SyncService(settings)
    background: set[asyncio.Task] = set()

    def authorized(request: Request) -> None:
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        # Bytes, compared in constant time: a non-ASCII header is just a wrong token.
        presented = value.encode("utf-8", "surrogateescape")
        if not (scheme.lower() == "bearer" and hmac.compare_digest(presented, expected)):
            raise HTTPException(401, "a valid 'Authorization: Bearer <token>' is required")

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok"}

    @app.post("/sync/{endpoint_id}", status_code=202, dependencies=[Depends(authorized)])
    async def start_sync(endpoint_id: int) -> dict:
        key = str(endpoint_id)
        if active := registry.active_for(key):
            raise HTTPException(
                409, {"detail": "a sync of this endpoint is running", "run_id": active.id}
            )
        run = registry.new(key)

        async def work() -> None:
            registry.record(run, {"event": "started", "endpoint": key})
            await service.run(endpoint_id, lambda event: registry.record(run, event))

        task = asyncio.create_task(work())
        background.add(task)
        task.add_done_callback(background.discard)
        return {"run_id": run.id, "url": f"/runs/{run.id}"}

    @app.get("/runs/{run_id}", dependencies=[Depends(authorized)])
    async def get_run(run_id: str) -> dict:
        run = registry.get(run_id)
        if run is None:
            raise HTTPException(404, f"no run {run_id}")
        return run.as_dict()

    @app.get("/runs/{run_id}/events", dependencies=[Depends(authorized)])
    async def run_events(run_id: str) -> StreamingResponse:
        run = registry.get(run_id)
        if run is None:
            raise HTTPException(404, f"no run {run_id}")

        async def stream():
            async for event in registry.follow(run):
                yield f"event: {event.get('event', 'message')}\ndata: {json.dumps(event)}\n\n"

        return StreamingResponse(
            stream(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
        )

    @app.get("/openapi.json", include_in_schema=False, dependencies=[Depends(authorized)])
    async def openapi() -> dict:
        return app.openapi()

    app.state.registry = registry
    return app
