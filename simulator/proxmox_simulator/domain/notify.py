"""Notifications as proxmox-notify (PVE 8.1+) routes them (pure): which targets a
notification's matchers pick, and the HTTP request a webhook target (8.3+) makes of it.

A notification has a severity, a title and message (rendered from the sender's
template), a timestamp (unix seconds) and metadata fields (``type``, ``hostname``,
``job-id``).  Every enabled matcher is checked; the union of the targets of those that
match is notified.  A matcher without match directives matches everything;
``invert-match`` negates the combined result; ``mode`` combines the directives (and the
entries of each directive) with AND (``all``) or OR (``any``).

A webhook's URL, header values and body are handlebars templates over ``title``,
``message``, ``severity``, ``timestamp``, ``fields`` and ``secrets``, with the helpers
``escape``, ``json`` and ``url-encode`` and no HTML escaping.  This renderer handles
those expressions (``{{ path }}`` and ``{{ helper path }}``); a helper it does not know
is an error, as in PVE, and so is a block (``{{#if}}``), which it does not simulate.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import json
import re
from dataclasses import dataclass, field

SEVERITIES = ("info", "notice", "warning", "error", "unknown")
MODES = ("all", "any")
METHODS = ("post", "put", "get")


class NotifyError(ValueError):
    """A matcher, template or endpoint setting PVE would refuse at send time."""


@dataclass(frozen=True)
class Notification:
    severity: str
    title: str
    message: str
    timestamp: int
    fields: dict[str, str] = field(default_factory=dict)


# ---------------------------------------------------------------- matchers


_SAFE_ID = r"[A-Za-z0-9_][A-Za-z0-9._\-]*"
_FIELD_ENTRY = re.compile(rf"^(exact|regex):({_SAFE_ID})=(.*)$", re.DOTALL)
_WEEKDAYS = {
    name: day for day, name in enumerate(("mon", "tue", "wed", "thu", "fri", "sat", "sun"))
}


def field_matcher(text: str):
    """``exact:<field>=<v1>,<v2>`` or ``regex:<field>=<re>`` → predicate on fields."""
    found = _FIELD_ENTRY.match(text)
    if not found:
        raise NotifyError(f"invalid match-field statement: {text}")
    kind, name, expected = found.groups()
    if kind == "exact":
        values = {v.strip() for v in expected.split(",")}
        return lambda fields: fields.get(name) in values
    try:
        pattern = re.compile(expected)
    except re.error as exc:
        raise NotifyError(f"invalid regex: {exc}") from None
    # Unanchored, as Rust's Regex::is_match.
    return lambda fields: name in fields and pattern.search(fields[name]) is not None


def severity_matcher(text: str):
    wanted = {s.strip() for s in text.split(",")}
    unknown = wanted - set(SEVERITIES)
    if unknown:
        raise NotifyError(f"invalid severity '{sorted(unknown)[0]}'")
    return lambda severity: severity in wanted


def _clock(text: str) -> int:
    hour, _, minute = text.partition(":")
    if not hour.isdigit() or (minute and not minute.isdigit()):
        raise NotifyError(f"could not parse schedule: invalid time '{text}'")
    value = int(hour) * 60 + int(minute or 0)
    if int(hour) > 24 or int(minute or 0) > 59 or value > 24 * 60:
        raise NotifyError(f"could not parse schedule: invalid time '{text}'")
    return value


def calendar_matcher(text: str):
    """A daily duration (``mon..fri 8-17``, ``22:30-23:59``): the notification's time
    of day (UTC here) within the range, on one of the weekdays (every day if none)."""
    parts = text.split()
    if not parts or len(parts) > 2:
        raise NotifyError(f"could not parse schedule: '{text}'")
    days = set(range(7))
    if len(parts) == 2:
        days = set()
        for item in parts[0].split(","):
            first, dots, last = item.partition("..")
            if first not in _WEEKDAYS or (dots and last not in _WEEKDAYS):
                raise NotifyError(f"could not parse schedule: invalid weekday in '{text}'")
            days.update(range(_WEEKDAYS[first], _WEEKDAYS[last if dots else first] + 1))
    start, dash, end = parts[-1].partition("-")
    if not dash:
        raise NotifyError(f"could not parse schedule: '{text}' has no time range")
    begin, finish = _clock(start), _clock(end)

    def matches(timestamp: int) -> bool:
        moment = datetime.datetime.fromtimestamp(timestamp, datetime.UTC)
        minute = moment.hour * 60 + moment.minute
        return moment.weekday() in days and begin <= minute < finish

    return matches


def as_list(value) -> list[str]:
    """An array option as stored: a list, or one entry given as a plain string."""
    if value is None or value == "":
        return []
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


def check_matcher(options: dict) -> None:
    """Raise NotifyError for what PVE's schema refuses (named by the option)."""
    for entry in as_list(options.get("match-field")):
        field_matcher(entry)
    for entry in as_list(options.get("match-severity")):
        severity_matcher(entry)
    for entry in as_list(options.get("match-calendar")):
        calendar_matcher(entry)
    if options.get("mode", "all") not in MODES:
        raise NotifyError(f"invalid mode '{options['mode']}'")


