"""Firewall: cluster, node, guest and SDN vnet files (options, rules with ``pos``,
aliases, IP sets, refs, log) and the cluster's security groups."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from proxmox_simulator.api.handlers.registry import RequestContext, route
from proxmox_simulator.domain import firewall_macros
from proxmox_simulator.domain import firewall_service as svc
from proxmox_simulator.domain.guests import LXC, QEMU

ScopeOf = Callable[[RequestContext], Awaitable[svc.Scope]]
_NOT_OPTIONS = frozenset({"digest", "delete", "node", "vmid"})


def _declared(ctx: RequestContext) -> set[str]:
    return {p.name for p in ctx.endpoint.parameters}


def _register_rules(collection: str, item: str, scope_of: ScopeOf) -> None:
    @route(collection, "GET")
    async def list_rules(ctx: RequestContext):
        return await svc.list_rules(ctx.rt, await scope_of(ctx))

    @route(collection, "POST")
    async def create_rule(ctx: RequestContext):
        keys = svc.rule_keys(_declared(ctx))
        await svc.create_rule(ctx.rt, await scope_of(ctx), ctx.params, keys)

    @route(item, "GET")
    async def get_rule(ctx: RequestContext):
        return await svc.get_rule(ctx.rt, await scope_of(ctx), int(ctx.params["pos"]))

    @route(item, "PUT")
    async def update_rule(ctx: RequestContext):
        keys = svc.rule_keys(_declared(ctx))
        await svc.update_rule(ctx.rt, await scope_of(ctx), int(ctx.params["pos"]), ctx.params, keys)

    @route(item, "DELETE")
    async def delete_rule(ctx: RequestContext):
        await svc.delete_rule(
            ctx.rt, await scope_of(ctx), int(ctx.params["pos"]), ctx.params.get("digest")
        )


def _register_options(base: str, scope_of: ScopeOf) -> None:
    @route(f"{base}/options", "GET")
    async def get_options(ctx: RequestContext):
        return await svc.get_options(ctx.rt, await scope_of(ctx))

    @route(f"{base}/options", "PUT")
    async def set_options(ctx: RequestContext):
        keys = frozenset(_declared(ctx)) - _NOT_OPTIONS
        await svc.set_options(ctx.rt, await scope_of(ctx), ctx.params, keys)


def _register_names(base: str, scope_of: ScopeOf) -> None:
    """Aliases, IP sets and refs (cluster and guest files have them)."""

    @route(f"{base}/aliases", "GET")
    async def list_aliases(ctx: RequestContext):
        return await svc.list_aliases(ctx.rt, await scope_of(ctx))

    @route(f"{base}/aliases", "POST")
    async def create_alias(ctx: RequestContext):
        await svc.create_alias(ctx.rt, await scope_of(ctx), ctx.params)

    @route(f"{base}/aliases/{{name}}", "GET")
    async def get_alias(ctx: RequestContext):
        return await svc.get_alias(ctx.rt, await scope_of(ctx), ctx.params["name"])

    @route(f"{base}/aliases/{{name}}", "PUT")
    async def update_alias(ctx: RequestContext):
        await svc.update_alias(ctx.rt, await scope_of(ctx), ctx.params["name"], ctx.params)

    @route(f"{base}/aliases/{{name}}", "DELETE")
    async def delete_alias(ctx: RequestContext):
        await svc.delete_alias(
            ctx.rt, await scope_of(ctx), ctx.params["name"], ctx.params.get("digest")
        )

    @route(f"{base}/ipset", "GET")
    async def list_ipsets(ctx: RequestContext):
        return await svc.list_ipsets(ctx.rt, await scope_of(ctx))

    @route(f"{base}/ipset", "POST")
    async def create_ipset(ctx: RequestContext):
        await svc.create_ipset(ctx.rt, await scope_of(ctx), ctx.params)

    @route(f"{base}/ipset/{{name}}", "GET")
    async def ipset_entries(ctx: RequestContext):
        return await svc.ipset_entries(ctx.rt, await scope_of(ctx), ctx.params["name"])

    @route(f"{base}/ipset/{{name}}", "POST")
    async def add_entry(ctx: RequestContext):
        await svc.add_ipset_entry(ctx.rt, await scope_of(ctx), ctx.params["name"], ctx.params)

    @route(f"{base}/ipset/{{name}}", "DELETE")
    async def delete_ipset(ctx: RequestContext):
        await svc.delete_ipset(
            ctx.rt,
            await scope_of(ctx),
            ctx.params["name"],
            bool(ctx.params.get("force")),
            ctx.params.get("digest"),
        )

    @route(f"{base}/ipset/{{name}}/{{cidr}}", "GET")
    async def get_entry(ctx: RequestContext):
        return await svc.get_ipset_entry(
            ctx.rt, await scope_of(ctx), ctx.params["name"], ctx.params["cidr"]
        )

    @route(f"{base}/ipset/{{name}}/{{cidr}}", "PUT")
    async def update_entry(ctx: RequestContext):
        await svc.update_ipset_entry(
            ctx.rt, await scope_of(ctx), ctx.params["name"], ctx.params["cidr"], ctx.params
        )

    @route(f"{base}/ipset/{{name}}/{{cidr}}", "DELETE")
    async def delete_entry(ctx: RequestContext):
        await svc.delete_ipset_entry(
            ctx.rt,
            await scope_of(ctx),
            ctx.params["name"],
            ctx.params["cidr"],
            ctx.params.get("digest"),
        )

    @route(f"{base}/refs", "GET")
    async def refs(ctx: RequestContext):
        return await svc.refs(ctx.rt, await scope_of(ctx), ctx.params.get("type"))


def _register_log(base: str, scope_of: ScopeOf) -> None:
    @route(f"{base}/log", "GET")
    async def log(ctx: RequestContext):
        await scope_of(ctx)  # the node or guest must exist
        return svc.log_lines()


# -- cluster ----------------------------------------------------------------------------


async def _cluster(ctx: RequestContext) -> svc.Scope:
    return await svc.cluster_scope(ctx.rt)


async def _node(ctx: RequestContext) -> svc.Scope:
    return await svc.node_scope(ctx.rt, ctx.node)


async def _group(ctx: RequestContext) -> svc.Scope:
    return await svc.group_scope(ctx.rt, ctx.params["group"])


_register_rules("/cluster/firewall/rules", "/cluster/firewall/rules/{pos}", _cluster)
_register_options("/cluster/firewall", _cluster)
_register_names("/cluster/firewall", _cluster)
_register_rules("/nodes/{node}/firewall/rules", "/nodes/{node}/firewall/rules/{pos}", _node)
_register_options("/nodes/{node}/firewall", _node)
_register_log("/nodes/{node}/firewall", _node)


@route("/cluster/firewall/groups", "GET")
async def list_groups(ctx: RequestContext):
    return await svc.list_groups(ctx.rt)


@route("/cluster/firewall/groups", "POST")
async def create_group(ctx: RequestContext):
    await svc.create_group(ctx.rt, ctx.params)


@route("/cluster/firewall/groups/{group}", "DELETE")
async def delete_group(ctx: RequestContext):
    await svc.delete_group(ctx.rt, ctx.params["group"])


# A security group's rules: the group path itself is the rule collection.
_register_rules(
    "/cluster/firewall/groups/{group}", "/cluster/firewall/groups/{group}/{pos}", _group
)


def _register_guest(kind: str) -> None:
    base = f"/nodes/{{node}}/{kind}/{{vmid}}/firewall"

    async def scope_of(ctx: RequestContext) -> svc.Scope:
        return await svc.guest_scope(ctx.rt, kind, ctx.node, ctx.vmid)

    _register_rules(f"{base}/rules", f"{base}/rules/{{pos}}", scope_of)
    _register_options(base, scope_of)
    _register_names(base, scope_of)
    _register_log(base, scope_of)


_register_guest(QEMU)
_register_guest(LXC)


async def _vnet(ctx: RequestContext) -> svc.Scope:
    return await svc.vnet_scope(ctx.rt, ctx.params["vnet"])


_register_rules(
    "/cluster/sdn/vnets/{vnet}/firewall/rules",
    "/cluster/sdn/vnets/{vnet}/firewall/rules/{pos}",
    _vnet,
)
_register_options("/cluster/sdn/vnets/{vnet}/firewall", _vnet)


@route("/cluster/firewall/macros", "GET")
async def macros(ctx: RequestContext):
    return firewall_macros.listing()
