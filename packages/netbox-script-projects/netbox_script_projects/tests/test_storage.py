"""The storage service against real storage: writes, resume, verification, refresh."""

from django.test import TestCase

from netbox_script_projects.choices import RevisionStatusChoices as Status
from netbox_script_projects.models import ScriptFile, ScriptProject, ScriptProjectRevision
from netbox_script_projects.snapshot import build_script_file_snapshot, snapshot_problems
from netbox_script_projects.storage.errors import (
    RevisionCorrupt,
    RevisionNotReusable,
    StorageWriteFailed,
    VerificationFailed,
)
from netbox_script_projects.storage.manifest import document_digest
from netbox_script_projects.storage.service import (
    ensure_revision_ready_for_activation,
    refresh_revision,
    stage_upload,
    verify_revision_storage,
)

from .support import FaultyStorage, SimulatedCrash, StorageTestMixin, archive_upload, zip_bytes

FILES = {f"pkg/mod{i}.py": f"VALUE = {i}\n".encode() * 50 for i in range(5)}


def upload(files=FILES):
    return archive_upload(zip_bytes(files))


class StagingTest(StorageTestMixin, TestCase):
    def setUp(self):
        super().setUp()
        self.project = ScriptProject.objects.create(name="Inventory", key="inventory")

    def stage(self, files=FILES):
        uploaded = upload(files)
        return stage_upload(self.project, uploaded, uploaded.name)

    def stored(self, revision, path):
        return self.storage_root / revision.storage_prefix / path

    def test_stage_creates_verified_materialized_revision(self):
        result = self.stage()
        revision = result.revision
        self.assertEqual(result.outcome, "created")
        self.assertEqual(revision.status, Status.MATERIALIZED)
        self.assertEqual(revision.digest, document_digest(revision.manifest))
        self.assertEqual([f["path"] for f in revision.manifest["files"]], sorted(FILES))
        self.assertEqual(revision.file_count, 5)
        self.assertEqual(revision.total_size, sum(len(c) for c in FILES.values()))
        self.assertEqual(verify_revision_storage(revision), [])
        for path, content in FILES.items():
            self.assertEqual(self.stored(revision, path).read_bytes(), content)
        # Same content in another order is the same identity, reused as-is.
        again = stage_upload(self.project, upload(dict(reversed(FILES.items()))), "p.zip")
        self.assertEqual((again.outcome, again.revision.pk), ("reused", revision.pk))

    def test_interrupted_write_resumes_keeping_matching_files(self):
        FaultyStorage.saves_before_failure = 2
        FaultyStorage.crash_on_save = True
        with self.assertRaises(SimulatedCrash):
            self.stage()
        revision = ScriptProjectRevision.objects.get(project=self.project)
        self.assertEqual(revision.status, Status.STAGING)
        torn = self.stored(revision, "pkg/mod2.py")
        self.assertEqual(len(torn.read_bytes()), 3)

        FaultyStorage.reset()
        result = self.stage()
        self.assertEqual((result.outcome, result.revision.pk), ("resumed", revision.pk))
        self.assertEqual(result.revision.status, Status.MATERIALIZED)
        # Two files matched their size and checksum and were kept.
        self.assertEqual(FaultyStorage.saves, 3)
        self.assertEqual(torn.read_bytes(), FILES["pkg/mod2.py"])
        self.assertEqual(verify_revision_storage(result.revision), [])

    def test_failed_write_is_recorded_and_resumed(self):
        FaultyStorage.saves_before_failure = 1
        with self.assertRaises(StorageWriteFailed) as failure:
            self.stage()
        revision = failure.exception.revision
        self.assertEqual(revision.status, Status.STAGING)
        self.assertIsNotNone(revision.digest)
        self.assertEqual({e["code"] for e in revision.validation_errors}, {"storage_write_failed"})
        # Recorded errors carry no storage identity (key, location).
        for error in revision.validation_errors:
            self.assertNotIn(str(self.project.storage_key), error["message"])
            self.assertNotIn(str(self.storage_root), error["message"])
        self.assertEqual(len(revision.validation_errors), 4)

        FaultyStorage.reset()
        result = self.stage()
        self.assertEqual((result.outcome, result.revision.pk), ("resumed", revision.pk))
        self.assertEqual(result.revision.validation_errors, [])
        self.assertEqual(FaultyStorage.saves, 4)

    def test_verification_mismatch_is_reported_not_repaired(self):
        revision = self.stage().revision
        tampered = self.stored(revision, "pkg/mod1.py")
        tampered.write_bytes(b"VALUE = 666\n".ljust(len(FILES["pkg/mod1.py"]), b"#"))
        self.stored(revision, "pkg/mod3.py").unlink()

        with self.assertRaises(VerificationFailed) as failure:
            self.stage()
        findings = {f["path"]: f["code"] for f in failure.exception.findings}
        self.assertEqual(findings, {"pkg/mod1.py": "checksum_mismatch", "pkg/mod3.py": "missing"})
        self.assertTrue(tampered.read_bytes().startswith(b"VALUE = 666"))
        self.assertFalse(self.stored(revision, "pkg/mod3.py").exists())
        revision.refresh_from_db()
        self.assertEqual(revision.status, Status.MATERIALIZED)
        # Stored content alone never makes a materialized revision activatable.
        with self.assertRaises(RevisionNotReusable):
            ensure_revision_ready_for_activation(revision)
        ScriptProjectRevision.objects.filter(pk=revision.pk).update(status=Status.VALID)
        revision.refresh_from_db()
        with self.assertRaises(VerificationFailed):
            ensure_revision_ready_for_activation(revision)

    def test_restaging_never_resets_validation_or_reopens_a_verdict(self):
        revision = self.stage().revision
        for owned, errors in (
            (Status.VALIDATING, []),
            (Status.INVALID, [{"source_path": "a.py", "code": "x"}]),
        ):
            with self.subTest(status=owned):
                ScriptProjectRevision.objects.filter(pk=revision.pk).update(
                    status=owned, validation_errors=errors
                )
                result = self.stage()
                self.assertEqual((result.outcome, result.revision.pk), ("reused", revision.pk))
                revision.refresh_from_db()
                self.assertEqual((revision.status, revision.validation_errors), (owned, errors))

    def test_staging_into_a_deleted_project_is_refused(self):
        stale = ScriptProject.objects.get(pk=self.project.pk)
        ScriptProject.objects.filter(pk=self.project.pk).delete()
        with self.assertRaises(RevisionNotReusable):
            stage_upload(stale, upload(), "p.zip")
        self.assertEqual(self.stored_files(), [])

    def test_corrupt_manifest_refuses_reuse(self):
        revision = self.stage().revision
        manifest = dict(revision.manifest, files=list(reversed(revision.manifest["files"])))
        ScriptProjectRevision.objects.filter(pk=revision.pk).update(manifest=manifest)
        with self.assertRaises(RevisionCorrupt):
            self.stage()

    def test_refresh_shares_stored_content_between_selections(self):
        source = self.stage().revision
        files_before = self.stored_files()
        saves_before = FaultyStorage.saves
        ScriptFile.objects.create(project=self.project, path="pkg/mod1.py")

        result = refresh_revision(source)
        refreshed = result.revision
        self.assertEqual(result.outcome, "created")
        self.assertEqual(refreshed.digest, source.digest)
        self.assertNotEqual(refreshed.script_file_digest, source.script_file_digest)
        self.assertEqual(refreshed.status, Status.MATERIALIZED)
        self.assertEqual(
            [e["path"] for e in refreshed.script_file_snapshot["script_files"]], ["pkg/mod1.py"]
        )
        self.assertEqual(refreshed.storage_prefix, source.storage_prefix)
        self.assertEqual(self.stored_files(), files_before)
        self.assertEqual(FaultyStorage.saves, saves_before)
        # The source keeps its frozen selection.
        source.refresh_from_db()
        self.assertEqual(source.script_file_snapshot["script_files"], [])
        self.assertEqual(refresh_revision(source).revision.pk, refreshed.pk)

    def test_refresh_refuses_a_corrupt_snapshot(self):
        source = self.stage().revision
        snapshot = {"version": 1, "script_files": [{"id": 1, "path": "../x.py"}]}
        ScriptProjectRevision.objects.filter(pk=source.pk).update(script_file_snapshot=snapshot)
        with self.assertRaises(RevisionCorrupt):
            refresh_revision(source)
        self.assertEqual(ScriptProjectRevision.objects.filter(project=self.project).count(), 1)


