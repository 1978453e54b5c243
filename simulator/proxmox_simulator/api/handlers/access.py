"""/access: ticket, users, groups, roles, ACL, tokens, domains and their sync."""

from __future__ import annotations

from proxmox_simulator.api.handlers.registry import RequestContext, route
from proxmox_simulator.domain import access_service as svc
from proxmox_simulator.domain import console_service, openid_service
from proxmox_simulator.domain import realm_sync_service as realm_sync
from proxmox_simulator.domain import tfa_service as tfa
from proxmox_simulator.domain.access import Principal


@route("/access/ticket", "POST")
async def create_ticket(ctx: RequestContext):
    return await svc.login(ctx.rt, ctx.params)


@route("/access/ticket", "GET")
async def ticket_form(ctx: RequestContext):
    # PVE answers null: the GET exists only so the GUI can render a login form.
    return None


@route("/access/password", "PUT")
async def change_password(ctx: RequestContext):
    await svc.change_password(ctx.rt, ctx.principal, ctx.params)


@route("/access/vncticket", "POST")
async def verify_vnc_ticket(ctx: RequestContext):
    await console_service.verify_vnc_ticket(ctx.rt, ctx.state, ctx.params)


@route("/access/openid/auth-url", "POST")
async def openid_auth_url(ctx: RequestContext):
    return await openid_service.auth_url(ctx.rt, ctx.params)


@route("/access/openid/login", "POST")
async def openid_login(ctx: RequestContext):
    return await svc.openid_login(ctx.rt, ctx.params)


@route("/access/permissions", "GET")
async def permissions(ctx: RequestContext):
    userid = ctx.params.get("userid") or ctx.principal.auth_id
    path = ctx.params.get("path")
    if userid != ctx.principal.auth_id:
        ctx.state.require(ctx.principal, "/access", ["Sys.Audit"])
    owner, _, tokenid = userid.partition("!")
    token = ctx.state.tokens.get((owner, tokenid)) if tokenid else None
    subject = Principal(owner, tokenid or None, privsep=bool(token and token.privsep))
    paths = (
        [path]
        if path
        else sorted(
            {"/", "/vms", "/storage", "/nodes", "/access", "/pool"}
            | {e.path for e in ctx.state.acl}
        )
    )
    return {p: dict.fromkeys(sorted(ctx.state.privileges(subject, p)), 1) for p in paths}


@route("/access/users", "GET")
async def list_users(ctx: RequestContext):
    return await svc.list_users(ctx.rt, ctx.state, ctx.principal, ctx.params)


@route("/access/users", "POST")
async def create_user(ctx: RequestContext):
    await svc.create_user(ctx.rt, ctx.params)


@route("/access/users/{userid}", "GET")
async def get_user(ctx: RequestContext):
    return await svc.get_user(ctx.rt, ctx.params["userid"])


@route("/access/users/{userid}", "PUT")
async def update_user(ctx: RequestContext):
    await svc.update_user(ctx.rt, ctx.params["userid"], ctx.params)


@route("/access/users/{userid}", "DELETE")
async def delete_user(ctx: RequestContext):
    await svc.delete_user(ctx.rt, ctx.params["userid"])


@route("/access/users/{userid}/token", "GET")
async def list_tokens(ctx: RequestContext):
    return await svc.list_tokens(ctx.rt, ctx.params["userid"])


@route("/access/users/{userid}/token/{tokenid}", "GET")
async def get_token(ctx: RequestContext):
    return await svc.get_token(ctx.rt, ctx.params["userid"], ctx.params["tokenid"])


@route("/access/users/{userid}/token/{tokenid}", "POST")
async def create_token(ctx: RequestContext):
    return await svc.create_token(ctx.rt, ctx.params["userid"], ctx.params["tokenid"], ctx.params)


@route("/access/users/{userid}/token/{tokenid}", "PUT")
async def update_token(ctx: RequestContext):
    return await svc.update_token(ctx.rt, ctx.params["userid"], ctx.params["tokenid"], ctx.params)


@route("/access/users/{userid}/token/{tokenid}", "DELETE")
async def delete_token(ctx: RequestContext):
    await svc.delete_token(ctx.rt, ctx.params["userid"], ctx.params["tokenid"])


@route("/access/groups", "GET")
async def list_groups(ctx: RequestContext):
    groups = await svc.list_groups(ctx.rt)
    return [
        g
        for g in groups
        if ctx.state.has(
            ctx.principal,
            f"/access/groups/{g['groupid']}",
            ["Sys.Audit", "Group.Allocate"],
            any_of=True,
        )
    ]


@route("/access/groups", "POST")
async def create_group(ctx: RequestContext):
    await svc.create_group(ctx.rt, ctx.params["groupid"], ctx.params.get("comment") or "")


@route("/access/groups/{groupid}", "GET")
async def get_group(ctx: RequestContext):
    return await svc.get_group(ctx.rt, ctx.params["groupid"])


