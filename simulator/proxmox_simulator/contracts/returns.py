"""Check a response body against a method's declared ``returns`` schema.

PVE's schemas are JSON-Schema-like: ``type`` (one of string, integer, number,
boolean, null, object, array, any), ``properties`` whose members are required
unless ``optional``, ``items``, ``enum`` and ``additionalProperties``.  An
object accepts keys the schema does not name unless it says
``additionalProperties: 0`` — PVE's own serializer behaves that way.
"""

from __future__ import annotations

from typing import Any


def _truthy(value: Any) -> bool:
    return value not in (None, 0, "0", False, "")


def _type_ok(declared: str, value: Any) -> bool:
    if declared == "any":
        return True
    if declared == "null":
        return value is None
    if declared == "string":
        return isinstance(value, str)
    if declared == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if declared == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if declared == "boolean":
        # PVE renders booleans as 0/1 integers.
        return isinstance(value, bool) or value in (0, 1)
    if declared == "object":
        return isinstance(value, dict)
    if declared == "array":
        return isinstance(value, list)
    return True  # a type the checker does not know is not the response's fault


def returns_errors(schema: dict, value: Any, where: str = "data") -> list[str]:
    """Every place where ``value`` contradicts ``schema`` (empty list: it conforms)."""
    if not schema:
        return []
    errors: list[str] = []
    declared = schema.get("type")
    # A "null" method may still answer nothing at all; PVE sends {"data": null}.
    if value is None and declared not in (None, "null", "any"):
        return [f"{where}: null where {declared} is declared"]
    if isinstance(declared, list):
        if not any(_type_ok(t, value) for t in declared):
            errors.append(f"{where}: {type(value).__name__} is none of {declared}")
        return errors
    if declared and not _type_ok(declared, value):
        return [f"{where}: {type(value).__name__} where {declared} is declared"]
    enum = schema.get("enum")
    if enum and value is not None and str(value) not in {str(e) for e in enum}:
        errors.append(f"{where}: {value!r} is not one of {list(enum)}")
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        for name, sub in properties.items():
            if name in value:
                errors.extend(returns_errors(sub, value[name], f"{where}.{name}"))
            elif not _truthy(sub.get("optional")) and "default" not in sub:
                errors.append(f"{where}: required property {name!r} is missing")
        if "additionalProperties" in schema and not _truthy(schema["additionalProperties"]):
            extra = sorted(set(value) - set(properties))
            if extra:
                errors.append(f"{where}: undeclared properties {extra}")
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            errors.extend(returns_errors(schema["items"], item, f"{where}[{index}]"))
    return errors
