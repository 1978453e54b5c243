"""A real RQ worker process for the tests: `python -m netbox_script_projects.tests.rq_worker`.

It runs against the calling test's database (PROXBOX_NETBOX_DATABASE) and
storage root (NBSP_TEST_STORAGE_ROOT), with the plugin settings the test
passed in NBSP_TEST_PLUGIN_CONFIG (JSON). `--burst` drains the queue and
exits; without it the worker stays up (the UI needs a live worker to run a
script) until it is terminated.
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
    from django.test import override_settings

    storages = {
        **settings.STORAGES,
        "script_projects": {
            "BACKEND": os.environ.get(
                "NBSP_TEST_STORAGE_BACKEND", "django.core.files.storage.FileSystemStorage"
            ),
            "OPTIONS": {"location": os.environ["NBSP_TEST_STORAGE_ROOT"]},
        },
    }
    plugin_config = json.loads(os.environ.get("NBSP_TEST_PLUGIN_CONFIG", "{}"))
    plugins_config = {**settings.PLUGINS_CONFIG, "netbox_script_projects": plugin_config}
    # override_settings (not assignment) so cached storage backends are reset.
    override_settings(STORAGES=storages, PLUGINS_CONFIG=plugins_config).enable()

    import django_rq

    worker = django_rq.get_worker("default")
    worker.work(burst="--burst" in argv, logging_level="WARNING")


if __name__ == "__main__":
    main(sys.argv[1:])
