"""Structured request logs with credentials redacted before emission."""

from __future__ import annotations

import json
import logging
import re
import sys
import time

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


# Fields a request log record may carry (passed through ``extra=``).
REQUEST_FIELDS = ("request_id", "method", "route", "status", "duration_ms", "identity")


class JsonFormatter(logging.Formatter):
    """One JSON object per line; message text is redacted like everything else."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": redact(record.getMessage()),
        }
        for name in REQUEST_FIELDS:
            if hasattr(record, name):
                entry[name] = getattr(record, name)
        if record.exc_info:
            entry["exc"] = redact(self.formatException(record.exc_info))
        return json.dumps(entry, separators=(",", ":"))


def configure_logging(level: str = "info") -> None:
    """JSON lines on stderr for the simulator's own loggers (used by ``serve``)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(RedactingFilter())
    logger = logging.getLogger("proxmox_simulator")
    logger.handlers[:] = [handler]
    logger.setLevel(level.upper())
    logger.propagate = False
