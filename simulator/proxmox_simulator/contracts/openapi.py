"""An OpenAPI 3.1 document generated from a contract snapshot.

Every declared method becomes an operation under ``/api2/json``: path parameters,
query parameters (GET, DELETE) or a form body (POST, PUT), and the ``returns``
schema inside PVE's ``{"data": ...}`` envelope. PVE writes its patterns as Perl
regular expressions and names formats only it knows (``pve-node``), so those stay
beside the JSON Schema as ``x-pve-pattern`` / ``x-pve-format`` instead of inside it.
"""

from __future__ import annotations

from typing import Any

from proxmox_simulator.contracts.model import Contract, Endpoint, Parameter

BASE = "/api2/json"
_TYPES = {"string", "integer", "number", "boolean", "null", "object", "array"}


def parameter_schema(parameter: Parameter) -> dict:
    schema: dict[str, Any]
    if parameter.enum:
        schema = {"type": "string", "enum": list(parameter.enum)}
    elif parameter.type == "boolean":
        # PVE takes and renders booleans as 0/1.
        schema = {"type": "integer", "enum": [0, 1]}
    elif parameter.type in ("integer", "number"):
        schema = {"type": parameter.type}
        # Some schemas write their bounds as strings ("0").
        if parameter.minimum is not None:
            schema["minimum"] = float(parameter.minimum)
        if parameter.maximum is not None:
            schema["maximum"] = float(parameter.maximum)
    elif parameter.type == "array":
        schema = {"type": "array", "items": returns_schema(parameter.items or {})}
    else:
        schema = {"type": "string"}
        if parameter.max_length:
            schema["maxLength"] = int(parameter.max_length)
        if parameter.min_length:
            schema["minLength"] = int(parameter.min_length)
    if parameter.default is not None:
        # PVE's defaults are not always in their own enum or of their type ("all", "0").
        valid = _fits(schema, parameter.default)
        schema["default" if valid else "x-pve-default"] = parameter.default
    if parameter.pattern:
        schema["x-pve-pattern"] = parameter.pattern
    if parameter.format and isinstance(parameter.format, str):
        schema["x-pve-format"] = parameter.format
    description = parameter.extra.get("description")
    if isinstance(description, str):
        schema["description"] = description
    return schema


def _fits(schema: dict, value: Any) -> bool:
    if "enum" in schema:
        return value in schema["enum"]
    kind = schema.get("type")
    if kind == "string":
        return isinstance(value, str) and len(value) <= schema.get("maxLength", len(value))
    if kind in ("integer", "number"):
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if kind == "integer" and not float(value).is_integer():
            return False
        return schema.get("minimum", value) <= value <= schema.get("maximum", value)
    return False


def returns_schema(schema: dict, depth: int = 0) -> dict:
    """PVE's ``returns`` (JSON-Schema-like) as JSON Schema 2020-12."""
    if not isinstance(schema, dict) or depth > 12:
        return {}
    kind = schema.get("type")
    out: dict[str, Any] = {}
    if isinstance(kind, str) and kind in _TYPES:
        out["type"] = kind
        if kind == "boolean":
            out = {"type": ["boolean", "integer"]}
    if kind == "object" or "properties" in schema:
        props = schema.get("properties") or {}
        if isinstance(props, dict):
            out["properties"] = {
                str(name): returns_schema(sub, depth + 1) for name, sub in props.items()
            }
            required = [
                name
                for name, sub in props.items()
                if isinstance(sub, dict) and sub.get("optional") in (None, 0, "0", False)
            ]
            if required:
                out["required"] = sorted(required)
    if kind == "array" or "items" in schema:
        out["items"] = returns_schema(schema.get("items") or {}, depth + 1)
    enum = schema.get("enum")
    if isinstance(enum, list) and enum and kind == "string":
        out["enum"] = [str(v) for v in enum]
    description = schema.get("description")
    if isinstance(description, str):
        out["description"] = description
    return out


def operation(endpoint: Endpoint) -> dict:
    in_path = set(endpoint.path_params)
    fields = [p for p in endpoint.parameters if p.name not in in_path and not p.indexed_stem]
    op: dict[str, Any] = {
        "operationId": f"{endpoint.method} {endpoint.path}",
        "parameters": [
            {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
            for name in endpoint.path_params
        ],
        "responses": {
            "200": {
                "description": "success",
                "content": {
                    "application/json": {
                        "schema": {
                            "type": "object",
                            "properties": {"data": returns_schema(endpoint.returns)},
                        }
                    }
                },
            },
            "default": {"description": "PVE's error envelope; the message is the reason phrase"},
        },
    }
    properties = {p.name: parameter_schema(p) for p in fields}
    required = [p.name for p in fields if not p.optional]
    if endpoint.method in ("GET", "DELETE"):
        op["parameters"] += [
            {"name": name, "in": "query", "required": name in required, "schema": schema}
            for name, schema in properties.items()
        ]
    elif properties:
        body: dict[str, Any] = {"type": "object", "properties": properties}
        if required:
            body["required"] = required
        op["requestBody"] = {
            "required": bool(required),
            "content": {"application/x-www-form-urlencoded": {"schema": body}},
        }
    if (endpoint.permissions or {}).get("user") == "world":
        op["security"] = []
    if endpoint.permissions is not None:
        op["x-pve-permissions"] = endpoint.permissions
    if not endpoint.allowtoken:
        op["x-pve-allowtoken"] = 0
    if endpoint.extra.get("observed"):
        op["x-pve-observed"] = 1
    return op


def openapi_document(contract: Contract, *, profile: str = "strict-docs") -> dict:
    paths: dict[str, dict] = {}
    for endpoint in sorted(contract.endpoints, key=lambda e: (e.path, e.method)):
        paths.setdefault(BASE + endpoint.path, {})[endpoint.method.lower()] = operation(endpoint)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": f"Proxmox VE {contract.version} API (simulator)",
            "version": contract.version,
            "x-pve-profile": profile,
        },
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "paths": paths,
        "components": {
            "securitySchemes": {
                "ticket": {"type": "apiKey", "in": "cookie", "name": "PVEAuthCookie"},
                "csrf": {"type": "apiKey", "in": "header", "name": "CSRFPreventionToken"},
                "apiToken": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "Authorization",
                    "description": "PVEAPIToken=user@realm!tokenid=secret",
                },
            }
        },
        "security": [{"ticket": [], "csrf": []}, {"apiToken": []}],
    }
