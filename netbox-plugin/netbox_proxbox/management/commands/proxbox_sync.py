"""`manage.py proxbox_sync`: a sync from cron, recorded as a NetBox Job like "Sync now".

Runs the Job in this process (NetBox's `immediate` mode), so no RQ worker is needed, and
exits non-zero when any endpoint's Job did not complete.
"""

from __future__ import annotations

from core.choices import JobStatusChoices
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from netbox_proxbox.models import ProxmoxEndpoint
from netbox_proxbox.sync.config import rq_job_timeout
from netbox_proxbox.sync.jobs import SyncEndpointJob, active_sync_job, counters_summary
from netbox_proxbox.sync.service import SyncRequestError, request_sync


class Command(BaseCommand):
    help = "Sync Proxmox endpoints now, each recorded as a 'Proxbox sync' NetBox Job."

    def add_arguments(self, parser):
        target = parser.add_mutually_exclusive_group(required=True)
        target.add_argument("--endpoint", action="append", metavar="NAME", help="repeatable")
        target.add_argument("--all", action="store_true", help="every enabled endpoint")
        parser.add_argument(
            "--user",
            metavar="USERNAME",
            help="run as this NetBox user (its permissions apply; recorded on the Job)",
        )

    def handle(self, *args, endpoint=None, all=False, user=None, **options):
        runner = None
        if user is not None:
            runner = get_user_model().objects.filter(username=user, is_active=True).first()
            if runner is None:
                raise CommandError(f"--user: no active NetBox user {user!r}")
        if all:
            endpoints = list(ProxmoxEndpoint.objects.filter(enabled=True).order_by("name"))
        else:
            endpoints = []
            for name in endpoint:
                found = ProxmoxEndpoint.objects.filter(name=name).first()
                if found is None:
                    raise CommandError(f"--endpoint: no Proxmox endpoint named {name!r}")
                endpoints.append(found)
        failed = 0
        for target in endpoints:
            try:
                job = self._sync(target, runner)
            except SyncRequestError as exc:
                failed += 1
                self.stderr.write(f"{target.name}: {exc.detail}")
                continue
            summary = counters_summary(job.data) or ""
            line = f"{target.name}: job {job.pk} {job.status}" + (
                f" ({summary})" if summary else ""
            )
            if job.status == JobStatusChoices.STATUS_COMPLETED:
                self.stdout.write(line)
            else:
                failed += 1
                self.stderr.write(line + (f": {job.error}" if job.error else ""))
        if failed:
            raise CommandError(f"{failed} of {len(endpoints)} endpoint sync(s) did not complete")

    def _sync(self, endpoint, runner):
        if runner is not None:
            return request_sync(runner, endpoint, immediate=True)
        # Without --user the caller holds the database itself; only the endpoint's state counts.
        from netbox_proxbox.sync.service import SyncEndpointDisabled, SyncInProgress

        if not endpoint.enabled:
            raise SyncEndpointDisabled(f"Endpoint {endpoint.name!r} is disabled; not synced.")
        active = active_sync_job(endpoint)
        if active is not None:
            raise SyncInProgress(f"A sync of this endpoint is already running (job {active.pk}).")
        return SyncEndpointJob.enqueue(
            instance=endpoint, immediate=True, job_timeout=rq_job_timeout()
        )
