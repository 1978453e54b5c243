"""What a run reports: its outcome for adapters, why it stopped, and the reflection its
sidecar keeps."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from proxbox_backend.clients.http import TransportError
from proxbox_backend.clients.netbox import NetBoxError
from proxbox_backend.clients.proxmox import ProxmoxError
from proxbox_backend.domain.counters import Tally
from proxbox_backend.domain.preview import PlanRecorder
from proxbox_backend.secrets import scrub

MAX_NAMED = 20  # failures a sidecar message names one by one; the Job's data has them all


class SyncFailed(Exception):
    """A problem that stops the run (no credentials, unreachable Proxmox, refused claim)."""


FATAL = (SyncFailed, NetBoxError, ProxmoxError, TransportError)


def failure_reason(exc: Exception) -> str:
    """Why a run stopped, as its report and sidecar say it."""
    return str(exc) if isinstance(exc, FATAL) else f"unexpected {type(exc).__name__}: {exc}"


@dataclass
class RunReport:
    endpoint: dict = field(default_factory=dict)
    cluster: dict = field(default_factory=dict)
    tally: Tally = field(default_factory=Tally)
    warnings: list[str] = field(default_factory=list)
    # Proxmox reads that failed after retries: what they would have told is missing, so
    # the run is degraded (its sidecar says so) even when every write succeeded.
    read_failures: list[str] = field(default_factory=list)
    error: str | None = None  # a fatal error: the run stopped here
    netbox_requests: dict = field(default_factory=dict)
    proxmox_requests: dict = field(default_factory=dict)
    started_at: str = ""
    duration_s: float = 0.0
    sync_state: str = ""
    # A dry run: nothing was written; `plan` says what the run would write.
    dry_run: bool = False
    plan: PlanRecorder | None = None
    # Full or incremental, and why (`proxbox_backend.incremental`).
    run_mode: dict = field(default_factory=dict)
    # IPAM hygiene findings of the guests the run synced (`domain.hygiene.Finding`).
    hygiene: list[dict] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None and self.tally.failed == 0 and not self.read_failures

    @property
    def status(self) -> str:
        if self.error is not None:
            return "failed"
        done = "previewed" if self.dry_run else "completed"
        return done if self.tally.failed == 0 and not self.read_failures else f"{done}_with_errors"

    def as_dict(self) -> dict:
        """What adapters show or send: messages quoting remote answers are scrubbed."""
        tally = self.tally.as_dict()
        tally["failures"] = [
            {**failure, "reason": scrub(failure["reason"])} for failure in tally["failures"]
        ]
        return {
            "ok": self.ok,
            "status": self.status,
            "endpoint": self.endpoint,
            "cluster": self.cluster,
            **tally,
            "inventory_writes": self.tally.writes,
            "warnings": [scrub(warning) for warning in self.warnings],
            "read_failures": [scrub(failure) for failure in self.read_failures],
            "error": scrub(self.error) if self.error is not None else None,
            "netbox_requests": self.netbox_requests,
            "proxmox_requests": self.proxmox_requests,
            "started_at": self.started_at,
            "duration_s": round(self.duration_s, 3),
            "sync_state": self.sync_state,
            "run_mode": self.run_mode,
            "dry_run": self.dry_run,
            "plan": self.plan.as_dict() if self.plan is not None else None,
            "hygiene": [{**f, "detail": scrub(f["detail"])} for f in self.hygiene],
        }


def reflection(tally: Tally, error: str | None = None, read_failures: list[str] = ()) -> dict:
    """The sidecar's reflection metadata: when, how it went, what it changed.

    `failed`: the run stopped (`error`). `degraded`: it ran to its end, but Proxmox reads
    or NetBox writes failed; `errors` counts both, the message names them.
    """
    totals = {outcome: 0 for outcome in ("created", "updated", "deleted", "failed")}
    for counters in tally.counters.values():
        for outcome in totals:
            totals[outcome] += getattr(counters, outcome)
    errors = totals["failed"] + len(read_failures)
    lines = [error] if error else []
    if errors:
        lines.append(
            f"{len(read_failures)} Proxmox read(s) failed, {totals['failed']} NetBox write(s) failed"
        )
    lines += [f"read failed: {failure}" for failure in read_failures[:MAX_NAMED]]
    if len(read_failures) > MAX_NAMED:
        lines.append(f"… and {len(read_failures) - MAX_NAMED} more failed reads")
    lines += [f"{f.object_type} {f.label}: {f.reason}" for f in tally.failures[:MAX_NAMED]]
    if len(tally.failures) > MAX_NAMED:
        lines.append(f"… and {len(tally.failures) - MAX_NAMED} more failures")
    status = "failed" if error else "degraded" if errors else "succeeded"
    return {
        "last_sync": dt.datetime.now(dt.UTC).isoformat(),
        "status": status,
        "objects_created": totals["created"],
        "objects_updated": totals["updated"],
        "objects_deleted": totals["deleted"],
        "errors": errors,
        # Stored in NetBox (and its change log): scrubbed like everything the run shows.
        "message": scrub("\n".join(lines)),
    }