class ScriptFileSnapshotTest(StorageTestMixin, TestCase):
    def test_builder_freezes_enabled_declarations_in_path_order(self):
        project = ScriptProject.objects.create(name="P", key="p")
        b = ScriptFile.objects.create(project=project, path="b.py")
        a = ScriptFile.objects.create(project=project, path="a/x.py")
        ScriptFile.objects.create(project=project, path="c.py", enabled=False)
        snapshot, digest = build_script_file_snapshot(project)
        self.assertEqual(
            snapshot,
            {
                "version": 1,
                "script_files": [{"id": a.pk, "path": "a/x.py"}, {"id": b.pk, "path": "b.py"}],
            },
        )
        self.assertEqual(snapshot_problems(snapshot, digest), [])

    def test_checks_detect_corruption(self):
        def snap(*entries):
            return {
                "version": 1,
                "script_files": [{"id": i + 1, "path": p} for i, p in enumerate(entries)],
            }

        same_id = {
            "version": 1,
            "script_files": [{"id": 7, "path": "a.py"}, {"id": 7, "path": "b.py"}],
        }
        # Each corruption is named for what it is, not merely "some problem".
        cases = {
            "shape": ({"version": 1}, "unexpected shape"),
            "ordering": (snap("b.py", "a.py"), "not strictly ordered by path"),
            "duplicate": (snap("a.py", "a.py"), "a.py: duplicate_path"),
            "case collision": (snap("A.py", "a.py"), "case_fold_conflict"),
            "module collision": (snap("pkg.py", "pkg/__init__.py"), "path_conflict"),
            "bad path": (snap("../a.py"), "entry 0 has an unacceptable path"),
            "not python": (snap("a.txt"), "entry 0 has an unacceptable path"),
            "same declaration twice": (same_id, "a script file appears twice"),
        }
        for name, (snapshot, expected) in cases.items():
            with self.subTest(case=name):
                problems = snapshot_problems(snapshot, None)
                self.assertTrue(any(expected in p for p in problems), problems)
        good = snap("a.py")
        self.assertEqual(snapshot_problems(good, document_digest(good)), [])
        self.assertEqual(
            snapshot_problems(good, "0" * 64),
            ["script file snapshot: digest does not match the revision"],
        )


