"""FastAPI application factory: the HTTP adapter over the simulation services."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import time
import uuid
from contextlib import asynccontextmanager
from urllib.parse import parse_qsl

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from proxmox_simulator.api import multipart, render
from proxmox_simulator.api.auth import authenticate
from proxmox_simulator.api.handlers.dispatch import semantic_handler
from proxmox_simulator.api.handlers.registry import RequestContext, RequestParams
from proxmox_simulator.api.lab import add_contract_lab_routes, add_observability_routes
from proxmox_simulator.api.logging import install_redaction
from proxmox_simulator.api.validation import validate
from proxmox_simulator.config import Settings
from proxmox_simulator.contracts.model import Contract
from proxmox_simulator.contracts.registry import resolve_contract
from proxmox_simulator.domain import idempotency_service, inventory_service
from proxmox_simulator.domain.access import Principal, check_permissions
from proxmox_simulator.domain.errors import (
    AuthenticationFailed,
    NotImplementedByHandler,
    ParameterError,
    PermissionDenied,
    PveError,
)
from proxmox_simulator.domain.file_restore import Download
from proxmox_simulator.domain.version_adapters import adapter_for
from proxmox_simulator.observability import metrics, tracing
from proxmox_simulator.repositories import guests as guest_repo
from proxmox_simulator.repositories.migrations import is_ready
from proxmox_simulator.runtime import ContractState, Runtime, build_selection
from proxmox_simulator.simulation.clock import Clock, ManualClock, clock_from_spec
from proxmox_simulator.tasks.executors import executors
from proxmox_simulator.tasks.service import request_idempotency_key, scoped_idempotency_key
from proxmox_simulator.tasks.worker import TaskWorker

log = logging.getLogger("proxmox_simulator.api")
ANONYMOUS = Principal("")
_FORMATS = ("json", "extjs")
_REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


def create_app(
    settings: Settings | None = None,
    *,
    contract: Contract | None = None,
    clock: Clock | None = None,
) -> FastAPI:
    """Build the app; the pool, workers and caches live in its lifespan."""
    settings = settings or Settings.from_env()
    contract = contract or resolve_contract(settings.contract, settings.data_dir)
    clock = clock or clock_from_spec(settings.clock)
    # None unless the OpenTelemetry environment configures an exporter.
    tracer = tracing.from_env(os.environ)
    contracts = ContractState(
        build_selection(
            contract, settings.profile, settings.data_dir, origin="configured", generation=0
        ),
        settings.data_dir,
        settings.apidoc_dir,
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        install_redaction(settings.database_url)
        rt = await Runtime.open(settings, contracts, clock)
        current = contracts.current
        metrics.record_contract(
            current.contract.version, current.contract.major, current.profile, swapped=False
        )
        worker = None
        if settings.task_workers > 0:
            worker = TaskWorker(
                rt.pool,
                settings.database_url,
                clock,
                executors(),
                lease_seconds=settings.lease_seconds,
                concurrency=settings.task_workers,
                faults=rt.faults,
                tracing=tracer,
            )
            await worker.start()
        app.state.rt = rt
        app.state.worker = worker
        try:
            yield
        finally:
            if worker is not None:
                await worker.stop(grace=settings.shutdown_grace)
            await rt.close()
            if tracer is not None:
                tracer.shutdown()

    app = FastAPI(
        title="Proxmox VE API simulator",
        version=contract.version,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.contracts = contracts
    app.state.tracing = tracer
    if tracer is not None:
        app.add_middleware(tracing.TracingMiddleware, tracing=tracer)

    async def api_entry(request: Request) -> Response:
        fmt = request.path_params["fmt"]
        path = "/" + request.path_params["path"]
        return await dispatch(request, fmt if fmt in _FORMATS else "json", path, fmt)

    app.add_api_route(
        "/api2/{fmt}/{path:path}",
        api_entry,
        methods=["GET", "POST", "PUT", "DELETE"],
        include_in_schema=False,
    )
    _add_admin_routes(app)
    add_observability_routes(app)
    if settings.lab_enabled:
        from proxmox_simulator.api import operator_ui, simulation_lab

        add_contract_lab_routes(app)
        simulation_lab.add_routes(app)
        operator_ui.add_routes(app)
    return app


async def _read_params(request: Request) -> dict:
    """The request's parameters (a multipart file part gives its name, not its bytes)."""
    params, _uploads = await _read_request(request)
    return params


