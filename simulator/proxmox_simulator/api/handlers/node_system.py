"""A node's own configuration: index, network (pending + reload), DNS, hosts, time,
services and subscription."""

from __future__ import annotations

from proxmox_simulator.api.handlers.registry import RequestContext, route
from proxmox_simulator.api.render import WithExtra
from proxmox_simulator.domain import apt_repositories as apt_repositories_service
from proxmox_simulator.domain import apt_service
from proxmox_simulator.domain import node_system_service as svc
from proxmox_simulator.domain.guest_service import require_node


def _declared(ctx: RequestContext) -> set[str]:
    return {p.name for p in ctx.endpoint.parameters}


@route("/nodes/{node}", "GET")
async def node_index(ctx: RequestContext):
    async with ctx.rt.pool.acquire() as conn:
        await require_node(conn, ctx.node)
    prefix = "/nodes/{node}/"
    names = sorted(
        {
            path[len(prefix) :].split("/", 1)[0]
            for path in ctx.rt.contract.paths
            if path.startswith(prefix)
        }
    )
    return [{"name": name} for name in names if not name.startswith("{")]


@route("/nodes/{node}/network", "GET")
async def list_network(ctx: RequestContext):
    # The schema says "user: all"; PVE's code requires Sys.Audit on the node.
    ctx.state.require(ctx.principal, f"/nodes/{ctx.node}", ["Sys.Audit"])
    entries, changes = await svc.list_network(ctx.rt, ctx.node, ctx.params.get("type"))
    return WithExtra(entries, {"changes": changes}) if changes else entries


@route("/nodes/{node}/network", "POST")
async def create_interface(ctx: RequestContext):
    await svc.create_interface(ctx.rt, ctx.node, ctx.params, _declared(ctx))


@route("/nodes/{node}/network", "PUT")
async def reload_network(ctx: RequestContext):
    return await svc.reload(ctx.rt, ctx.principal, ctx.node)


@route("/nodes/{node}/network", "DELETE")
async def revert_network(ctx: RequestContext):
    await svc.revert(ctx.rt, ctx.node)


@route("/nodes/{node}/network/{iface}", "GET")
async def get_interface(ctx: RequestContext):
    return await svc.get_interface(ctx.rt, ctx.node, ctx.params["iface"])


@route("/nodes/{node}/network/{iface}", "PUT")
async def update_interface(ctx: RequestContext):
    await svc.update_interface(ctx.rt, ctx.node, ctx.params["iface"], ctx.params, _declared(ctx))


@route("/nodes/{node}/network/{iface}", "DELETE")
async def delete_interface(ctx: RequestContext):
    await svc.delete_interface(ctx.rt, ctx.node, ctx.params["iface"])


@route("/nodes/{node}/dns", "GET")
async def get_dns(ctx: RequestContext):
    return await svc.get_dns(ctx.rt, ctx.node)


@route("/nodes/{node}/dns", "PUT")
async def set_dns(ctx: RequestContext):
    await svc.set_dns(ctx.rt, ctx.node, ctx.params)


@route("/nodes/{node}/hosts", "GET")
async def get_hosts(ctx: RequestContext):
    return await svc.get_hosts(ctx.rt, ctx.node)


@route("/nodes/{node}/hosts", "POST")
async def set_hosts(ctx: RequestContext):
    await svc.set_hosts(ctx.rt, ctx.node, ctx.params["data"], ctx.params.get("digest"))


@route("/nodes/{node}/time", "GET")
async def get_time(ctx: RequestContext):
    return await svc.get_time(ctx.rt, ctx.node)


@route("/nodes/{node}/time", "PUT")
async def set_time(ctx: RequestContext):
    await svc.set_time(ctx.rt, ctx.node, ctx.params["timezone"])


@route("/nodes/{node}/services", "GET")
async def list_services(ctx: RequestContext):
    return await svc.list_services(ctx.rt, ctx.node)


@route("/nodes/{node}/services/{service}", "GET")
async def service_index(ctx: RequestContext):
    await svc.service_state(ctx.rt, ctx.node, ctx.params["service"])
    return [{"subdir": name} for name in ("reload", "restart", "start", "state", "stop")]


@route("/nodes/{node}/services/{service}/state", "GET")
async def service_state(ctx: RequestContext):
    return await svc.service_state(ctx.rt, ctx.node, ctx.params["service"])


def _register_service_action(action: str) -> None:
    @route(f"/nodes/{{node}}/services/{{service}}/{action}", "POST")
    async def act(ctx: RequestContext):
        return await svc.service_action(
            ctx.rt, ctx.principal, ctx.node, ctx.params["service"], action
        )


for _action in ("start", "stop", "restart", "reload"):
    _register_service_action(_action)


@route("/nodes/{node}/subscription", "GET")
async def get_subscription(ctx: RequestContext):
    return await svc.subscription(ctx.rt, ctx.node)


@route("/nodes/{node}/subscription", "PUT")
async def set_subscription(ctx: RequestContext):
    await svc.set_subscription(ctx.rt, ctx.node, ctx.params["key"])


@route("/nodes/{node}/subscription", "POST")
async def refresh_subscription(ctx: RequestContext):
    await svc.set_subscription(ctx.rt, ctx.node, None, refresh=True)


@route("/nodes/{node}/subscription", "DELETE")
async def delete_subscription(ctx: RequestContext):
    await svc.set_subscription(ctx.rt, ctx.node, None)


@route("/nodes/{node}/apt/versions", "GET")
async def apt_versions(ctx: RequestContext):
    return await apt_service.versions(ctx.rt, ctx.node)


@route("/nodes/{node}/apt/update", "GET")
async def apt_upgradable(ctx: RequestContext):
    return await apt_service.upgradable(ctx.rt, ctx.node)


@route("/nodes/{node}/apt/update", "POST")
async def apt_refresh(ctx: RequestContext):
    return await apt_service.refresh(ctx.rt, ctx.principal, ctx.node)


@route("/nodes/{node}/apt/changelog", "GET")
async def apt_changelog(ctx: RequestContext):
    return await apt_service.changelog(
        ctx.rt, ctx.node, ctx.params["name"], ctx.params.get("version")
    )


@route("/nodes/{node}/config", "GET")
async def get_node_config(ctx: RequestContext):
    return await svc.node_config(ctx.rt, ctx.node, ctx.params.get("property"))


@route("/nodes/{node}/config", "PUT")
async def set_node_config(ctx: RequestContext):
    await svc.set_node_config(ctx.rt, ctx.node, ctx.params, _declared(ctx))


@route("/nodes/{node}/apt/repositories", "GET")
async def apt_repositories(ctx: RequestContext):
    return await apt_repositories_service.repositories(ctx.rt, ctx.node)


@route("/nodes/{node}/apt/repositories", "POST")
async def apt_change_repository(ctx: RequestContext):
    await apt_repositories_service.change_repository(
        ctx.rt,
        ctx.node,
        ctx.params["path"],
        int(ctx.params["index"]),
        ctx.params.get("enabled"),
        ctx.params.get("digest"),
    )


@route("/nodes/{node}/apt/repositories", "PUT")
async def apt_add_repository(ctx: RequestContext):
    await apt_repositories_service.add_repository(
        ctx.rt, ctx.node, ctx.params["handle"], ctx.params.get("digest")
    )
