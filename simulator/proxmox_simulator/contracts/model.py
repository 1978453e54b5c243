"""Version-independent normalized model of a PVE API contract.

Source formats differ (the viewer's nested tree, fakepve's flat path map), but
every consumer — routes, validation, permissions, diff — reads only this model.
Unknown source keys are retained in ``extra`` so nothing the source declared is
silently lost.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

# Keys of a parameter schema that the model names explicitly.  Everything else
# (description, typetext, verbose_description, ...) goes to ``extra``.
_PARAM_KEYS = {
    "type",
    "format",
    "enum",
    "optional",
    "default",
    "pattern",
    "minimum",
    "maximum",
    "maxLength",
    "minLength",
    "items",
    "properties",
    "alias",
}
_ENDPOINT_KEYS = {"parameters", "returns", "permissions", "allowtoken", "protected", "method"}
# Keys of a ``parameters`` schema that the flattening below turns into parameters
# and variants; any other key is kept in ``Endpoint.parameter_extra``.
_SCHEMA_KEYS = {
    "properties",
    "additionalProperties",
    "allOf",
    "oneOf",
    "anyOf",
    "type-property",
    "type-property-schema",
}
_INDEXED = re.compile(r"^(?P<stem>[a-z_-]+)\[n\]$")


def _truthy(value: Any) -> bool:
    return value not in (None, 0, "0", False, "")


@dataclass(frozen=True)
class Parameter:
    name: str
    type: str = "string"
    optional: bool = False
    format: Any = None
    enum: tuple[str, ...] | None = None
    default: Any = None
    pattern: str | None = None
    minimum: float | None = None
    maximum: float | None = None
    max_length: int | None = None
    min_length: int | None = None
    alias: str | None = None
    items: Any = None
    properties: Any = None
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def indexed_stem(self) -> str | None:
        """``net[n]`` declares net0, net1, ...; returns ``net`` for such names."""
        match = _INDEXED.match(self.name)
        return match.group("stem") if match else None

    @classmethod
    def from_source(cls, name: str, raw: dict) -> Parameter:
        enum = raw.get("enum")
        alternatives = raw.get("oneOf") or raw.get("anyOf") or ()
        optional = _truthy(raw.get("optional"))
        if "optional" not in raw and alternatives:
            # A per-type parameter (SDN fabrics' ``redistribute``) declares
            # ``optional`` inside its alternatives: one optional one suffices.
            optional = any(_truthy(a.get("optional")) for a in alternatives)
        kind = raw.get("type") or next((a["type"] for a in alternatives if a.get("type")), None)
        return cls(
            name=name,
            type=kind or "string",
            optional=optional,
            format=raw.get("format"),
            enum=tuple(str(e) for e in enum) if enum else None,
            default=raw.get("default"),
            pattern=raw.get("pattern"),
            minimum=raw.get("minimum"),
            maximum=raw.get("maximum"),
            max_length=raw.get("maxLength"),
            min_length=raw.get("minLength"),
            alias=raw.get("alias"),
            items=raw.get("items"),
            properties=raw.get("properties"),
            extra={k: v for k, v in raw.items() if k not in _PARAM_KEYS},
        )

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"name": self.name, "type": self.type, "optional": self.optional}
        for key, value in (
            ("format", self.format),
            ("enum", list(self.enum) if self.enum else None),
            ("default", self.default),
            ("pattern", self.pattern),
            ("minimum", self.minimum),
            ("maximum", self.maximum),
            ("maxLength", self.max_length),
            ("minLength", self.min_length),
            ("alias", self.alias),
            ("items", self.items),
            ("properties", self.properties),
        ):
            if value is not None:
                out[key] = value
        if self.extra:
            out["extra"] = self.extra
        return out

    @classmethod
    def from_dict(cls, data: dict) -> Parameter:
        return cls(
            name=data["name"],
            type=data.get("type", "string"),
            optional=bool(data.get("optional")),
            format=data.get("format"),
            enum=tuple(data["enum"]) if data.get("enum") else None,
            default=data.get("default"),
            pattern=data.get("pattern"),
            minimum=data.get("minimum"),
            maximum=data.get("maximum"),
            max_length=data.get("maxLength"),
            min_length=data.get("minLength"),
            alias=data.get("alias"),
            items=data.get("items"),
            properties=data.get("properties"),
            extra=data.get("extra", {}),
        )


@dataclass(frozen=True)
class Variants:
    """A section-config schema's parameter sets, one per type (PVE 9's HA rules).

    ``type_property`` names the parameter whose value selects the set; each set
    lists the type-specific parameters exactly as that type declares them.
    """

    type_property: str
    by_type: dict = field(default_factory=dict)  # type -> tuple[Parameter, ...]

    def for_type(self, kind: str) -> tuple[Parameter, ...] | None:
        return self.by_type.get(kind)

    def to_dict(self) -> dict:
        return {
            "typeProperty": self.type_property,
            "types": {
                kind: [p.to_dict() for p in params] for kind, params in sorted(self.by_type.items())
            },
        }

    @classmethod
    def from_dict(cls, data: dict) -> Variants:
        return cls(
            type_property=data["typeProperty"],
            by_type={
                kind: tuple(Parameter.from_dict(p) for p in params)
                for kind, params in data.get("types", {}).items()
            },
        )


def _alternative_types(alternative: dict) -> list[str]:
    if alternative.get("instance-type"):
        return [str(alternative["instance-type"])]
    return [str(t) for t in alternative.get("instance-types") or ()]


def _merged(declarations: list[dict], in_every: bool) -> dict:
    """One parameter standing for all of a name's per-type declarations.

    It is optional unless every type requires it, carries a default only when
    every type shares it, and accepts every type's enumeration values; the
    type-specific check happens against ``Variants`` once the type is known.
    """
    merged = dict(declarations[0])
    if not in_every or any(_truthy(d.get("optional")) for d in declarations):
        merged["optional"] = 1
    defaults = {json.dumps(d.get("default"), sort_keys=True) for d in declarations}
    if not in_every or len(defaults) != 1:
        merged.pop("default", None)
    if all(d.get("enum") for d in declarations):
        values: list = []
        for declaration in declarations:
            values += [v for v in declaration["enum"] if v not in values]
        merged["enum"] = values
    else:
        merged.pop("enum", None)
    return merged


def _flatten(schema: dict) -> tuple[dict[str, dict], Variants | None]:
    """Raw parameter schemas of a ``parameters`` object, ``allOf``/``oneOf``/``anyOf`` included.

    PVE 9 describes section-config APIs (HA rules, SDN fabrics) as an ``allOf``
    of common properties and a ``oneOf`` of per-type property sets selected by a
    ``type-property``; each name becomes one parameter, and the per-type sets
    are kept as ``Variants`` for validation.
    """
    flat: dict[str, dict] = {}
    variants: Variants | None = None
    for name, raw in (schema.get("properties") or {}).items():
        flat.setdefault(name, raw)
    for part in schema.get("allOf") or ():
        part_flat, part_variants = _flatten(part)
        for name, raw in part_flat.items():
            flat.setdefault(name, raw)
        variants = variants or part_variants
    alternatives = schema.get("oneOf") or schema.get("anyOf")
    if alternatives:
        type_property = schema.get("type-property")
        if type_property and type_property not in flat:
            flat[type_property] = dict(schema.get("type-property-schema") or {"type": "string"})
        declared: dict[str, list[dict]] = {}
        by_type: dict[str, tuple[Parameter, ...]] = {}
        for alternative in alternatives:
            alt_flat, _nested = _flatten(alternative)
            for name, raw in alt_flat.items():
                declared.setdefault(name, []).append(raw)
            params = tuple(Parameter.from_source(n, alt_flat[n]) for n in sorted(alt_flat))
            for kind in _alternative_types(alternative):
                by_type[kind] = params
        for name, declarations in declared.items():
            if name not in flat:
                flat[name] = _merged(declarations, len(declarations) == len(alternatives))
        if type_property and by_type:
            variants = Variants(type_property, by_type)
    return flat, variants


@dataclass(frozen=True)
class Endpoint:
    path: str
    method: str
    parameters: tuple[Parameter, ...] = ()
    additional_properties: bool = False
    returns: dict = field(default_factory=dict, compare=False)
    permissions: dict | None = None
    allowtoken: bool = True
    protected: bool = False
    extra: dict = field(default_factory=dict, compare=False)
    variants: Variants | None = field(default=None, compare=False)
    parameter_extra: dict = field(default_factory=dict, compare=False)

    @property
    def key(self) -> tuple[str, str]:
        return (self.path, self.method)

    @property
    def path_params(self) -> tuple[str, ...]:
        return tuple(re.findall(r"\{([^}]+)\}", self.path))

    @classmethod
    def from_source(cls, path: str, method: str, info: dict) -> Endpoint:
        params = info.get("parameters") or {}
        props, variants = _flatten(params)
        return cls(
            path=path,
            method=method.upper(),
            parameters=tuple(Parameter.from_source(n, props[n]) for n in sorted(props)),
            additional_properties=_truthy(params.get("additionalProperties", 0)),
            returns=info.get("returns") or {},
            permissions=info.get("permissions"),
            # PVE's default for a method without the key is "tokens allowed".
            allowtoken=_truthy(info.get("allowtoken", 1)),
            protected=_truthy(info.get("protected")),
            extra={k: v for k, v in info.items() if k not in _ENDPOINT_KEYS},
            variants=variants,
            parameter_extra={k: v for k, v in params.items() if k not in _SCHEMA_KEYS},
        )

    def to_dict(self) -> dict:
        out: dict[str, Any] = {
            "path": self.path,
            "method": self.method,
            "parameters": [p.to_dict() for p in self.parameters],
            "additionalProperties": self.additional_properties,
            "returns": self.returns,
            "permissions": self.permissions,
            "allowtoken": self.allowtoken,
            "protected": self.protected,
        }
        if self.extra:
            out["extra"] = self.extra
        if self.variants is not None:
            out["variants"] = self.variants.to_dict()
        if self.parameter_extra:
            out["parameterExtra"] = self.parameter_extra
        return out

    @classmethod
    def from_dict(cls, data: dict) -> Endpoint:
        return cls(
            path=data["path"],
            method=data["method"],
            parameters=tuple(Parameter.from_dict(p) for p in data.get("parameters", [])),
            additional_properties=bool(data.get("additionalProperties")),
            returns=data.get("returns") or {},
            permissions=data.get("permissions"),
            allowtoken=bool(data.get("allowtoken", True)),
            protected=bool(data.get("protected")),
            extra=data.get("extra", {}),
            variants=Variants.from_dict(data["variants"]) if data.get("variants") else None,
            parameter_extra=data.get("parameterExtra", {}),
        )


@dataclass(frozen=True)
class Contract:
    """An immutable snapshot of one PVE version's declared API."""

    version: str
    endpoints: tuple[Endpoint, ...]

    def __post_init__(self) -> None:
        index = {e.key: e for e in self.endpoints}
        object.__setattr__(self, "_index", index)

    @property
    def major(self) -> int:
        return int(self.version.split(".", 1)[0].split("-", 1)[0])

    @property
    def paths(self) -> list[str]:
        return sorted({e.path for e in self.endpoints})

    def endpoint(self, path: str, method: str) -> Endpoint | None:
        return self._index.get((path, method.upper()))  # type: ignore[attr-defined]

    def counts(self) -> dict[str, int]:
        return {"paths": len(self.paths), "methods": len(self.endpoints)}

    def to_dict(self) -> dict:
        ordered = sorted(self.endpoints, key=lambda e: (e.path, e.method))
        return {
            "format": "proxmox-simulator/contract@1",
            "version": self.version,
            "endpoints": [e.to_dict() for e in ordered],
        }

    def to_json(self) -> bytes:
        """Deterministic bytes: sorted keys, fixed separators, no trailing spaces."""
        return canonical_json(self.to_dict())

    def sha256(self) -> str:
        return hashlib.sha256(self.to_json()).hexdigest()

    @classmethod
    def from_dict(cls, data: dict) -> Contract:
        return cls(
            version=data["version"],
            endpoints=tuple(Endpoint.from_dict(e) for e in data["endpoints"]),
        )


def canonical_json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
