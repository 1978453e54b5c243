"""Structured request logs with credentials redacted before emission."""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from urllib.parse import urlsplit

import proxbox_redaction
from proxbox_redaction import Redactor

# Group 1 of each pattern is kept, the rest of the match masked.
PATTERNS = (
    # Tickets: keep user and time, drop the signature.
    re.compile(r"(PVE:[^:\s]+:[0-9A-F]{8}::)[A-Za-z0-9+/=]+"),
    re.compile(r"(PVEAPIToken=[^=\s]+[=:])[^\s\"',]+"),
    re.compile(r"(PVEAuthCookie=)[^;\s\"',]+"),
    re.compile(r"(?i)(CSRFPreventionToken[\"']?\s*[:=]\s*[\"']?)[0-9A-F]{8}:[A-Za-z0-9+/=]+"),
    re.compile(r"(?i)((?:password|secret|value)[\"']?\s*[:=]\s*[\"']?)[^&\s\"',}]+"),
)
_REDACTOR = Redactor(PATTERNS)


def redact(text: str) -> str:
    return _REDACTOR(text)


def install_redaction(database_url: str | None = None) -> None:
    """Scrub every log record and uncaught traceback of this process, whichever logger
    and handler (uvicorn's, asyncpg's, the last-resort one): credentials in requests and
    the database password."""
    password = urlsplit(database_url).password if database_url else None
    proxbox_redaction.install(PATTERNS, [password] if password else [])


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
        # The process redactor (install_redaction) turns exc_info into scrubbed
        # exc_text when the record is made: exc_text is where the traceback usually is.
        if record.exc_text:
            entry["exc"] = redact(record.exc_text)
        elif record.exc_info:
            entry["exc"] = redact(self.formatException(record.exc_info))
        return json.dumps(entry, separators=(",", ":"))


def configure_logging(level: str = "info") -> None:
    """JSON lines on stderr for the simulator's own loggers (used by ``serve``)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("proxmox_simulator")
    logger.handlers[:] = [handler]
    logger.setLevel(level.upper())
    logger.propagate = False
