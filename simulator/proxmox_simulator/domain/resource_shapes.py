"""How the resource store reads a declared method: its role from the path shape,
and its answer from the ``returns`` schema.

A method's role follows from where its path sits in the contract's tree:

* ``GET P`` / ``POST P`` where ``P/{key}`` is declared: list / create items;
* ``GET`` / ``PUT`` / ``DELETE`` / ``POST`` on ``P/{key}``: read / update /
  delete / create-at-key one item (also ``PUT``/``DELETE P`` with ``key`` as a
  parameter, like 8.x's ``/pools``);
* a literal path whose ``GET`` returns an array is a keyless collection
  (``POST`` appends an entry);
* any other literal path is a config object (``GET`` reads, ``PUT`` merges,
  ``DELETE`` clears) or, for ``POST``, an action whose parameters are recorded.

Everything here is pure: no database, no web framework.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from proxmox_simulator.contracts.model import Contract, Endpoint

LIST, CREATE, READ, UPDATE, DELETE = "list", "create", "read", "update", "delete"
CONFIG_READ, CONFIG_WRITE, CONFIG_CLEAR, ACTION = (
    "config-read",
    "config-write",
    "config-clear",
    "action",
)
# Parameters that steer a write instead of being stored.
CONTROL_PARAMS = frozenset({"digest", "delete", "revert"})


@dataclass(frozen=True)
class Shape:
    role: str
    # The store collection: the item template for keyed collections, the path
    # itself for config objects and keyless collections.
    collection: str
    key_param: str | None = None
    # Path parameters that select the collection (everything but the key).
    scope_params: tuple[str, ...] = ()


def _last_param(path: str) -> str | None:
    last = path.rsplit("/", 1)[-1]
    return last[1:-1] if last.startswith("{") and last.endswith("}") else None


def child_item(contract: Contract, path: str) -> str | None:
    """The declared ``path/{key}`` below ``path``, if any."""
    prefix = path.rstrip("/") + "/"
    for candidate in _paths(contract):
        depth_fits = candidate.count("/") == path.count("/") + 1
        if candidate.startswith(prefix) and depth_fits and _last_param(candidate):
            return candidate
    return None


_PATH_CACHE: dict[int, tuple[Contract, tuple[str, ...]]] = {}


def _paths(contract: Contract) -> tuple[str, ...]:
    entry = _PATH_CACHE.get(id(contract))
    if entry is None or entry[0] is not contract:
        entry = (contract, tuple(contract.paths))
        _PATH_CACHE[id(contract)] = entry
    return entry[1]


def _returns_array(endpoint: Endpoint | None) -> bool:
    return endpoint is not None and endpoint.returns.get("type") == "array"


def shape_of(contract: Contract, endpoint: Endpoint) -> Shape | None:
    """The method's store role; None for a method outside GET/POST/PUT/DELETE."""
    path, method = endpoint.path, endpoint.method
    if method not in ("GET", "POST", "PUT", "DELETE"):
        return None
    params = endpoint.path_params
    child = child_item(contract, path)
    if child is not None and method == "POST":
        return Shape(CREATE, child, _last_param(child), params)
    if child is not None and method == "GET" and _returns_array(endpoint):
        return Shape(LIST, child, _last_param(child), params)
    if child is not None and method in ("PUT", "DELETE"):
        child_key = _last_param(child)
        if any(p.name == child_key for p in endpoint.parameters):
            # 8.x-style ``PUT /pools?poolid=x``: the item's key travels as a parameter.
            return Shape(UPDATE if method == "PUT" else DELETE, child, child_key, params)
    key = _last_param(path)
    if key is not None:
        role = {"GET": READ, "PUT": UPDATE, "DELETE": DELETE, "POST": CREATE}[method]
        return Shape(role, path, key, tuple(p for p in params if p != key))
    if method == "GET":
        return Shape(LIST if _returns_array(endpoint) else CONFIG_READ, path, None, params)
    if method == "PUT":
        return Shape(CONFIG_WRITE, path, None, params)
    if method == "DELETE":
        return Shape(CONFIG_CLEAR, path, None, params)
    if _returns_array(contract.endpoint(path, "GET")):
        return Shape(CREATE, path, None, params)
    return Shape(ACTION, path, None, params)


def returns_task(endpoint: Endpoint) -> bool:
    """PVE declares a worker's UPID as a bare string (at most described as a task ID)."""
    returns = endpoint.returns
    if endpoint.method == "GET" or returns.get("type") != "string":
        return False
    if any(k in returns for k in ("enum", "format", "pattern")):
        return False
    description = str(returns.get("description", "")).lower()
    return not description or "task" in description or "upid" in description


def digest(data: dict) -> str:
    return hashlib.sha1(json.dumps(data, sort_keys=True).encode()).hexdigest()


