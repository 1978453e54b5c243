"""A PVE notification posted by a webhook target (PVE 8.3+), as the backend reads it (pure).

The operator's body template (docs/operator-guide.md) renders proxmox-notify's
variables into JSON:

    {"timestamp": {{ timestamp }}, "severity": "{{ severity }}",
     "title": "{{ escape title }}", "fields": {{ json fields }}}

`timestamp` (unix seconds, when PVE sent it) bounds replays; `fields` are the
notification's metadata (`type`: vzdump, replication, fencing, package-updates,
system-mail; `hostname`; `job-id` for backup and replication jobs). What it names
becomes the reason of the run it starts: the run itself is the watcher's incremental
run, which rereads the records (a backup) and whatever else changed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from proxbox_backend.domain.watch import Changes

SEVERITIES = frozenset({"info", "notice", "warning", "error", "unknown"})
# Bytes of body read at most: the documented template gives a few hundred; PVE's
# `message` (a backup's whole log) is better left out of it.
MAX_BODY = 256 * 1024


class WebhookInvalid(ValueError):
    """The body does not say what the documented template makes it say."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


@dataclass(frozen=True)
class Notification:
    timestamp: int
    severity: str
    title: str
    fields: dict[str, str]

    @classmethod
    def parse(cls, body: bytes) -> Notification:
        try:
            data = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise WebhookInvalid("body", f"not JSON ({exc})") from None
        if not isinstance(data, dict):
            raise WebhookInvalid("body", "a JSON object is required")
        timestamp = data.get("timestamp")
        if isinstance(timestamp, bool) or not isinstance(timestamp, int):
            raise WebhookInvalid("timestamp", "unix seconds (an integer) are required")
        severity = data.get("severity")
        if severity not in SEVERITIES:
            raise WebhookInvalid("severity", f"one of {', '.join(sorted(SEVERITIES))} required")
        title = data.get("title", "")
        if not isinstance(title, str):
            raise WebhookInvalid("title", "a string is required")
        fields = data.get("fields")
        if not isinstance(fields, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in fields.items()
        ):
            raise WebhookInvalid("fields", "an object of strings is required")
        if not fields.get("type"):
            raise WebhookInvalid("fields.type", "the notification's type is required")
        return cls(timestamp, severity, title, fields)

    def changes(self) -> Changes:
        """What the run it starts is for: a fencing names the fenced node (its guests
        moved); the rest name no guest (PVE's fields do not), only the reason."""
        kind, host = self.fields["type"], self.fields.get("hostname", "")
        job = self.fields.get("job-id")
        reason = f"webhook {kind} {self.severity}"
        reason += (f" on {host}" if host else "") + (f" job {job}" if job else "")
        nodes = frozenset({host}) if kind == "fencing" and host else frozenset()
        return Changes(nodes=nodes, reasons=(reason,))
