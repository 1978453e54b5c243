"""PVE property strings (``virtio,bridge=vmbr0,tag=10``) checked against their format.

A contract declares a property-string parameter's format inline (a mapping of
key → sub-schema, with ``default_key``, ``alias``/``keyAlias``, types, enums,
ranges, patterns and named sub-formats); a few formats are only named
(``pve-qm-ipconfig``) and are described here.  Parsing and checking follow
PVE's JSONSchema rules and answer with its wording: a broken string is one
message for the parameter, ``invalid format - …`` with the failing keys as
``net1.tag: …`` lines, exactly as PVE renders a nested format error.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable

from proxmox_simulator.domain import calendar_event

_IS_NUMBER = re.compile(r"^[+-]?(\d+\.\d+|\d+\.|\.\d+|\d+)([eE][+-]?\d+)?$")
_IS_INTEGER = re.compile(r"^[+-]?\d+$")
_TRUE = {"1", "on", "yes", "true"}
_FALSE = {"0", "off", "no", "false"}


class FormatError(ValueError):
    """The string does not fit its format; ``str()`` is PVE's message."""


# -- named string formats (PVE registers them in code, the contracts only name them) --


def _fail(message: str) -> None:
    raise FormatError(message)


def _ip(text: str, version: int) -> bool:
    try:
        return ipaddress.ip_address(text).version == version
    except ValueError:
        return False


def _cidr(text: str, version: int) -> bool:
    address, slash, prefix = text.partition("/")
    if not slash or not prefix.isdigit() or not _ip(address, version):
        return False
    return 7 < int(prefix) <= (32 if version == 4 else 128)


STORAGE_ID = re.compile(r"^[a-z][a-z0-9\-_.]*[a-z0-9]$", re.I)
_VOLUME_ID = re.compile(r"^([a-z][a-z0-9\-_.]*[a-z0-9]):(.+)$", re.I)
_DNS_LABEL = r"([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?)"


def _volume_id(value: str) -> None:
    if not _VOLUME_ID.match(value):
        _fail(f"unable to parse volume ID '{value}'")


def _volume_id_or_path(value: str) -> None:
    if not value.startswith("/"):
        _volume_id(value)


def _volume_id_or_qm_path(value: str) -> None:
    if value not in ("none", "cdrom"):
        _volume_id_or_path(value)


def _mount_path(value: str) -> None:
    if re.search(r"/\.\.?/", value) or re.search(r"/\.\.?$", value) or value.startswith("../"):
        _fail(f"{value} contains illegal character sequences")


def _disk_size(value: str) -> None:
    if not re.fullmatch(r"\d+(\.\d+)?[KMGT]?", value):
        _fail(f"value does not look like a valid disk size: {value}")


def _calendar_event(value: str) -> None:
    try:
        calendar_event.verify(value)
    except calendar_event.CalendarEventError as exc:
        _fail(str(exc))


def _check(predicate: Callable[[str], bool], message: str) -> Callable[[str], None]:
    def check(value: str) -> None:
        if not predicate(value):
            _fail(message.format(value=value))

    return check


