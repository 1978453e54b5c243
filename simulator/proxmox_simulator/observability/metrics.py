"""Prometheus metrics of one simulator process, served at ``/metrics``.

Counters and histograms are process-local (Prometheus sums replicas); the task
queue gauges are read from PostgreSQL at scrape time, because the queue is
shared by every replica and only the database knows its depth.

Other modules record through the functions below, never through the metric
objects, so the label sets stay in one place.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

REGISTRY = CollectorRegistry(auto_describe=True)

REQUESTS = Counter(
    "pvesim_http_requests_total",
    "API requests by route template, method and status",
    ("route", "method", "status"),
    registry=REGISTRY,
)
LATENCY = Histogram(
    "pvesim_http_request_duration_seconds",
    "API request latency by route template and method",
    ("route", "method"),
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
    registry=REGISTRY,
)
TASKS_QUEUED = Gauge(
    "pvesim_tasks_queued", "Tasks waiting for a worker (all replicas)", registry=REGISTRY
)
TASKS_RUNNING = Gauge(
    "pvesim_tasks_running", "Tasks held by a worker (all replicas)", registry=REGISTRY
)
LEASE_RECLAIMS = Counter(
    "pvesim_task_lease_reclaims_total",
    "Tasks this process's workers took over after another worker's lease expired",
    registry=REGISTRY,
)
FAULTS = Counter(
    "pvesim_fault_injections_total", "Injected faults by kind", ("kind",), registry=REGISTRY
)
CONTRACT_SWAPS = Counter(
    "pvesim_contract_swaps_total",
    "Runtime contract swaps by resulting major",
    ("major",),
    registry=REGISTRY,
)
CONTRACT_INFO = Gauge(
    "pvesim_contract_info",
    "The selected contract (value 1)",
    ("version", "major", "profile"),
    registry=REGISTRY,
)

# Undeclared paths share one label so a scanner cannot grow the series without bound.
UNMATCHED = "(unmatched)"


def record_request(route: str, method: str, status: int, seconds: float) -> None:
    route = route if route and route != "-" else UNMATCHED
    REQUESTS.labels(route, method, str(status)).inc()
    LATENCY.labels(route, method).observe(seconds)


def record_lease_reclaim() -> None:
    LEASE_RECLAIMS.inc()


def record_fault(kind: str) -> None:
    """One injected fault of ``kind`` (latency, http-error, task-failure, ...)."""
    FAULTS.labels(kind).inc()


def record_contract(version: str, major: int, profile: str, *, swapped: bool) -> None:
    CONTRACT_INFO.clear()
    CONTRACT_INFO.labels(version, str(major), profile).set(1)
    if swapped:
        CONTRACT_SWAPS.labels(str(major)).inc()


def set_task_gauges(queued: int, running: int) -> None:
    TASKS_QUEUED.set(queued)
    TASKS_RUNNING.set(running)


def exposition() -> tuple[bytes, str]:
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