@route("/access/groups/{groupid}", "PUT")
async def update_group(ctx: RequestContext):
    await svc.update_group(ctx.rt, ctx.params["groupid"], ctx.params.get("comment") or "")


@route("/access/groups/{groupid}", "DELETE")
async def delete_group(ctx: RequestContext):
    await svc.delete_group(ctx.rt, ctx.params["groupid"])


@route("/access/roles", "GET")
async def list_roles(ctx: RequestContext):
    return await svc.list_roles(ctx.rt)


@route("/access/roles", "POST")
async def create_role(ctx: RequestContext):
    await svc.create_role(ctx.rt, ctx.params["roleid"], ctx.params.get("privs"))


@route("/access/roles/{roleid}", "GET")
async def get_role(ctx: RequestContext):
    return await svc.get_role(ctx.rt, ctx.params["roleid"])


@route("/access/roles/{roleid}", "PUT")
async def update_role(ctx: RequestContext):
    await svc.update_role(
        ctx.rt, ctx.params["roleid"], ctx.params.get("privs"), bool(ctx.params.get("append"))
    )


@route("/access/roles/{roleid}", "DELETE")
async def delete_role(ctx: RequestContext):
    await svc.delete_role(ctx.rt, ctx.params["roleid"])


@route("/access/acl", "GET")
async def list_acl(ctx: RequestContext):
    return await svc.list_acl(ctx.rt, ctx.state, ctx.principal)


@route("/access/acl", "PUT")
async def update_acl(ctx: RequestContext):
    await svc.update_acl(ctx.rt, ctx.state, ctx.principal, ctx.params)


@route("/access/domains", "GET")
async def list_domains(ctx: RequestContext):
    return await svc.list_domains(ctx.rt)


@route("/access/domains/{realm}", "GET")
async def get_domain(ctx: RequestContext):
    return await svc.get_domain(ctx.rt, ctx.params["realm"])


@route("/access/domains", "POST")
async def create_domain(ctx: RequestContext):
    await svc.create_domain(ctx.rt, ctx.params)


@route("/access/domains/{realm}", "PUT")
async def update_domain(ctx: RequestContext):
    await svc.update_domain(ctx.rt, ctx.params)


@route("/access/domains/{realm}", "DELETE")
async def delete_domain(ctx: RequestContext):
    await svc.delete_domain(ctx.rt, ctx.params["realm"])


# -- second factors -------------------------------------------------------------------


@route("/access/tfa", "GET")
async def list_tfa(ctx: RequestContext):
    return await tfa.list_all(ctx.rt, ctx.principal)


@route("/access/tfa/{userid}", "GET")
async def list_user_tfa(ctx: RequestContext):
    return await tfa.list_user(ctx.rt, ctx.params["userid"])


@route("/access/tfa/{userid}", "POST")
async def add_tfa(ctx: RequestContext):
    return await tfa.add_entry(ctx.rt, ctx.principal, ctx.params["userid"], ctx.params)


@route("/access/tfa/{userid}/{id}", "GET")
async def get_tfa(ctx: RequestContext):
    return await tfa.get_entry(ctx.rt, ctx.params["userid"], ctx.params["id"])


@route("/access/tfa/{userid}/{id}", "PUT")
async def update_tfa(ctx: RequestContext):
    await tfa.update_entry(
        ctx.rt, ctx.principal, ctx.params["userid"], ctx.params["id"], ctx.params
    )


@route("/access/tfa/{userid}/{id}", "DELETE")
async def delete_tfa(ctx: RequestContext):
    await tfa.delete_entry(
        ctx.rt, ctx.principal, ctx.params["userid"], ctx.params["id"], ctx.params.get("password")
    )


@route("/access/users/{userid}/tfa", "GET")
async def user_tfa_types(ctx: RequestContext):
    # 6.x declares no ``multiple``: its tfa.cfg held one legacy factor per user.
    legacy = not any(p.name == "multiple" for p in ctx.endpoint.parameters)
    return await tfa.user_types(
        ctx.rt, ctx.params["userid"], multiple=bool(ctx.params.get("multiple")), legacy=legacy
    )


@route("/access/users/{userid}/unlock-tfa", "PUT")
async def unlock_tfa(ctx: RequestContext):
    return int(await tfa.unlock(ctx.rt, ctx.params["userid"]))


@route("/access/tfa", "POST")
async def verify_tfa(ctx: RequestContext):
    # The old (6.x/7.x) second step, for a caller already holding a ticket.
    return await tfa.verify_old_api(ctx.rt, ctx.principal, str(ctx.params["response"]))


@route("/access/tfa", "PUT")
async def change_tfa(ctx: RequestContext):
    return await tfa.change_old_api(ctx.rt, ctx.principal, ctx.params)


# -- realm synchronisation ------------------------------------------------------------


@route("/access/domains/{realm}/sync", "POST")
async def sync_realm(ctx: RequestContext):
    declared = {p.name: p.default for p in ctx.endpoint.parameters}
    return await realm_sync.sync(ctx.rt, ctx.principal, declared, ctx.params)
