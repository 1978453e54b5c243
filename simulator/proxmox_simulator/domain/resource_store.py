"""The contract-driven resource store (application service).

Declared methods that no bespoke handler owns are answered from PostgreSQL
state whose layout follows the contract (see ``resource_shapes``): items of
collections, config objects and recorded actions.  Writes were validated
against the method's parameters by the request plane; here they are applied
(compare-and-swap with ``digest``) and reads are rendered by the method's
``returns`` schema.  Methods that return a UPID apply their write in a real
task's completing transaction, like a PVE worker.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from proxmox_simulator.contracts.model import Contract, Endpoint
from proxmox_simulator.domain import guest_service
from proxmox_simulator.domain import resource_shapes as shapes
from proxmox_simulator.domain.access import Principal
from proxmox_simulator.domain.errors import PveError
from proxmox_simulator.domain.guests import LXC, QEMU
from proxmox_simulator.repositories import access as access_repo
from proxmox_simulator.repositories import inventory
from proxmox_simulator.repositories import resources as repo
from proxmox_simulator.tasks.service import enqueue

STORE_EXECUTOR = "resource-store"
_LIST_SEPARATORS = re.compile(r"[,;\s]+")
# Parents the inventory owns: checked through their own services.
_INVENTORY_PARAMS = frozenset({"node", "vmid", "userid"})

# (path, method) -> True when a bespoke handler answers it.
IsBespoke = Callable[[str, str], bool]


@dataclass(frozen=True)
class StoreRequest:
    contract: Contract
    endpoint: Endpoint
    params: dict
    principal: Principal


def handles(contract: Contract, endpoint: Endpoint, is_bespoke: IsBespoke) -> bool:
    """Whether the store may answer the method.

    Not when a bespoke handler owns another method of the same collection or
    config object: its state lives in the bespoke tables, and a store write
    there would be invisible to the bespoke reads.  Such a method stays
    unhandled (501) until its bespoke handler exists.
    """
    shape = shapes.shape_of(contract, endpoint)
    if shape is None:
        return False
    owned = _bespoke_collections(contract, is_bespoke)
    # A bulk write on a collection's path (``PUT /nodes/{node}/network``) touches
    # the same items as the collection's own methods.
    child = shapes.child_item(contract, endpoint.path)
    return shape.collection not in owned and (child is None or child not in owned)


def _store_creatable(contract: Contract, collection: str, is_bespoke: IsBespoke) -> bool:
    """Whether the store owns ``collection`` and the contract declares a way to create
    its items.  Items of collections without one (node services, PCI devices) exist
    outside the API: the store knows them by their key only and cannot refuse them."""
    if collection in _bespoke_collections(contract, is_bespoke):
        return False
    parent = collection.rsplit("/", 1)[0]
    for path, method in ((parent, "POST"), (collection, "POST")):
        endpoint = contract.endpoint(path, method)
        if endpoint is not None:
            shape = shapes.shape_of(contract, endpoint)
            if shape is not None and shape.role == shapes.CREATE and shape.collection == collection:
                return True
    return False


_BESPOKE_COLLECTIONS: dict[int, tuple[Contract, frozenset[str]]] = {}


def _bespoke_collections(contract: Contract, is_bespoke: IsBespoke) -> frozenset[str]:
    entry = _BESPOKE_COLLECTIONS.get(id(contract))
    if entry is None or entry[0] is not contract:
        owned = set()
        for endpoint in contract.endpoints:
            shape = shapes.shape_of(contract, endpoint)
            if shape is not None and is_bespoke(endpoint.path, endpoint.method):
                owned.add(shape.collection)
        entry = (contract, frozenset(owned))
        _BESPOKE_COLLECTIONS[id(contract)] = entry
    return entry[1]


async def execute(rt, request: StoreRequest, is_bespoke: IsBespoke):
    endpoint, params = request.endpoint, request.params
    shape = shapes.shape_of(request.contract, endpoint)
    scope = _scope(shape.scope_params, params)
    known = {name: params[name] for name in endpoint.path_params}
    async with rt.pool.acquire() as conn:
        await require_parents(conn, request.contract, endpoint, params, is_bespoke)
        if shape.role in (shapes.LIST,):
            rows = await repo.list_items(conn, shape.collection, scope)
            return _render_list(endpoint, shape, rows, params, known)
        if shape.role in (shapes.READ, shapes.CONFIG_READ):
            key = str(params[shape.key_param]) if shape.key_param else ""
            row = await repo.get(conn, shape.collection, scope, key)
            creatable = _store_creatable(request.contract, shape.collection, is_bespoke)
            if row is None and shape.role == shapes.READ and creatable:
                raise PveError(_missing(shape, key))
            data = dict(row["data"]) if row else {}
            version = shapes.digest(data)
            if _accepts_digest(request.contract, endpoint.path):
                # The digest a later write may send to detect concurrent changes.
                data["digest"] = version
            return shapes.shape_value(endpoint.returns, data, {**known, "digest": version})
        async with conn.transaction():
            creatable = shape.key_param is None or _store_creatable(
                request.contract, shape.collection, is_bespoke
            )
            change = await _plan_write(
                conn, request.contract, endpoint, shape, scope, params, creatable
            )
            if shapes.returns_task(endpoint):
                node = params.get("node") or (await inventory.nodes(conn))[0]["node"]
                return await enqueue(
                    conn,
                    rt.clock,
                    node=str(node),
                    task_type=task_type(endpoint),
                    task_id=change["key"],
                    principal=request.principal,
                    payload={"executor": STORE_EXECUTOR, **change},
                )
            await apply(conn, rt.clock.now(), change)
    result = {**change["data"], **({shape.key_param: change["key"]} if shape.key_param else {})}
    if shape.role in (shapes.DELETE, shapes.CONFIG_CLEAR):
        result = {}
    return shapes.shape_value(endpoint.returns, result, known)


def _scope(names, params: dict) -> dict:
    """The parent key of a store row.  Below a guest the node is only where the
    guest runs now: what PVE keeps per guest (firewall, ...) is cluster-wide
    and follows the guest when it migrates."""
    scope = {name: str(params[name]) for name in names if name in params}
    if "vmid" in scope:
        scope.pop("node", None)
    return scope


def task_type(endpoint: Endpoint) -> str:
    """PVE-like worker type from the literal path segments: ``aptupdate``, ``cephosddestroy``."""
    literals = [s for s in endpoint.path.split("/") if s and not s.startswith("{")]
    if literals and literals[0] in ("nodes", "cluster"):
        literals = literals[1:]
    base = "".join(re.sub(r"[^a-z0-9]", "", s.lower()) for s in literals[-2:]) or "task"
    return base + ("destroy" if endpoint.method == "DELETE" else "")


def _missing(shape: shapes.Shape, key: str) -> str:
    return f"{shape.key_param} '{key}' does not exist"


async def require_parents(
    conn, contract, endpoint, params, is_bespoke, *, including_last: bool = False
) -> None:
    """Parent resources named in the path must exist, as in PVE (with
    ``including_last``, also the item the path ends in: a directory index)."""
    if "node" in params:
        await guest_service.require_node(conn, str(params["node"]))
    if "vmid" in params and "node" in params:
        kind = QEMU if "/qemu/" in endpoint.path else LXC if "/lxc/" in endpoint.path else None
        if kind is not None:
            await guest_service.load_guest(conn, kind, str(params["node"]), int(params["vmid"]))
    # What is stored below a user (TFA entries) belongs to a user of the access tables.
    if "{userid}" in endpoint.path and await access_repo.user(conn, str(params["userid"])) is None:
        raise PveError(f"no such user ('{params['userid']}')")
    segments = endpoint.path.split("/")
    for i in range(2, len(segments)):
        name = segments[i]
        if not name.startswith("{") or name[1:-1] in _INVENTORY_PARAMS:
            continue
        template = "/".join(segments[: i + 1])
        if (template == endpoint.path and not including_last) or not _store_creatable(
            contract, template, is_bespoke
        ):
            continue
        parent = "/".join(segments[:i])
        param = name[1:-1]
        parent_scope = _scope(re.findall(r"\{([^}]+)\}", parent), params)
        if await repo.get(conn, template, parent_scope, str(params[param])) is None:
            raise PveError(f"{param} '{params[param]}' does not exist")


async def _plan_write(
    conn, contract, endpoint, shape: shapes.Shape, scope: dict, params: dict, creatable: bool
) -> dict:
    """Check the write against current state now; return what to apply (maybe in a task)."""
    data = {
        k: v
        for k, v in params.items()
        if k not in shape.scope_params and k != shape.key_param and k not in shapes.CONTROL_PARAMS
    }
    change = {"op": shape.role, "collection": shape.collection, "scope": scope, "data": data}
    change["key_param"] = shape.key_param
    if shape.role == shapes.CREATE:
        if shape.key_param is None:
            key = str(await repo.next_integer_key(conn, shape.collection, scope))
        elif shape.key_param in params:
            key = str(params[shape.key_param])
        elif _declared_default(endpoint, shape.key_param) is not None:
            # e.g. an ACME account's ``name`` defaults to "default".
            key = str(_declared_default(endpoint, shape.key_param))
        elif _integer_key(contract, shape):
            key = str(await repo.next_integer_key(conn, shape.collection, scope))
        else:
            key = await _free_name(conn, shape, scope)
        if await repo.get(conn, shape.collection, scope, key) is not None:
            raise PveError(f"{shape.key_param or 'entry'} '{key}' already exists")
        change["key"] = key
        return change
    key = str(params[shape.key_param]) if shape.key_param else ""
    change["key"] = key
    row = await repo.get(conn, shape.collection, scope, key, for_update=True)
    # Items of a collection the API cannot create (Ceph flags, health mutes)
    # exist outside it: a first write records them instead of being refused.
    if shape.role in (shapes.UPDATE, shapes.DELETE) and row is None and creatable:
        raise PveError(_missing(shape, key))
    current = dict(row["data"]) if row else {}
    if params.get("digest") and row is not None and params["digest"] != shapes.digest(current):
        raise PveError("detected modified configuration - file changed by other user? Try again.")
    if shape.role in (shapes.UPDATE, shapes.CONFIG_WRITE):
        merged = {**current, **data}
        deleted = params.get("delete") or ""
        # ``delete`` is a list string, or (declared as an array) a list of names.
        entries = deleted if isinstance(deleted, list) else [deleted]
        for name in (n for entry in entries for n in _LIST_SEPARATORS.split(str(entry))):
            merged.pop(name, None)
        change["data"] = merged
    change["version"] = row["version"] if row else None
    return change


async def _free_name(conn, shape: shapes.Shape, scope: dict) -> str:
    """A name for an item the client did not name: the key's own name numbered
    (``rule0``), which fits PVE's identifier formats."""
    stem = re.sub(r"[^a-z_]", "", shape.key_param.lower()) or "item"
    n = 0
    while await repo.get(conn, shape.collection, scope, f"{stem}{n}") is not None:
        n += 1
    return f"{stem}{n}"


