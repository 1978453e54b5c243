"""A node's administration calls: its logs, guest network counters, report, batched
execution, wake-on-LAN and vzdump defaults."""

from __future__ import annotations

import json

from proxmox_simulator.api import render
from proxmox_simulator.api.handlers.registry import RequestContext, RequestParams, route
from proxmox_simulator.api.render import WithTotal
from proxmox_simulator.api.validation import validate
from proxmox_simulator.domain import node_admin_service, node_log_service, storage_transfer
from proxmox_simulator.domain.access import check_permissions
from proxmox_simulator.domain.errors import ParameterError, PveError


@route("/nodes/{node}/syslog", "GET")
async def syslog(ctx: RequestContext):
    lines, total = await node_log_service.syslog(ctx.rt, ctx.node, ctx.params)
    return WithTotal(lines, total)


@route("/nodes/{node}/journal", "GET")
async def journal(ctx: RequestContext):
    return await node_log_service.journal(ctx.rt, ctx.node, ctx.params)


@route("/nodes/{node}/netstat", "GET")
async def netstat(ctx: RequestContext):
    return await node_admin_service.netstat(ctx.rt, ctx.node)


@route("/nodes/{node}/report", "GET")
async def report(ctx: RequestContext):
    return await node_admin_service.report(ctx.rt, ctx.node)


@route("/nodes/{node}/wakeonlan", "POST")
async def wakeonlan(ctx: RequestContext):
    return await node_admin_service.wakeonlan(ctx.rt, ctx.node)


@route("/nodes/{node}/vzdump/defaults", "GET")
async def vzdump_defaults(ctx: RequestContext):
    return await node_admin_service.vzdump_defaults(
        ctx.rt, ctx.state, ctx.principal, ctx.node, ctx.params.get("storage"), ctx.endpoint.returns
    )


async def _run_command(ctx: RequestContext, selection, cmd) -> dict:
    """One command of a batch, as PVE's handler->handle: route, permissions, validation."""
    # dispatch imports this package's registry: resolve it at call time.
    from proxmox_simulator.api.handlers.dispatch import semantic_handler

    if not isinstance(cmd, dict) or not cmd.get("path") or not cmd.get("method"):
        raise PveError(f"{json.dumps(cmd)} is not a valid command")
    path = f"nodes/{ctx.node}/{str(cmd['path']).lstrip('/')}"
    match = selection.routes.match(path)
    endpoint = selection.routes.methods(match.template).get(cmd["method"]) if match else None
    handler = semantic_handler(selection.contract, endpoint) if endpoint else None
    if handler is None:
        raise PveError(f"no handler for '{path}'")
    args = cmd.get("args") or {}
    duplicate = {k: "duplicate parameter" for k in args if k in match.params}
    if duplicate:
        raise ParameterError(duplicate)
    raw = {k: v if isinstance(v, str) else json.dumps(v) for k, v in args.items()}
    check_permissions(ctx.state, ctx.principal, endpoint.permissions, {**raw, **match.params})
    params = validate(endpoint, match.params, raw)
    inner = RequestContext(
        ctx.rt, endpoint, RequestParams(params), ctx.principal, ctx.state, ctx.headers
    )
    data = await handler(inner)
    if isinstance(data, render.WithExtra):
        data = data.data
    return {"status": 200, "data": selection.answer(endpoint, data)}


@route("/nodes/{node}/execute", "POST")
async def execute(ctx: RequestContext):
    try:
        commands = json.loads(ctx.params["commands"])
    except ValueError as exc:
        raise PveError(f"commands param did not contain valid JSON: {exc}") from None
    if not isinstance(commands, list):
        raise PveError("commands is not an array")
    results = []
    with ctx.rt.contracts.pin() as selection:
        for cmd in commands:
            try:
                results.append(await _run_command(ctx, selection, cmd))
            except PveError as exc:
                result = {"status": exc.status, "message": exc.message}
                if exc.errors:
                    result["errors"] = exc.errors
                results.append(result)
    return results


@route("/nodes/{node}/query-url-metadata", "GET")
async def query_url_metadata(ctx: RequestContext):
    verify = ctx.params.get("verify-certificates")
    return await storage_transfer.url_metadata(
        ctx.rt, ctx.node, ctx.params["url"], True if verify is None else bool(verify)
    )
