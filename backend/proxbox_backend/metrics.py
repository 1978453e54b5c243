"""Prometheus metrics of this backend process (`GET /metrics`, text format 0.0.4).

Per endpoint: runs by outcome and their duration (every run this process executes:
`POST /sync`, the watchers'), when its last successful run ended and how long ago, and
for the watches this replica holds: polls, failed polls, and the watcher's lag (from a
change found in Proxmox to the end of the run that synced it); PVE notification
webhooks received, by outcome. Each replica counts its
own runs: Prometheus sums replicas; the newest success is the maximum over them.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

# A run report's status → the outcome counted (a run's sidecar says the same).
OUTCOMES = {"completed": "succeeded", "completed_with_errors": "degraded", "failed": "failed"}


@dataclass
class Metrics:
    clock: object = time.time
    runs: Counter = field(default_factory=Counter)  # (endpoint, outcome) → runs
    duration_sum: Counter = field(default_factory=Counter)  # endpoint → seconds
    last_success: dict = field(default_factory=dict)  # endpoint → unix time
    watch_lag: dict = field(default_factory=dict)  # endpoint → seconds, the latest run's
    polls: Counter = field(default_factory=Counter)  # endpoint → polls
    poll_failures: Counter = field(default_factory=Counter)  # endpoint → failed polls
    watching: dict = field(default_factory=dict)  # endpoint → 1 while held here, else 0
    webhooks: Counter = field(default_factory=Counter)  # (endpoint, outcome) → posts

    def run_finished(self, endpoint: str, report) -> None:
        if report is None or getattr(report, "dry_run", False):
            return
        outcome = OUTCOMES.get(report.status, report.status)
        self.runs[(endpoint, outcome)] += 1
        self.duration_sum[endpoint] += report.duration_s
        if outcome == "succeeded":
            self.last_success[endpoint] = self.clock()

    def render(self) -> str:
        now = self.clock()
        timed = Counter()
        for (endpoint, _), count in self.runs.items():
            timed[endpoint] += count

        def each(name, values):
            return [(name, {"endpoint": e}, v) for e, v in sorted(values.items())]

        families = [
            ("proxbox_runs_total", "counter", "Sync runs by endpoint and outcome.",
             [("proxbox_runs_total", {"endpoint": e, "outcome": o}, n)
              for (e, o), n in sorted(self.runs.items())]),
            ("proxbox_run_duration_seconds", "summary", "How long the runs took.",
             each("proxbox_run_duration_seconds_sum", self.duration_sum)
             + each("proxbox_run_duration_seconds_count", timed)),
            ("proxbox_last_success_timestamp_seconds", "gauge",
             "When the endpoint's last successful run ended (unix time).",
             each("proxbox_last_success_timestamp_seconds", self.last_success)),
            ("proxbox_last_success_age_seconds", "gauge",
             "Seconds since the endpoint's last successful run ended.",
             each("proxbox_last_success_age_seconds",
                  {e: now - t for e, t in self.last_success.items()})),
            ("proxbox_watch_lag_seconds", "gauge",
             "From a change the watcher found to the end of the run that synced it.",
             each("proxbox_watch_lag_seconds", self.watch_lag)),
            ("proxbox_watch_polls_total", "counter", "The watcher's polls of Proxmox.",
             each("proxbox_watch_polls_total", self.polls)),
            ("proxbox_watch_poll_failures_total", "counter", "The watcher's failed polls.",
             each("proxbox_watch_poll_failures_total", self.poll_failures)),
            ("proxbox_watch_held", "gauge", "1 while this replica holds the endpoint's watch.",
             each("proxbox_watch_held", self.watching)),
            ("proxbox_webhooks_total", "counter",
             "PVE notification webhooks by outcome: accepted, unwatched (no watch to "
             "nudge), unauthorized (endpoint label empty), invalid, stale, replayed.",
             [("proxbox_webhooks_total", {"endpoint": e, "outcome": o}, n)
              for (e, o), n in sorted(self.webhooks.items())]),
        ]  # fmt: skip
        lines = []
        for family, kind, text, samples in families:
            lines += [f"# HELP {family} {text}", f"# TYPE {family} {kind}"]
            for name, labels, value in samples:
                rendered = ",".join(f'{k}="{escape(str(v))}"' for k, v in labels.items())
                lines.append(f"{name}{{{rendered}}} {float(value)!r}")
        return "\n".join(lines) + "\n"


def escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


# The process's metrics: every run and watch of this process counts here.
METRICS = Metrics()
