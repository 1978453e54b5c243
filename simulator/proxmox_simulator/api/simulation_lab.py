"""Laboratory JSON API under ``/ui/api``: fault scenarios, the simulation clock and
Proxmox Backup Server verify jobs.

Mounted only with ``PROXMOX_SIMULATOR_LAB`` set.  There is no login: network
exposure is the trust boundary (see the README).  What a browser on another
origin could still do — post a form here — is refused by ``same_origin``.
"""

from __future__ import annotations

import json
from urllib.parse import parse_qsl, urlsplit

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import JSONResponse

from proxmox_simulator.domain import fault_service, pbs_verification_service
from proxmox_simulator.domain.errors import ParameterError, PveError
from proxmox_simulator.runtime import Runtime
from proxmox_simulator.simulation.clock import ManualClock


def same_origin(request: Request) -> None:
    """Refuse a write a page of another origin made the browser send."""
    site = request.headers.get("sec-fetch-site")
    origin = request.headers.get("origin")
    cross = site not in (None, "same-origin", "none") or (
        origin is not None and urlsplit(origin).netloc != request.headers.get("host", "")
    )
    if cross:
        raise PveError("cross-site request refused", status=403)


async def read_body(request: Request) -> dict:
    """JSON object or form fields; query parameters fill in what the body lacks."""
    params: dict = dict(request.query_params)
    body = await request.body()
    if not body:
        return params
    if request.headers.get("content-type", "").startswith("application/json"):
        try:
            parsed = json.loads(body)
        except json.JSONDecodeError as exc:
            raise PveError(f"unable to parse JSON body - {exc}", status=400) from None
        if not isinstance(parsed, dict):
            raise PveError("JSON body must be an object", status=400)
        params.update(parsed)
    else:
        params.update(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
    return params


def answer(data, status: int = 200) -> JSONResponse:
    return JSONResponse({"data": data}, status_code=status)


def refusal(exc: PveError) -> JSONResponse:
    body: dict = {"data": None, "message": exc.message}
    if exc.errors:
        body["errors"] = exc.errors
    return JSONResponse(body, status_code=exc.status)


def parse_bool(value, field: str) -> bool:
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ParameterError({field: "expected a boolean (0 or 1)"})


async def faults_state(rt: Runtime) -> dict:
    return {**rt.faults.snapshot(), "scenarios": fault_service.scenario_list()}


async def enable_from_params(rt: Runtime, params: dict) -> dict:
    rules = params.get("rules")
    if isinstance(rules, str):
        try:
            rules = json.loads(rules) if rules.strip() else None
        except json.JSONDecodeError:
            raise ParameterError({"rules": "expected a JSON list of rules"}) from None
    name = params.get("name") or ("custom" if rules is not None else "")
    if not isinstance(name, str) or not name:
        raise ParameterError({"name": "property is missing and it is not optional"})
    return await fault_service.enable(
        rt.pool,
        rt.faults,
        name=name,
        seed=params.get("seed", 0),
        rules=rules,
        node=params.get("node") or None,
        storage=params.get("storage") or None,
    )


def add_routes(app: FastAPI) -> None:
    @app.get("/ui/api/faults", include_in_schema=False)
    async def get_faults(request: Request):
        return answer(await faults_state(request.app.state.rt))

    @app.post("/ui/api/faults", include_in_schema=False)
    async def enable_faults(request: Request):
        """Enable a named scenario (``name``, ``seed``, optional ``node``/``storage``)
        or a custom one (``rules``: a JSON list)."""
        rt: Runtime = request.app.state.rt
        try:
            same_origin(request)
            await enable_from_params(rt, await read_body(request))
            return answer(await faults_state(rt))
        except PveError as exc:
            return refusal(exc)

    @app.delete("/ui/api/faults", include_in_schema=False)
    async def disable_faults(request: Request):
        rt: Runtime = request.app.state.rt
        try:
            same_origin(request)
            await fault_service.disable(rt.pool, rt.faults)
            return answer(await faults_state(rt))
        except PveError as exc:
            return refusal(exc)

    @app.post("/ui/api/faults/rules/{index}", include_in_schema=False)
    async def toggle_rule(request: Request, index: str):
        rt: Runtime = request.app.state.rt
        try:
            same_origin(request)
            params = await read_body(request)
            if "enabled" not in params:
                raise ParameterError({"enabled": "property is missing and it is not optional"})
            enabled = parse_bool(params["enabled"], "enabled")
            await fault_service.set_rule_enabled(rt.pool, rt.faults, index, enabled)
            return answer(await faults_state(rt))
        except PveError as exc:
            return refusal(exc)

    @app.get("/ui/api/clock", include_in_schema=False)
    async def get_clock(request: Request):
        rt: Runtime = request.app.state.rt
        return answer({"mode": rt.settings.clock, "now": rt.clock.now()})

    @app.post("/ui/api/clock/advance", include_in_schema=False)
    async def advance_clock(request: Request):
        rt: Runtime = request.app.state.rt
        try:
            same_origin(request)
            params = await read_body(request)
            seconds = advance_seconds(params)
            if not isinstance(rt.clock, ManualClock):
                raise PveError("the clock is not in manual mode", status=400)
            rt.clock.advance(seconds)
            return answer({"mode": rt.settings.clock, "now": rt.clock.now()})
        except PveError as exc:
            return refusal(exc)

    @app.post("/ui/api/pbs/verify", include_in_schema=False)
    async def verify_pbs_snapshot(request: Request):
        """A PBS verify job's outcome for one snapshot (``storage``, ``volume``: its volid
        or ``vm/100/<time>``, ``state``: ok or failed)."""
        rt: Runtime = request.app.state.rt
        try:
            same_origin(request)
            return answer(await pbs_verification_service.verify(rt, await read_body(request)))
        except PveError as exc:
            return refusal(exc)


def advance_seconds(params: dict) -> float:
    try:
        seconds = float(params.get("seconds", ""))
    except (TypeError, ValueError):
        raise ParameterError({"seconds": "type check ('number') failed"}) from None
    if not 0 <= seconds <= 86400 * 365:
        raise ParameterError({"seconds": "value must be between 0 and 31536000"})
    return seconds