STRING_FORMATS: dict[str, Callable[[str], None]] = {
    "pve-bridge-id": _check(
        lambda v: re.fullmatch(r"[-_.\w]+", v, re.ASCII) is not None, "invalid bridge ID '{value}'"
    ),
    "mac-addr": _check(
        lambda v: re.fullmatch(r"[a-f0-9][02468ace](?::[a-f0-9]{2}){5}", v, re.I) is not None,
        "value does not look like a valid unicast MAC address",
    ),
    "disk-size": _disk_size,
    "urlencoded": _check(
        lambda v: re.fullmatch(r"[-%a-zA-Z0-9_.!~*'()]*", v) is not None,
        "invalid urlencoded string: {value}",
    ),
    "ipv4": _check(lambda v: _ip(v, 4), "value does not look like a valid IPv4 address"),
    "ipv6": _check(lambda v: _ip(v, 6), "value does not look like a valid IPv6 address"),
    "ip": _check(lambda v: _ip(v, 4) or _ip(v, 6), "value does not look like a valid IP address"),
    "CIDRv4": _check(lambda v: _cidr(v, 4), "value does not look like a valid IPv4 CIDR network"),
    "CIDRv6": _check(lambda v: _cidr(v, 6), "value does not look like a valid IPv6 CIDR network"),
    "CIDR": _check(
        lambda v: _cidr(v, 4) or _cidr(v, 6), "value does not look like a valid CIDR network"
    ),
    "pve-ipv4-config": _check(
        lambda v: v in ("dhcp", "manual") or _cidr(v, 4),
        "value does not look like a valid ipv4 network configuration",
    ),
    "pve-ipv6-config": _check(
        lambda v: v in ("auto", "dhcp", "manual") or _cidr(v, 6),
        "value does not look like a valid ipv6 network configuration",
    ),
    "pve-iface": _check(
        lambda v: re.fullmatch(r"[a-zA-Z][a-zA-Z0-9_]{1,20}([:.]\d+)?", v) is not None,
        "invalid network interface name '{value}'",
    ),
    "pve-storage-id": _check(
        lambda v: STORAGE_ID.match(v) is not None,
        "storage ID '{value}' contains illegal characters",
    ),
    "pve-configid": _check(
        lambda v: re.fullmatch(r"[a-z][a-z0-9_-]+", v, re.I) is not None,
        "invalid configuration ID '{value}'",
    ),
    "dns-name": _check(
        lambda v: re.fullmatch(rf"({_DNS_LABEL}\.)*{_DNS_LABEL}", v) is not None,
        "value does not look like a valid DNS name",
    ),
    "pve-volume-id": _volume_id,
    "pve-volume-id-or-absolute-path": _volume_id_or_path,
    "pve-volume-id-or-qm-path": _volume_id_or_qm_path,
    "pve-lxc-mp-string": _mount_path,
    "pve-calendar-event": _calendar_event,
}

# Property-string formats the contracts refer to by name only.
NAMED_FORMATS: dict[str, dict] = {
    # qemu-server's cloud-init network configuration (ipconfigN).
    # a remote cluster's API endpoint (remote_migrate's target-endpoint).
    "proxmox-remote": {
        "host": {"type": "string"},
        "port": {"type": "integer", "minimum": 1, "maximum": 65535, "optional": 1},
        "apitoken": {"type": "string"},
        "fingerprint": {
            "type": "string",
            "pattern": "([A-Fa-f0-9]{2}:){31}[A-Fa-f0-9]{2}",
            "optional": 1,
        },
    },
    "pve-qm-ipconfig": {
        "ip": {"type": "string", "format": "pve-ipv4-config", "optional": 1},
        "gw": {"type": "string", "format": "ipv4", "optional": 1, "requires": "ip"},
        "ip6": {"type": "string", "format": "pve-ipv6-config", "optional": 1},
        "gw6": {"type": "string", "format": "ipv6", "optional": 1, "requires": "ip6"},
    },
}


def property_format(declared) -> dict | None:
    """The key → schema mapping of a parameter's ``format``, if it is a property string."""
    if isinstance(declared, dict):
        return declared
    if isinstance(declared, str):
        return NAMED_FORMATS.get(declared)
    return None


def check_named(name: str, value: str) -> str | None:
    """PVE's message for ``value`` failing the named string format, else None."""
    checker = STRING_FORMATS.get(name)
    if checker is None:
        return None
    try:
        checker(value)
    except FormatError as exc:
        return str(exc)
    return None


# -- parsing ------------------------------------------------------------------------


def _boolean(value: str) -> str:
    lowered = value.lower()
    if lowered in _TRUE:
        return "1"
    if lowered in _FALSE:
        return "0"
    return value


