"""Contract-driven parameter validation, with PVE's spellings and messages.

Query strings and form bodies deliver text; JSON bodies deliver native
values.  Both are coerced the way PVE's JSONSchema does: booleans accept
1/0/yes/no/on/off/true/false, integers accept an optional sign.
"""

from __future__ import annotations

import re
import sys

from proxmox_simulator.contracts.model import Endpoint, Parameter, Variants
from proxmox_simulator.domain import property_strings
from proxmox_simulator.domain.errors import ParameterError

_TRUE = {"1", "yes", "on", "true"}
_FALSE = {"0", "no", "off", "false"}
_INTEGER = re.compile(r"^[+-]?\d+$")
_NUMBER = re.compile(r"^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$")

# Named string formats that matter for routing and identity; others pass.
_FORMATS = {
    "pve-node": re.compile(r"^[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?$"),
    "pve-vmid": re.compile(r"^\d+$"),
    "pve-storage-id": re.compile(r"^[a-z][a-z0-9\-_.]*[a-z0-9]$", re.I),
    "pve-poolid": re.compile(r"^[A-Za-z0-9_][A-Za-z0-9\-_/]*$"),
    "pve-userid": re.compile(r"^[^\s:/]+@[A-Za-z][A-Za-z0-9._-]*$"),
    "pve-groupid": re.compile(r"^[A-Za-z0-9.\-_]+$"),
    "pve-roleid": re.compile(r"^[A-Za-z0-9.\-_]+$"),
    "pve-realm": re.compile(r"^[A-Za-z][A-Za-z0-9.\-_]+$"),
    "pve-tokenid": re.compile(r"^[A-Za-z][A-Za-z0-9._-]*$"),
    # PVE's $CONFIGID_RE (backup job IDs like "backup-1a2b3c4d-e5f6" pass it).
    "pve-configid": re.compile(r"^[a-z][a-z0-9_-]+$", re.I),
}


def parse_boolean(value) -> int | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int) and value in (0, 1):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return 1
    if text in _FALSE:
        return 0
    return None