async def _read_request(request: Request) -> tuple[dict, dict[str, bytes]]:
    """Parameters, and the files of a multipart body by their temporary names."""
    params = dict(request.query_params)
    uploads: dict[str, bytes] = {}
    if request.method in ("POST", "PUT", "DELETE"):
        body = await request.body()
        if body:
            content_type = request.headers.get("content-type", "")
            if content_type.startswith("multipart/form-data"):
                fields, uploads = multipart.parse_form(content_type, body)
                params.update(fields)
            elif content_type.startswith("application/json"):
                try:
                    parsed = json.loads(body)
                except json.JSONDecodeError as exc:
                    raise PveError(f"unable to parse JSON body - {exc}", status=400) from None
                if not isinstance(parsed, dict):
                    raise PveError("JSON body must be an object", status=400)
                params.update(parsed)
            else:
                _merge_form(params, body.decode("utf-8", "replace"))
    return params, uploads


def _merge_form(params: dict, body: str) -> None:
    """Form fields; a repeated one (an array parameter, ``-map a -map b``) becomes a list."""
    seen: dict[str, list[str]] = {}
    for key, value in parse_qsl(body, keep_blank_values=True):
        seen.setdefault(key, []).append(value)
    for key, values in seen.items():
        params[key] = values if len(values) > 1 else values[0]


async def dispatch(request: Request, fmt: str, path: str, requested_fmt: str) -> Response:
    started = time.perf_counter()
    supplied = request.headers.get("x-request-id", "")
    # A client's request ID is echoed and logged only if it is a plain token.
    request_id = supplied if _REQUEST_ID.fullmatch(supplied) else uuid.uuid4().hex
    method = request.method
    template = "-"
    upid = None
    principal = ANONYMOUS
    rt: Runtime = request.app.state.rt
    # The request keeps the table it started with, even if a hot-swap lands meanwhile.
    with rt.contracts.pin() as selection:
        try:
            if requested_fmt not in _FORMATS:
                raise NotImplementedByHandler(f"Unknown format '{requested_fmt}'")
            routes = selection.routes
            match = routes.match(path)
            endpoint = routes.methods(match.template).get(method) if match else None
            if endpoint is None:
                # PVE authenticates before it looks the path up: an anonymous
                # caller learns nothing about which paths exist.
                principal = await authenticate(rt, request, method)
                raise NotImplementedByHandler(f"Method '{method} {path}' not implemented")
            template = endpoint.path
            raw, uploads = await _read_request(request)
            if (endpoint.permissions or {}).get("user") != "world":
                principal = await authenticate(rt, request, method)
                if principal.tokenid and not endpoint.allowtoken:
                    raise AuthenticationFailed("API tokens are not allowed for this API call")
            state = await rt.access.get()
            # Permissions before validation and before touching any resource.
            checked = {**raw, **match.params}
            pool = await _guest_pool(rt, principal, checked)
            try:
                check_permissions(state, principal, endpoint.permissions, checked, pool=pool)
            except PermissionDenied:
                # A grant another process made may not have been notified yet.
                state = await rt.access.reload()
                check_permissions(state, principal, endpoint.permissions, checked, pool=pool)
            params = validate(endpoint, match.params, raw)
            handler = semantic_handler(selection.contract, endpoint)
            if handler is None:
                raise NotImplementedByHandler(
                    f"Method '{method} {endpoint.path}' not implemented by the simulator "
                    f"(CONTRACT_FALLBACK={rt.settings.contract_fallback})"
                )
            if rt.faults.enabled:
                await _inject_faults(rt, method, path, params)
            ctx = RequestContext(
                rt, endpoint, RequestParams(params), principal, state, request.headers, uploads
            )
            data = await _run_idempotently(rt, request, principal, handler, ctx)
            if isinstance(data, Download):
                response = render.download(data.data, data.content_type)
            elif isinstance(data, render.WithExtra):
                response = render.success(
                    selection.answer(endpoint, data.data), fmt, extra=data.extra
                )
            else:
                response = render.success(selection.answer(endpoint, data), fmt)
                if isinstance(data, str) and data.startswith("UPID:"):
                    upid = data
        except PveError as exc:
            response = render.error(exc, fmt, message_in_body=_message_in_body(selection))
        except Exception:
            log.exception("request %s failed", request_id)
            response = render.error(
                PveError("internal error"), fmt, message_in_body=_message_in_body(selection)
            )
    response.headers["x-request-id"] = request_id
    elapsed = time.perf_counter() - started
    metrics.record_request(template, method, response.status_code, elapsed)
    tracer: tracing.Tracing | None = request.app.state.tracing
    if tracer is not None:
        route = template if template != "-" else metrics.UNMATCHED
        tracer.annotate_request(route, request_id, upid)
    if log.isEnabledFor(logging.INFO):
        log.info(
            "%s %s %s",
            method,
            template,
            response.status_code,
            extra={
                "request_id": request_id,
                "method": method,
                "route": template,
                "status": response.status_code,
                "duration_ms": round(elapsed * 1000, 2),
                "identity": principal.auth_id or "-",
            },
        )
    return response