def split(fmt: dict, text: str) -> dict[str, str]:
    """Key → value of ``text``; raises FormatError like PVE's parser (before any check)."""
    parsed: dict[str, str] = {}
    default_key = next((k for k, s in fmt.items() if s.get("default_key")), None)
    default_used = False
    for part in text.split(","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        if sep and key and value:
            if key in parsed:
                _fail(f"duplicate key in comma-separated list property: {key}")
            schema = fmt.get(key)
            if schema and schema.get("alias"):
                key_alias = schema.get("keyAlias")
                if key_alias:
                    if key_alias in parsed:
                        _fail(f"key alias '{key_alias}' is already defined")
                    parsed[key_alias] = key
                key = schema["alias"]
                schema = fmt.get(key)
            if not schema:
                _fail(f"invalid key in comma-separated list property: {key}")
            if schema.get("type") == "boolean":
                value = _boolean(value)
            parsed[key] = value
        elif not sep:
            if default_key is None:
                _fail("value without key, but schema does not define a default key")
            if default_used or parsed.get(default_key):
                _fail(f"duplicate key in comma-separated list property: {default_key}")
            default_used = True
            parsed[default_key] = part
        else:
            _fail("missing key in comma-separated list property")
    return parsed


def _compiled(pattern: str) -> re.Pattern | None:
    # Perl's (?^flags: groups; a pattern Python cannot read is not enforced.
    translated = re.sub(
        r"\(\?\^([a-z]*):",
        lambda m: f"(?{m.group(1).replace('u', '')}:" if m.group(1).replace("u", "") else "(?:",
        pattern,
    ).replace("\\z", "\\Z")
    try:
        return re.compile(translated)
    except re.error:
        return None


def _number_text(value) -> str:
    number = float(value)
    return str(int(number)) if number.is_integer() else str(value)


def _check_value(schema: dict, value: str) -> str | None:
    """PVE's check of one sub-property: type, format, pattern, length, range, enum."""
    kind = schema.get("type")
    if kind == "boolean" and value not in ("0", "1"):
        return f"type check ('boolean') failed - got '{value}'"
    if kind == "integer" and not _IS_INTEGER.match(value):
        return f"type check ('integer') failed - got '{value}'"
    if kind == "number" and not _IS_NUMBER.match(value):
        return f"type check ('number') failed - got '{value}'"
    named = schema.get("format")
    if isinstance(named, str):
        message = check_named(named, value)
        if message is not None:
            return f"invalid format - {message}\n"
    elif isinstance(named, dict):
        try:
            split(named, value)
        except FormatError as exc:
            return f"invalid format - {exc}\n"
    pattern = schema.get("pattern")
    if pattern:
        compiled = _compiled(pattern)
        if compiled is not None and not compiled.fullmatch(value):
            return "value does not match the regex pattern"
    if schema.get("maxLength") is not None and len(value) > int(schema["maxLength"]):
        return f"value may only be {schema['maxLength']} characters long"
    if schema.get("minLength") is not None and len(value) < int(schema["minLength"]):
        return f"value must be at least {schema['minLength']} characters long"
    if _IS_NUMBER.match(value):
        if schema.get("maximum") is not None and float(value) > float(schema["maximum"]):
            return f"value must have a maximum value of {_number_text(schema['maximum'])}"
        if schema.get("minimum") is not None and float(value) < float(schema["minimum"]):
            return f"value must have a minimum value of {_number_text(schema['minimum'])}"
    enum = schema.get("enum")
    if enum and value not in [str(e) for e in enum]:
        return f"value '{value}' does not have a value in the enumeration '{', '.join(map(str, enum))}'"
    return None


def parse(fmt: dict, text: str, path: str) -> dict[str, str]:
    """Parse and check ``text``; FormatError carries PVE's message for parameter ``path``."""
    try:
        parsed = split(fmt, text)
    except FormatError as exc:
        raise FormatError(f"invalid format - {exc}\n") from None
    errors: dict[str, str] = {}
    for key, schema in fmt.items():
        value = parsed.get(key)
        if value is None:
            if not (schema.get("optional") or schema.get("alias") or schema.get("group")):
                errors[f"{path}.{key}"] = "property is missing and it is not optional"
            continue
        message = _check_value(schema, value)
        if message is not None:
            errors[f"{path}.{key}"] = message
    for key in parsed:
        requires = (fmt.get(key) or {}).get("requires")
        if isinstance(requires, str) and parsed.get(requires) is None:
            errors.setdefault(
                f"{path}.{requires}", f"missing property - '{path}.{key}' requires this property"
            )
    if errors:
        lines = "".join(f"{where}: {message}\n" for where, message in errors.items())
        raise FormatError(f"invalid format - format error\n{lines}")
    return parsed
