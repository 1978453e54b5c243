"""Secrets that cannot leak by accident: redacted in reprs, str() and log records."""

from __future__ import annotations

import re

import proxbox_redaction
from proxbox_redaction import REDACTED, Redactor


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
PATTERNS = (
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
    return Redactor(PATTERNS, extra)(text)


_BACKEND_REDACTOR = Redactor(PATTERNS)


def scrub(text: str) -> str:
    """For what a run shows or stores outside log records: this package's patterns, plus
    the exact secrets the process's redactor was given (when one is installed)."""
    return _BACKEND_REDACTOR(proxbox_redaction.redact(text))


def install_redaction(*secrets: Secret | str | None) -> Redactor:
    """Scrub every log record and uncaught traceback of this process (any logger, any
    handler, including those uvicorn configures later) of the patterns and `secrets`."""
    values = tuple(s.reveal() if isinstance(s, Secret) else s for s in secrets if s)
    return proxbox_redaction.install(PATTERNS, values)
