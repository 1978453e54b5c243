"""Data Source projects: a completed sync reconciles the mirrored directory."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from core.models import DataSource, Job
from django.test import TestCase

from netbox_script_projects.choices import RevisionStatusChoices as Status
from netbox_script_projects.constants import VALIDATION_JOB_NAME
from netbox_script_projects.models import ScriptFile, ScriptProject, ScriptProjectRevision

from .support import StorageTestMixin

SCRIPT = b"from extras.scripts import Script\n\nclass Ok(Script):\n    pass\n"


class DataSourceReconciliationTest(StorageTestMixin, TestCase):
    def setUp(self):
        super().setUp()
        self.tree = Path(tempfile.mkdtemp(prefix="scr-datasource-"))
        self.addCleanup(shutil.rmtree, self.tree, ignore_errors=True)
        (self.tree / "netbox" / "scripts").mkdir(parents=True)
        (self.tree / "netbox" / "scripts" / "ok.py").write_bytes(SCRIPT)
        (self.tree / "unrelated.txt").write_text("not part of the project")
        self.source = DataSource.objects.create(
            name="repo", type="local", source_url=f"file://{self.tree}"
        )
        self.project = ScriptProject.objects.create(
            name="Mirror", key="mirror", data_source=self.source, data_source_path="netbox/"
        )
        ScriptFile.objects.create(project=self.project, path="scripts/ok.py")

    def validation_jobs(self, revision):
        return Job.objects.filter(name=VALIDATION_JOB_NAME, data__revision=revision.pk)

    def test_each_completed_sync_stages_the_directory_and_queues_validation(self):
        self.source.sync()
        revision = ScriptProjectRevision.objects.get(project=self.project)
        self.assertEqual([f["path"] for f in revision.manifest["files"]], ["scripts/ok.py"])
        self.assertEqual(revision.status, Status.MATERIALIZED)
        self.project.refresh_from_db()
        self.assertEqual(self.project.accepted_revision, revision)
        self.assertEqual(self.validation_jobs(revision).count(), 1)

        # Unchanged tree: the same revision, still covered by its queued Job.
        self.source.refresh_from_db()
        self.source.sync()
        self.assertEqual(ScriptProjectRevision.objects.filter(project=self.project).count(), 1)
        self.assertEqual(self.validation_jobs(revision).count(), 1)

        # Changed tree: a new revision with its own validation Job.
        (self.tree / "netbox" / "scripts" / "ok.py").write_bytes(SCRIPT + b"# changed\n")
        self.source.refresh_from_db()
        self.source.sync()
        newest = ScriptProjectRevision.objects.filter(project=self.project).exclude(pk=revision.pk)
        self.assertEqual(newest.count(), 1)
        self.assertEqual(self.validation_jobs(newest.get()).count(), 1)