def matched_targets(options: dict, note: Notification) -> list[str]:
    """The matcher's targets when it matches ``note``, else none."""
    mode_any = options.get("mode", "all") == "any"

    def combine(results) -> bool:
        results = list(results)
        return any(results) if mode_any else all(results)

    checks = []
    fields = [field_matcher(e) for e in as_list(options.get("match-field"))]
    severities = [severity_matcher(e) for e in as_list(options.get("match-severity"))]
    calendars = [calendar_matcher(e) for e in as_list(options.get("match-calendar"))]
    if severities:
        checks.append(combine(m(note.severity) for m in severities))
    if fields:
        checks.append(combine(m(note.fields) for m in fields))
    if calendars:
        checks.append(combine(m(note.timestamp) for m in calendars))
    inverted = str(options.get("invert-match", 0)) in ("1", "true")
    if not checks or combine(checks) != inverted:
        return as_list(options.get("target"))
    return []


# ---------------------------------------------------------------- templates


# `{{{ x }}}` (unescaped; PVE escapes nothing anyway) or `{{ x }}`: a brace after a
# double stache's end is text (`{"f": {{ json fields }}}` closes the object).
_EXPRESSION = re.compile(r"\{\{\{~?\s*(.*?)\s*~?\}\}\}|\{\{~?\s*(.*?)\s*~?\}\}", re.DOTALL)
_URL_RESERVED = frozenset(b":/?#[]@!$&'()*+,;=% ")


def _lookup(data, path: str):
    if path in ("this", "."):
        return data
    value = data
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        else:
            return None
    return value


def _text(value) -> str:
    """A value as handlebars writes it (no HTML escaping: PVE turns it off)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return "[object]"
    if isinstance(value, list):
        return "[" + ", ".join(_text(v) for v in value) + "]"
    return json.dumps(value)


def _url_encode(text: str) -> str:
    out = []
    for byte in text.encode("utf-8"):
        if byte < 0x20 or byte >= 0x7F or byte in _URL_RESERVED:
            out.append(f"%{byte:02X}")
        else:
            out.append(chr(byte))
    return "".join(out)


def _helper(name: str, args: list[str], data) -> str:
    if len(args) != 1:
        raise NotifyError(f"{name}: missing parameter" if not args else f"{name}: one parameter")
    value = _lookup(data, args[0])
    if name == "json":
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if not isinstance(value, str):
        what = "text parameter" if name == "escape" else "parameter"
        raise NotifyError(f"{name}: missing {what}")
    if name == "escape":
        return json.dumps(value, ensure_ascii=False)[1:-1]
    return _url_encode(value)


HELPERS = ("escape", "json", "url-encode")


def render(template: str, data: dict) -> str:
    def expand(found: re.Match) -> str:
        expression = found.group(1) if found.group(1) is not None else found.group(2)
        if not expression or expression[0] in "#/^>!&":
            raise NotifyError(f"unsupported template expression '{{{{{expression}}}}}'")
        words = expression.split()
        if len(words) == 1:
            return _text(_lookup(data, words[0]))
        if words[0] not in HELPERS:
            raise NotifyError(f'Helper not defined: "{words[0]}"')
        return _helper(words[0], words[1:], data)

    return _EXPRESSION.sub(expand, template)


# ---------------------------------------------------------------- webhook endpoints


def decode_base64(value: str, what: str) -> str:
    try:
        return base64.b64decode(value, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise NotifyError(f"could not decode base64 value of {what}") from None


def key_value(entry: str, option: str) -> tuple[str, str | None]:
    """``name=<name>,value=<base64>`` → (name, base64 or None); a missing value is
    allowed (a secret kept from before)."""
    parts: dict[str, str] = {}
    for item in entry.split(","):
        key, eq, value = item.partition("=")
        if not eq or key not in ("name", "value") or key in parts:
            raise NotifyError(f"invalid {option} entry '{entry}'")
        parts[key] = value
    if not re.fullmatch(_SAFE_ID, parts.get("name", "")):
        raise NotifyError(f"invalid {option} entry '{entry}': a name is required")
    if "value" in parts:
        decode_base64(parts["value"], f"{option} '{parts['name']}'")
    return parts["name"], parts.get("value")


@dataclass(frozen=True)
class WebhookRequest:
    method: str
    url: str
    headers: list[tuple[str, str]]
    body: str


def webhook_request(options: dict, note: Notification) -> WebhookRequest:
    """The request a webhook endpoint (its stored options, secrets included) makes."""
    secrets = {}
    for entry in as_list(options.get("secret")):
        name, value = key_value(entry, "secret")
        secrets[name] = decode_base64(value or "", f"secret '{name}'")
    data = {
        "title": note.title,
        "message": note.message,
        "severity": note.severity,
        "timestamp": note.timestamp,
        "fields": dict(note.fields),
        "secrets": secrets,
    }

    def masked(what: str, exc: NotifyError) -> NotifyError:
        text = str(exc)
        for value in secrets.values():
            if value:
                text = text.replace(value, "<masked>")
        return NotifyError(f"failed to render webhook {what}: {text}")

    try:
        body = render(decode_base64(options.get("body") or "", "body"), data)
    except NotifyError as exc:
        raise masked("body", exc) from None
    try:
        url = render(options["url"], data)
    except NotifyError as exc:
        raise masked("url", exc) from None
    headers = []
    for entry in as_list(options.get("header")):
        name, value = key_value(entry, "header")
        try:
            headers.append((name, render(decode_base64(value or "", f"header '{name}'"), data)))
        except NotifyError as exc:
            raise masked(f"header '{name}'", exc) from None
    return WebhookRequest(options.get("method") or "post", url, headers, body)


def mask(text: str, options: dict) -> str:
    """An error text with the endpoint's secret values masked (as PVE masks them)."""
    for entry in as_list(options.get("secret")):
        try:
            name, value = key_value(entry, "secret")
            secret = decode_base64(value or "", f"secret '{name}'")
        except NotifyError:
            continue
        if secret:
            text = text.replace(secret, "<masked>")
    return text
