"""A sync Job's report as the Job page shows it: counters per object type, failures,
warnings, and the progress of a run still going."""

from __future__ import annotations

from django.apps import apps
from django.utils.text import capfirst

from .hygiene import hygiene_context
from .jobs import SyncEndpointJob

OUTCOMES = ("created", "updated", "unchanged", "deleted", "failed")
# Seconds between htmx reloads of a waiting or running Job's report card.
REFRESH_SECONDS = 3


def object_type_title(object_type: str) -> str:
    """ "Virtual machines" for `virtualization.virtualmachine`: the heading an operator reads.
    A type this NetBox does not know keeps its code."""
    try:
        model = apps.get_model(object_type)
    except (LookupError, ValueError):
        return object_type
    return capfirst(model._meta.verbose_name_plural)


def is_sync_job(job) -> bool:
    return job.name == SyncEndpointJob.name


def sync_job_report_context(job) -> dict:
    data = job.data if isinstance(job.data, dict) else {}
    report = data.get("report") if isinstance(data.get("report"), dict) else None
    counters = []
    for object_type, numbers in sorted(((report or {}).get("counters") or {}).items()):
        numbers = numbers if isinstance(numbers, dict) else {}
        counters.append(
            (
                object_type_title(object_type),
                object_type,
                [int(numbers.get(outcome) or 0) for outcome in OUTCOMES],
            )
        )
    live = not job.completed
    return {
        "job": job,
        "live": live,
        "refresh_seconds": REFRESH_SECONDS,
        "progress": data.get("progress") if live else None,
        "report": report,
        "outcomes": OUTCOMES,
        "counters": counters,
        "hygiene": hygiene_context(report),
    }
