"""Real RQ worker processes and committed data for tests that run Jobs."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from unittest import mock

import django_rq
from django.conf import settings
from django.db import connection
from django.test import override_settings

from netbox_script_projects.constants import PLUGIN_NAME
from proxbox_devstack import warm_netbox

WORKER_TIMEOUT = 120


class RealWorkerMixin:
    """Storage in a temporary directory shared with real worker processes.

    Use with TransactionTestCase: a worker only sees committed rows.
    """

    plugin_config: dict = {}
    storage_backend = "django.core.files.storage.FileSystemStorage"

    def setUp(self):
        super().setUp()
        self.sandbox = Path(tempfile.mkdtemp(prefix="nbsp-worker-test-"))
        self.storage_root = self.sandbox / "store"
        self.storage_root.mkdir()
        storages = {
            **settings.STORAGES,
            "script_projects": {
                "BACKEND": self.storage_backend,
                "OPTIONS": {"location": str(self.storage_root)},
            },
        }
        plugins_config = {**settings.PLUGINS_CONFIG, PLUGIN_NAME: dict(self.plugin_config)}
        override = override_settings(STORAGES=storages, PLUGINS_CONFIG=plugins_config)
        override.enable()
        self.addCleanup(override.disable)
        self.addCleanup(shutil.rmtree, self.sandbox, ignore_errors=True)
        django_rq.get_queue("default").empty()
        # Search indexing inline, whatever other workers Redis knows about.
        no_workers = mock.patch("netbox.search.deferred.any_workers_for_queue", return_value=False)
        no_workers.start()
        self.addCleanup(no_workers.stop)
        self.background_workers = []
        self.addCleanup(self.stop_workers)

    def worker_env(self) -> dict:
        env = dict(os.environ)
        env.update(
            PROXBOX_NETBOX_DATABASE=connection.settings_dict["NAME"],
            NBSP_TEST_STORAGE_ROOT=str(self.storage_root),
            NBSP_TEST_STORAGE_BACKEND=self.storage_backend,
            NBSP_TEST_PLUGIN_CONFIG=json.dumps(self.plugin_config),
        )
        return env

    def _command(self):
        return [sys.executable, "-m", "netbox_script_projects.tests.rq_worker"]

    def drain_queue(self):
        """Run every queued Job in a real worker process, then return. The process is forked
        from one that has NetBox loaded already (a new one costs seconds of CPU)."""
        completed = warm_netbox.run(
            "netbox_script_projects.tests.rq_worker", ["--burst"], self.worker_env(), WORKER_TIMEOUT
        )
        if completed.returncode != 0:
            raise AssertionError(f"worker failed:\n{completed.stdout}\n{completed.stderr}")
        return completed

    def start_worker(self):
        """A long-running worker process (registered in Redis, as NetBox's UI requires)."""
        process = subprocess.Popen(
            self._command(),
            env=self.worker_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.background_workers.append(process)
        return process

    def stop_workers(self):
        for process in self.background_workers:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
        self.background_workers = []