class _ParameterIndex:
    """Per-endpoint lookup: plain names, plus ``net[n]``-style indexed families."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.by_name = {p.name: p for p in endpoint.parameters if not p.indexed_stem}
        self.indexed = tuple(
            (re.compile(rf"^{re.escape(p.indexed_stem)}\d+$"), p)
            for p in endpoint.parameters
            if p.indexed_stem
        )

    def get(self, name: str) -> Parameter | None:
        param = self.by_name.get(name)
        if param is not None:
            return param
        for pattern, indexed in self.indexed:
            if pattern.match(name):
                return indexed
        return None


# Endpoints are immutable and live as long as their contract; index them once.
_INDEXES: dict[int, tuple[Endpoint, _ParameterIndex]] = {}


def _index(endpoint: Endpoint) -> _ParameterIndex:
    entry = _INDEXES.get(id(endpoint))
    if entry is None or entry[0] is not endpoint:
        entry = (endpoint, _ParameterIndex(endpoint))
        _INDEXES[id(endpoint)] = entry
    return entry[1]


def _schema_for(endpoint: Endpoint, name: str) -> Parameter | None:
    return _index(endpoint).get(name)


# No PVE configuration file (and no PostgreSQL text) can hold a NUL character.
_NUL = "value must not contain a NUL character"
_UNDECLARED = (
    "property is not defined in schema and the schema does not allow additional properties"
)


def coerce(param: Parameter, value, name: str | None = None):
    """Return (value, error message or None); ``name`` is the parameter as sent (``net1``)."""
    kind = param.type
    if kind == "boolean":
        parsed = parse_boolean(value)
        if parsed is None:
            return None, f"type check ('boolean') failed - got '{value}'"
        return parsed, None
    if kind == "integer":
        if isinstance(value, bool) or not (
            isinstance(value, int) or _INTEGER.match(str(value).strip())
        ):
            return None, f"type check ('integer') failed - got '{value}'"
        return _check_range(param, _integer(value))
    if kind == "number":
        if isinstance(value, bool) or not (
            isinstance(value, (int, float)) or _NUMBER.match(str(value).strip())
        ):
            return None, f"type check ('number') failed - got '{value}'"
        return _check_range(param, float(value))
    if kind == "array":
        # A form-encoded array given once is one string: a list of that one entry.
        items = value if isinstance(value, list) else [value]
        if any("\x00" in str(item) for item in items):
            return None, _NUL
        return items, None
    if kind == "object":
        return value, None
    # string (and anything else declared as text)
    if isinstance(value, list) and _is_list_format(param.format) and value:
        # PVE's HTTP server joins a repeated form field with NUL characters and
        # its ``-list`` formats split on them: ``content=iso&content=import``
        # (how proxmoxer and the npm client send an array) is the list
        # "iso,import".  The items of these formats (IDs, content types) hold
        # no separator, so the comma list every domain service splits is the same.
        if any(not isinstance(item, str) or "\x00" in item for item in value):
            return None, _NUL
        return ",".join(value), None
    if isinstance(value, (dict, list)):
        return None, "type check ('string') failed"
    text = str(value) if not isinstance(value, bool) else str(int(value))
    if "\x00" in text:
        return None, _NUL
    if param.enum and text not in param.enum:
        return (
            None,
            f"value '{text}' does not have a value in the enumeration '{', '.join(param.enum)}'",
        )
    if param.max_length is not None and len(text) > param.max_length:
        return None, f"value may only be {param.max_length} characters long"
    if param.min_length is not None and len(text) < param.min_length:
        return None, f"value must be at least {param.min_length} characters long"
    if param.pattern:
        compiled = _compiled(param.pattern)
        if compiled is not None and not compiled.fullmatch(text):
            return None, "value does not match the regex pattern"
    fmt = param.format
    properties = property_strings.property_format(fmt)
    if properties is not None:
        try:
            property_strings.parse(properties, text, name or param.name)
        except property_strings.FormatError as exc:
            return None, str(exc)
    elif isinstance(fmt, str):
        checker = _FORMATS.get(fmt)
        if checker is not None and not checker.match(text):
            return None, f"value does not look like a valid {fmt.removeprefix('pve-')}"
        message = None if checker is not None else property_strings.check_named(fmt, text)
        if message is not None:
            return None, f"invalid format - {message}\n"
    return text, None


def _is_list_format(fmt) -> bool:
    """A named ``…-list`` / ``…-alist`` format (pve-storage-content-list, pve-vmid-list, …)."""
    return isinstance(fmt, str) and (fmt.endswith("-list") or fmt.endswith("-alist"))


_PERL_FLAGS = re.compile(r"\(\?\^([a-z]*):")
_PATTERNS: dict[str, re.Pattern | None] = {}


def _compiled(pattern: str) -> re.Pattern | None:
    """PVE's patterns are Perl regexes: translate ``(?^flags:`` groups and ``\\z``.

    A pattern Python cannot compile even after translation is not enforced
    (better than rejecting valid input with a made-up error).
    """
    if pattern not in _PATTERNS:
        translated = _PERL_FLAGS.sub(
            lambda m: f"(?{m.group(1).replace('u', '')}:" if m.group(1).replace("u", "") else "(?:",
            pattern,
        )
        translated = translated.replace("\\z", "\\Z")
        try:
            _PATTERNS[pattern] = re.compile(translated)
        except re.error:
            _PATTERNS[pattern] = None
    return _PATTERNS[pattern]


# The largest magnitude int() reads from text (sys.get_int_max_str_digits()) and str() prints.
_WIDEST = 10 ** sys.get_int_max_str_digits() - 1


def _integer(value) -> int:
    """PVE reads integers as Perl numbers: one with thousands of digits is infinite there,
    above every maximum and past the end of every list. Here it is the widest integer
    Python reads and prints, which behaves the same wherever the simulator compares it."""
    if isinstance(value, int):
        return value
    text = str(value).strip()
    try:
        return int(text)
    except ValueError:  # only the digit limit: _INTEGER matched the text
        return -_WIDEST if text.startswith("-") else _WIDEST


def _check_range(param: Parameter, number):
    # Contracts write some bounds as strings (PVE's own schema has `"minimum": "0"`).
    if param.minimum is not None and number < float(param.minimum):
        return None, f"value must have a minimum value of {_fmt_num(param.minimum)}"
    if param.maximum is not None and number > float(param.maximum):
        return None, f"value must have a maximum value of {_fmt_num(param.maximum)}"
    return number, None


def _fmt_num(value) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def validate(endpoint: Endpoint, path_params: dict, supplied: dict) -> dict:
    """Validate and coerce all parameters; raise ParameterError with per-field messages."""
    errors: dict[str, str] = {}
    values: dict = {}
    merged = dict(supplied)
    for name, value in path_params.items():
        if name in merged and str(merged[name]) != value:
            errors[name] = "duplicate parameter (path and body differ)"
        merged[name] = value
    for name, value in merged.items():
        param = _schema_for(endpoint, name)
        if param is None:
            if name in path_params:
                # The path template itself declares it (some schemas omit it
                # from the parameters, e.g. ``{url_seq}``).
                values[name] = value
            elif not endpoint.additional_properties:
                errors[name] = _UNDECLARED
            else:
                values[name] = value
            continue
        coerced, error = coerce(param, value, name)
        if error:
            errors[name] = error
        else:
            values[name] = coerced
    for param in endpoint.parameters:
        if param.indexed_stem or param.optional or param.name in merged:
            continue
        errors[param.name] = "property is missing and it is not optional"
    if endpoint.variants is not None and not errors:
        _check_variant(endpoint.variants, merged, values, errors)
    if errors:
        raise ParameterError(errors)
    return values


def _check_variant(variants: Variants, merged: dict, values: dict, errors: dict) -> None:
    """Check the type-specific parameters against the set the type selects.

    The flattened parameters accept what any type accepts; once the type is
    known, a parameter of another type is undeclared, and the type's own
    declaration (required, enumeration, length) is the one that counts.
    """
    chosen = variants.for_type(str(values.get(variants.type_property)))
    if chosen is None:
        return
    own = {p.name: p for p in chosen}
    type_specific = {p.name for params in variants.by_type.values() for p in params}
    for name in merged:
        if name in own:
            coerced, error = coerce(own[name], merged[name], name)
            if error:
                errors[name] = error
            else:
                values[name] = coerced
        elif name in type_specific:
            errors[name] = _UNDECLARED
    for name, param in own.items():
        if not param.optional and name not in merged:
            errors[name] = "property is missing and it is not optional"


def defaults(endpoint: Endpoint) -> dict:
    """Declared defaults, e.g. ``memory`` for guest creation."""
    return {p.name: p.default for p in endpoint.parameters if p.default is not None}
