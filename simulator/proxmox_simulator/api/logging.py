"""Structured request logs with credentials redacted before emission."""

from __future__ import annotations

import logging
import re

_PATTERNS = (
    # Tickets: keep user and time, drop the signature.
    (re.compile(r"(PVE:[^:\s]+:[0-9A-F]{8}::)[A-Za-z0-9+/=]+"), r"\1***"),
    (re.compile(r"(PVEAPIToken=[^=\s]+[=:])[^\s\"',]+"), r"\1***"),
    (re.compile(r"(PVEAuthCookie=)[^;\s\"',]+"), r"\1***"),
    (
        re.compile(r"(?i)(CSRFPreventionToken[\"']?\s*[:=]\s*[\"']?)[0-9A-F]{8}:[A-Za-z0-9+/=]+"),
        r"\1***",
    ),
    (re.compile(r"(?i)((?:password|secret|value)[\"']?\s*[:=]\s*[\"']?)[^&\s\"',}]+"), r"\1***"),
)


def redact(text: str) -> str:
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


class RedactingFilter(logging.Filter):
    """Rewrites the fully formatted message, so secrets in args are caught too."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


def install_redaction() -> None:
    """Attach the filter to every logger that may see request data."""
    for name in ("proxmox_simulator", "uvicorn", "uvicorn.access", "uvicorn.error", ""):
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactingFilter) for f in logger.filters):
            logger.addFilter(RedactingFilter())
        for handler in logger.handlers:
            if not any(isinstance(f, RedactingFilter) for f in handler.filters):
                handler.addFilter(RedactingFilter())
