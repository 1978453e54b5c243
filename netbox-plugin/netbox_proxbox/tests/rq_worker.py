"""NetBox's own `rqworker` against a test's database: `python -m netbox_proxbox.tests.rq_worker`.

    python -m netbox_proxbox.tests.rq_worker [--burst] [QUEUE ...]

Without queues it serves NetBox's "default" and the plugin's sync queue, one worker for
both (the tests that are not about the worker layout need no second process).

The calling test passes its database (PROXBOX_NETBOX_DATABASE) and the plugin settings it
overrides (PROXBOX_TEST_PLUGIN_CONFIG, JSON). NetBox's command schedules the system jobs
and runs the RQ scheduler, as in production; `--burst` enqueues the due scheduled Jobs,
drains the queue and exits. NetBox's own system jobs are left out (see below).
"""

import json
import os
import sys

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "netbox.settings")
os.environ.setdefault("NETBOX_CONFIGURATION", "proxbox_devstack.netbox_configuration")


def main(argv):
    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.test import override_settings

    overrides = json.loads(os.environ.get("PROXBOX_TEST_PLUGIN_CONFIG", "{}"))
    merged = {**settings.PLUGINS_CONFIG["netbox_proxbox"], **overrides}
    override_settings(PLUGINS_CONFIG={**settings.PLUGINS_CONFIG, "netbox_proxbox": merged}).enable()
    # Only the plugin's own system job: NetBox's housekeeping (release checks and all) has
    # nothing to do with these tests and would run first at every start.
    from netbox.registry import registry

    from netbox_proxbox.sync.schedules import SyncScheduleKeeperJob

    for job in list(registry["system_jobs"]):
        if job is not SyncScheduleKeeperJob:
            del registry["system_jobs"][job]
    from netbox_proxbox.constants import DEFAULT_SYNC_QUEUE

    queues = [arg for arg in argv if not arg.startswith("-")] or ["default", DEFAULT_SYNC_QUEUE]
    options = [arg for arg in argv if arg.startswith("-")]
    call_command("rqworker", *queues, *options, verbosity=0)


if __name__ == "__main__":
    main(sys.argv[1:])