class ValidationTimingSettingTest(TestCase):
    """The configured validation Job timeout must be shorter than the lease."""

    def timing(self, **configured):
        from django.conf import settings
        from django.test import override_settings

        from netbox_script_projects.constants import PLUGIN_NAME, get_validation_timing

        plugins_config = {**settings.PLUGINS_CONFIG, PLUGIN_NAME: configured}
        with override_settings(PLUGINS_CONFIG=plugins_config):
            return get_validation_timing()

    def test_a_lease_not_longer_than_the_job_timeout_is_refused_naming_the_setting(self):
        for lease in (300, 120):
            with (
                self.subTest(lease=lease),
                self.assertRaisesMessage(
                    ValueError, "['validation_lease'] must exceed 'validation_job_timeout'"
                ),
            ):
                self.timing(validation_job_timeout=300, validation_lease=lease)
        timing = self.timing(validation_job_timeout=300, validation_lease=301)
        self.assertEqual((timing.job_timeout, timing.lease), (300, 301))

    def test_non_positive_or_non_integer_seconds_are_refused(self):
        for value in (0, -5, "600", True):
            with (
                self.subTest(value=value),
                self.assertRaisesMessage(ValueError, "must be a positive number of seconds"),
            ):
                self.timing(validation_job_timeout=value)