def _accepts_digest(contract: Contract, path: str) -> bool:
    writer = contract.endpoint(path, "PUT")
    return writer is not None and any(p.name == "digest" for p in writer.parameters)


def _declared_default(endpoint: Endpoint, name: str):
    return next((p.default for p in endpoint.parameters if p.name == name), None)


def _integer_key(contract: Contract, shape: shapes.Shape) -> bool:
    """Keys declared as integers (firewall ``pos``, ``osdid``) are numbered like PVE does."""
    for method in ("GET", "PUT", "DELETE", "POST"):
        item = contract.endpoint(shape.collection, method)
        if item is None:
            continue
        for param in item.parameters:
            if param.name == shape.key_param:
                return param.type == "integer"
    return False


async def apply(conn, now: float, change: dict) -> None:
    """Apply a planned write inside the caller's transaction."""
    op, collection, scope, key = change["op"], change["collection"], change["scope"], change["key"]
    if op == shapes.CREATE:
        if not await repo.insert(conn, collection, scope, key, change["data"], now):
            raise PveError(f"{change['key_param'] or 'entry'} '{key}' already exists")
    elif op in (shapes.DELETE, shapes.CONFIG_CLEAR):
        await repo.delete(conn, collection, scope, key, change["key_param"])
    elif change.get("version") is None:
        # A config object or action record written for the first time.
        await repo.upsert(conn, collection, scope, key, change["data"], now)
    else:
        await repo.update(
            conn,
            collection,
            scope,
            key,
            change["data"],
            expected_version=change["version"],
            now=now,
        )


def _render_list(endpoint, shape, rows, params, known) -> list:
    items = []
    filters = {
        k: str(v)
        for k, v in params.items()
        if k not in endpoint.path_params and not isinstance(v, (dict, list))
    }
    schema = endpoint.returns.get("items") or {}
    # The list names the key after its link ("{pool_name}"), which may differ
    # from the item's path parameter ("{name}").
    hrefs = [str(link.get("href", "")) for link in endpoint.returns.get("links") or []]
    link_field = hrefs[0][1:-1] if len(hrefs) == 1 and hrefs[0].startswith("{") else None
    for row in rows:
        entry = dict(row["data"])
        if shape.key_param:
            entry.setdefault(shape.key_param, row["key"])
            if link_field and "/" not in link_field:
                entry.setdefault(link_field, row["key"])
        # A query parameter that names a stored field filters by it (``type=...``).
        if any(k in entry and str(entry[k]) != v for k, v in filters.items()):
            continue
        items.append(shapes.shape_value(schema, entry, {**known, "digest": shapes.digest(entry)}))
    return items