# -- answers shaped by the returns schema ------------------------------------------


def _types(schema: dict) -> list[str]:
    kind = schema.get("type")
    if kind is None:
        return []
    return list(kind) if isinstance(kind, list) else [kind]


def _optional(schema: dict) -> bool:
    """A per-type property (SDN fabrics' ``redistribute``) declares ``optional`` in its
    ``oneOf`` alternatives, one per protocol: an object of another type has none."""
    if "optional" not in schema:
        alternatives = schema.get("oneOf") or schema.get("anyOf") or ()
        return any(isinstance(a, dict) and _optional(a) for a in alternatives)
    return schema.get("optional") in (1, "1", True)


def shape_value(schema: dict, value, known: dict):
    """``value`` (stored state) rendered as ``schema`` declares it.

    Declared properties that were never written are left out when optional;
    required ones come from ``known`` (path parameters, the item's key), the
    declared default, or the type's empty value: the store never makes up data.
    """
    types = _types(schema)
    if not types:
        return value
    if value is None and "null" in types:
        return None
    kind = types[0] if types[0] != "null" or len(types) == 1 else types[1]
    if kind == "null":
        return None
    if kind == "object":
        source = value if isinstance(value, dict) else {}
        properties = schema.get("properties")
        if not properties:
            return dict(source)
        out = {}
        for name, sub in properties.items():
            if name in source:
                out[name] = shape_value(sub, source[name], known)
            elif name in known:
                out[name] = shape_value(sub, known[name], known)
            elif not _optional(sub):
                out[name] = empty_value(sub)
        if schema.get("additionalProperties") not in (0, "0", False):
            for name, item in source.items():
                out.setdefault(name, item)
        return out
    if kind == "array":
        # A form-encoded array parameter given once arrives as one value.
        items = value if isinstance(value, list) else [] if value is None else [value]
        sub = schema.get("items") or {}
        return [shape_value(sub, item, known) for item in items]
    return _scalar(kind, schema, value)


def _scalar(kind: str, schema: dict, value):
    if value is None:
        return empty_value(schema)
    try:
        if kind == "integer":
            return int(value) if not isinstance(value, bool) else int(value)
        if kind == "number":
            return float(value) if not isinstance(value, (int, float)) else value
        if kind == "boolean":
            return 1 if str(value).lower() in ("1", "true", "yes", "on") else 0
    except (TypeError, ValueError):
        return empty_value(schema)
    if kind == "string":
        return value if isinstance(value, str) else str(value)
    return value


def empty_value(schema: dict):
    """The value a never-written required field reports: default, first enum, or empty."""
    if "default" in schema:
        return schema["default"]
    types = _types(schema)
    kind = next((t for t in types if t != "null"), "null")
    if schema.get("enum"):
        return schema["enum"][0]
    if kind == "integer":
        return int(schema.get("minimum", 0) or 0)
    if kind == "number":
        return float(schema.get("minimum", 0) or 0)
    if kind == "boolean":
        return 0
    if kind == "string":
        return ""
    if kind == "array":
        return []
    if kind == "object":
        return shape_value(schema, {}, {})
    return None


# -- checking an answer against the returns schema -------------------------------


def schema_errors(schema: dict, value, where: str = "data") -> list[str]:
    """Where ``value`` departs from ``schema`` (types, enums, required properties)."""
    types = _types(schema)
    if not types:
        return []
    if value is None:
        return [] if "null" in types or _optional(schema) else [f"{where}: null"]
    errors: list[str] = []
    if not any(_is(kind, value) for kind in types):
        return [f"{where}: {type(value).__name__} is not {'/'.join(types)}"]
    if isinstance(value, dict) and isinstance(schema.get("properties"), dict):
        for name, sub in schema["properties"].items():
            if name in value:
                errors += schema_errors(sub, value[name], f"{where}.{name}")
            elif not _optional(sub):
                errors.append(f"{where}.{name}: required property missing")
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            errors += schema_errors(schema["items"], item, f"{where}[{i}]")
    if schema.get("enum") and isinstance(value, str) and value not in schema["enum"]:
        errors.append(f"{where}: {value!r} not in enum")
    return errors


def _is(kind: str, value) -> bool:
    if kind == "null":
        return value is None
    if kind == "object":
        return isinstance(value, dict)
    if kind == "array":
        return isinstance(value, list)
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return value in (0, 1, True, False)
    # PVE's Perl encoder emits some declared numbers as strings (``/cluster/nextid``
    # answers "100"); clients accept both, so a numeric string passes.
    if kind == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, str) and value.lstrip("-").isdigit()
        )
    if kind == "number":
        if isinstance(value, str):
            try:
                float(value)
            except ValueError:
                return False
            return True
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return True  # "any" and other free-form declarations
