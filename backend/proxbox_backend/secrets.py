"""Secrets that cannot leak by accident: redacted in reprs, str() and log records."""

from __future__ import annotations

import logging
import re

REDACTED = "***"


class Secret:
    """A credential value; only `reveal()` gives the text, and only adapters call it."""

    __slots__ = ("_value",)

    def __init__(self, value: str):
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __bool__(self) -> bool:
        return bool(self._value)

    def __repr__(self) -> str:
        return f"Secret({REDACTED})"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


# Authorization headers, PVE tickets and CSRF tokens, token secrets in query strings
# or JSON bodies: whatever a library logs, these never reach a handler verbatim.
_PATTERNS = (
    re.compile(
        r"(?i)(authorization['\"]?\s*[:=]\s*['\"]?)(?:Token|Bearer|PVEAPIToken)[ =][^'\",\s]+"
    ),
    re.compile(r"(PVEAPIToken=[^=\s'\"]+=)[^\s'\",]+"),
    re.compile(r"(?i)(PVEAuthCookie=)[^;\s'\"]+"),
    re.compile(r"(?i)(CSRFPreventionToken['\"]?\s*[:=]\s*['\"]?)[^'\",\s]+"),
    re.compile(r"(?i)((?:token_secret|password|ticket)['\"]?\s*[:=]\s*['\"]?)[^'\",\s&]+"),
    re.compile(r"(?i)((?:Token|Bearer) )(?:nbt_)?[A-Za-z0-9._-]{16,}"),
)


def redact(text: str, extra: tuple[str, ...] = ()) -> str:
    for pattern in _PATTERNS:
        text = pattern.sub(lambda m: m.group(1) + REDACTED, text)
    for value in extra:
        if value:
            text = text.replace(value, REDACTED)
    return text


class RedactingFilter(logging.Filter):
    """Rewrites every record's message; also scrubs the exact secrets it was given."""

    def __init__(self, secrets: tuple[str, ...] = ()):
        super().__init__()
        self.secrets = tuple(s for s in secrets if s)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message, self.secrets)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


def install_redaction(*secrets: Secret | str | None) -> RedactingFilter:
    """Attach one filter to the root handlers and the HTTP libraries' loggers."""
    values = tuple(s.reveal() if isinstance(s, Secret) else s for s in secrets if s)
    flt = RedactingFilter(values)
    for name in ("", "httpx", "httpcore", "proxbox_backend", "uvicorn", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.addFilter(flt)
        for handler in logger.handlers:
            handler.addFilter(flt)
    return flt