def _message_in_body(selection) -> bool:
    contract = selection.contract
    return adapter_for(contract.major).error_message_in_body(contract.version)


async def _inject_faults(rt: Runtime, method: str, path: str, params: dict) -> None:
    """The active scenario's say on this request: after authentication and
    validation (a fault never tells an anonymous caller what exists), before
    the handler changes anything."""
    fault = rt.faults.on_request(method, path, params)
    if fault is None:
        return
    if fault.delay:
        await asyncio.sleep(fault.delay)
    if fault.error is not None:
        raise fault.error


async def _guest_pool(rt: Runtime, principal: Principal, params: dict) -> str | None:
    """The pool of the guest a request names: pool ACLs extend to its members."""
    vmid = params.get("vmid")
    if principal.is_root or vmid is None or not (str(vmid).isascii() and str(vmid).isdigit()):
        return None
    async with rt.pool.acquire() as conn:
        return await guest_repo.pool_of(conn, int(vmid))


async def _run_idempotently(rt: Runtime, request: Request, principal: Principal, handler, ctx):
    """Honour ``Idempotency-Key`` on writes: a duplicate gets the first request's answer."""
    key = request.headers.get("idempotency-key")
    if not key or request.method == "GET":
        return await handler(ctx)
    scoped = scoped_idempotency_key(principal, key)

    async def write() -> dict:
        token = request_idempotency_key.set(scoped)
        try:
            data = await handler(ctx)
        finally:
            request_idempotency_key.reset(token)
        if isinstance(data, render.WithExtra):
            return {"data": data.data, "extra": data.extra}
        return {"data": data}

    answer = await idempotency_service.run_once(
        rt.pool, scoped, f"{request.method} {request.url.path}", write
    )
    if "extra" in answer:
        return render.WithExtra(answer["data"], answer["extra"])
    return answer["data"]


def _add_admin_routes(app: FastAPI) -> None:
    """Operator endpoints outside /api2 (PVE itself has no equivalent)."""

    @app.get("/healthz", include_in_schema=False)
    async def healthz():
        return JSONResponse({"status": "ok"})

    @app.get("/readyz", include_in_schema=False)
    async def readyz(request: Request):
        rt: Runtime = request.app.state.rt
        async with rt.pool.acquire() as conn:
            ready, current, latest = await is_ready(conn)
        body = {"ready": ready, "migration": current, "latest": latest}
        return JSONResponse(body, status_code=200 if ready else 503)

    async def _root(request: Request) -> Runtime:
        rt: Runtime = request.app.state.rt
        principal = await authenticate(rt, request, request.method)
        if not principal.is_root:
            raise PveError("simulator administration requires root@pam", status=403)
        return rt

    @app.put("/simulator/cluster", include_in_schema=False)
    async def rename_cluster(request: Request):
        try:
            rt = await _root(request)
            params = await _read_params(request)
            name = params.get("name") or None
            result = await inventory_service.rename_cluster(rt, name)
            return render.success(result, "json")
        except PveError as exc:
            return render.error(exc, "json")

    @app.post("/simulator/clock/advance", include_in_schema=False)
    async def advance_clock(request: Request):
        try:
            rt = await _root(request)
            if not isinstance(rt.clock, ManualClock):
                raise PveError("the clock is not in manual mode", status=400)
            params = await _read_params(request)
            try:
                seconds = float(params.get("seconds", 0))
            except ValueError:
                raise ParameterError({"seconds": "type check ('number') failed"}) from None
            rt.clock.advance(seconds)
            return render.success({"now": rt.clock.now()}, "json")
        except PveError as exc:
            return render.error(exc, "json")
