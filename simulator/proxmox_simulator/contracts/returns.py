"""Check a response body against a method's declared ``returns`` schema.

PVE's schemas are JSON-Schema-like: ``type`` (one of string, integer, number,
boolean, null, object, array, any), ``properties`` whose members are required
unless ``optional``, ``items``, ``enum`` and ``additionalProperties``.  An
object accepts keys the schema does not name unless it says
``additionalProperties: 0`` — PVE's own serializer behaves that way.
"""

from __future__ import annotations

from collections.abc import Callable
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


Trim = Callable[[Any], Any]


def closed_trimmer(schema: dict) -> Trim | None:
    """What a major's serializer leaves of an answer: keys a closed object does not declare go.

    PVE's HTTP server hands a handler's result to the JSON encoder unchecked (its
    RESTHandler verifies ``returns`` only for the CLI, ``pvesh``), and its JSONSchema
    refuses an undeclared key only where an object says ``additionalProperties: 0``.
    A major's own code therefore never emits an undeclared key into a closed object
    (``pvesh`` would fail on it), while open objects carry what the code put there.
    ``None`` when ``schema`` closes no object anywhere: the answer passes untouched.
    """
    if not isinstance(schema, dict):
        return None
    items = _trimmer_of(schema.get("items"))
    properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    inner = {name: t for name, sub in properties.items() if (t := _trimmer_of(sub)) is not None}
    closed = "additionalProperties" in schema and not _truthy(schema["additionalProperties"])
    if items is None and not inner and not closed:
        return None
    allowed = frozenset(properties)

    def trim(value: Any) -> Any:
        if isinstance(value, list) and items is not None:
            return [items(v) for v in value]
        if not isinstance(value, dict):
            return value
        kept = {k: v for k, v in value.items() if k in allowed} if closed else dict(value)
        for name, sub_trim in inner.items():
            if name in kept:
                kept[name] = sub_trim(kept[name])
        return kept

    return trim


def _trimmer_of(schema: Any) -> Trim | None:
    return closed_trimmer(schema) if isinstance(schema, dict) else None


def field_set_errors(schema: dict, value: Any, where: str = "data") -> list[str]:
    """Only the field set of ``value`` against ``schema``: a required property missing, or a
    key a closed object does not declare (types and enums are ``returns_errors``' job)."""
    if not isinstance(schema, dict):
        return []
    errors: list[str] = []
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            errors.extend(field_set_errors(schema["items"], item, f"{where}[{index}]"))
    if not isinstance(value, dict):
        return errors
    properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    for name, sub in properties.items():
        if name in value:
            errors.extend(field_set_errors(sub, value[name], f"{where}.{name}"))
        elif not _truthy(sub.get("optional")) and "default" not in sub:
            errors.append(f"{where}: required property {name!r} is missing")
    if "additionalProperties" in schema and not _truthy(schema["additionalProperties"]):
        extra = sorted(set(value) - set(properties))
        if extra:
            errors.append(f"{where}: undeclared properties {extra}")
    return errors
