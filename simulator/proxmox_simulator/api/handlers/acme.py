"""/cluster/acme: challenge plugins, directories and the challenge schema."""

from __future__ import annotations

from proxmox_simulator.api.handlers.registry import RequestContext, route
from proxmox_simulator.domain import acme_account_service as accounts
from proxmox_simulator.domain import acme_service as svc


def _declared(ctx: RequestContext) -> set[str]:
    return {p.name for p in ctx.endpoint.parameters}


@route("/cluster/acme/directories", "GET")
async def directories(ctx: RequestContext):
    return svc.DIRECTORIES


@route("/cluster/acme/challenge-schema", "GET")
async def challenge_schema(ctx: RequestContext):
    create = ctx.rt.contract.endpoint("/cluster/acme/plugins", "POST")
    api = next((p for p in create.parameters if p.name == "api"), None) if create else None
    return svc.challenge_schema(tuple(api.enum or ()) if api else ())


@route("/cluster/acme/plugins", "GET")
async def list_plugins(ctx: RequestContext):
    return await svc.list_plugins(ctx.rt, ctx.params.get("type"))


@route("/cluster/acme/plugins", "POST")
async def create_plugin(ctx: RequestContext):
    await svc.create_plugin(ctx.rt, ctx.params, _declared(ctx))


@route("/cluster/acme/plugins/{id}", "GET")
async def get_plugin(ctx: RequestContext):
    return await svc.get_plugin(ctx.rt, ctx.params["id"])


@route("/cluster/acme/plugins/{id}", "PUT")
async def update_plugin(ctx: RequestContext):
    await svc.update_plugin(ctx.rt, ctx.params["id"], ctx.params, _declared(ctx))


@route("/cluster/acme/plugins/{id}", "DELETE")
async def delete_plugin(ctx: RequestContext):
    await svc.delete_plugin(ctx.rt, ctx.params["id"])


@route("/cluster/acme/account", "GET")
async def list_accounts(ctx: RequestContext):
    return accounts.list_accounts()


@route("/cluster/acme/account", "POST")
async def register_account(ctx: RequestContext):
    return await accounts.register(ctx.rt, ctx.principal, ctx.params)


@route("/cluster/acme/account/{name}", "GET")
async def get_account(ctx: RequestContext):
    raise accounts.missing_account(ctx.params.get("name"))


@route("/cluster/acme/account/{name}", "PUT")
async def update_account(ctx: RequestContext):
    raise accounts.missing_account(ctx.params.get("name"))


@route("/cluster/acme/account/{name}", "DELETE")
async def deactivate_account(ctx: RequestContext):
    raise accounts.missing_account(ctx.params.get("name"))


@route("/cluster/acme/meta", "GET")
async def directory_meta(ctx: RequestContext):
    return accounts.directory_meta(ctx.params)


@route("/cluster/acme/tos", "GET")
async def terms_of_service(ctx: RequestContext):
    return accounts.directory_meta(ctx.params)


@route("/nodes/{node}/certificates/acme/certificate", "POST")
async def order_certificate(ctx: RequestContext):
    return await accounts.order_certificate(ctx.rt, ctx.principal, ctx.node)


@route("/nodes/{node}/certificates/acme/certificate", "PUT")
async def renew_certificate(ctx: RequestContext):
    return await accounts.renew_certificate(ctx.rt, ctx.principal, ctx.node, ctx.params)


@route("/nodes/{node}/certificates/acme/certificate", "DELETE")
async def revoke_certificate(ctx: RequestContext):
    return await accounts.revoke_certificate(ctx.rt, ctx.principal, ctx.node)
