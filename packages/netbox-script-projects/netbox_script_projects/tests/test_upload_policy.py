"""The hostile upload corpus, through the REST upload endpoint and real storage.

Every case must be rejected with its code, recorded as a revision with null
digests, and leave not one byte in storage.
"""

import tarfile
import tempfile
import zipfile
from pathlib import Path

from django.urls import reverse
from rest_framework import status
from utilities.testing import APITestCase

from netbox_script_projects.choices import RevisionStatusChoices
from netbox_script_projects.models import ScriptProject, ScriptProjectRevision

from .support import (
    StorageTestMixin,
    archive_upload,
    py_upload,
    tar_bytes,
    tar_special,
    zero_stream_tar_gz,
    zip_bytes,
    zip_symlink,
    zip_with_raw_name,
)

KIB = 1024
LIMITS = {
    "max_file_size": 64 * KIB,
    "max_project_size": 256 * KIB,
    "max_file_count": 20,
    "lock_timeout": 5,
}


def _hostile_corpus():
    """(case name, upload, expected code, expected error path or None)."""
    big_zeros = b"\0" * (4 * 1024 * KIB)  # 4 MiB of zeros deflate to ~4 KiB
    yield (
        "traversal",
        archive_upload(zip_bytes({"../evil.py": b"x"})),
        "path_traversal",
        "../evil.py",
    )
    yield (
        "nested traversal",
        archive_upload(zip_bytes({"a/../../evil.py": b"x"})),
        "path_traversal",
        None,
    )
    yield (
        "backslash traversal",
        archive_upload(zip_bytes({"..\\evil.py": b"x"})),
        "path_traversal",
        None,
    )
    yield (
        "tar traversal",
        archive_upload(tar_bytes([("./../../evil.py", b"x = 1\n")]), "p.tar"),
        "path_traversal",
        None,
    )
    yield (
        "tar directory symlink then a file through it",
        archive_upload(
            tar_bytes([tar_special("lib", tarfile.SYMTYPE, "/etc"), ("lib/passwd.py", b"x")]),
            "p.tar",
        ),
        "unsupported_member",
        "lib",
    )
    yield (
        "tar absolute path",
        archive_upload(tar_bytes([("/tmp/x.py", b"x")]), "p.tar"),
        "absolute_path",
        None,
    )
    yield (
        "absolute path",
        archive_upload(zip_bytes({"/etc/cron.d/x.py": b"x"})),
        "absolute_path",
        None,
    )
    yield "drive path", archive_upload(zip_bytes({"C:/Windows/x.py": b"x"})), "absolute_path", None
    yield "zip symlink", archive_upload(zip_symlink()), "unsupported_member", "link.py"
    yield (
        "tar symlink",
        archive_upload(
            tar_bytes([tar_special("link.py", tarfile.SYMTYPE, "/etc/passwd")]), "p.tar"
        ),
        "unsupported_member",
        "link.py",
    )
    yield (
        "tar hardlink",
        archive_upload(
            tar_bytes([("a.py", b"x = 1\n"), tar_special("b.py", tarfile.LNKTYPE, "a.py")]), "p.tar"
        ),
        "unsupported_member",
        "b.py",
    )
    yield (
        "device file",
        archive_upload(tar_bytes([tar_special("dev.py", tarfile.CHRTYPE)]), "p.tar"),
        "unsupported_member",
        "dev.py",
    )
    yield (
        "fifo",
        archive_upload(tar_bytes([tar_special("pipe.py", tarfile.FIFOTYPE)]), "p.tar"),
        "unsupported_member",
        "pipe.py",
    )
    yield (
        "zip bomb by ratio",
        archive_upload(zip_bytes({"bomb.py": big_zeros})),
        "file_too_large",
        "bomb.py",
    )
    yield (
        "many-member zip bomb",
        archive_upload(zip_bytes({f"m{i}.py": b"\0" * (60 * KIB) for i in range(6)})),
        "project_too_large",
        None,
    )
    with zero_stream_tar_gz("bomb.py", 16 * 1024 * KIB) as data:
        yield "tar.gz bomb", archive_upload(data, "p.tar.gz"), "project_too_large", None
    yield (
        "duplicate names",
        archive_upload(
            zip_bytes({}, infos=[(zipfile.ZipInfo("a.py"), b"1"), (zipfile.ZipInfo("a.py"), b"2")])
        ),
        "duplicate_path",
        "a.py",
    )
    yield (
        "case-folded names",
        archive_upload(zip_bytes({"Tool.py": b"x", "tool.py": b"y"})),
        "case_fold_conflict",
        "tool.py",
    )
    yield (
        "case-folded directories",
        archive_upload(zip_bytes({"Lib/a.py": b"x", "lib/b.py": b"y"})),
        "case_fold_conflict",
        "lib",
    )
    yield (
        "Unicode-normalization alias",
        archive_upload(zip_bytes({"caf\u00e9.py": b"x", "cafe\u0301.py": b"y"})),
        "case_fold_conflict",
        None,
    )
    yield (
        "module-name collision",
        archive_upload(zip_bytes({"pkg.py": b"x", "pkg/__init__.py": b"y"})),
        "path_conflict",
        None,
    )
    yield (
        "file and directory",
        archive_upload(zip_bytes({"data": b"x", "data/x.py": b"y"})),
        "path_conflict",
        "data",
    )
    yield (
        "pyc",
        archive_upload(zip_bytes({"mod.cpython-312.pyc": b"\x00"})),
        "compiled_artifact",
        None,
    )
    yield (
        "__pycache__",
        archive_upload(zip_bytes({"__pycache__/m.py": b"x"})),
        "compiled_artifact",
        None,
    )
    yield "single pyc upload", py_upload("mod.pyc", b"\x00"), "compiled_artifact", "mod.pyc"
    yield (
        "too deep",
        archive_upload(zip_bytes({"/".join("d" * 17) + ".py": b"x"})),
        "path_too_deep",
        None,
    )
    yield (
        "component too long",
        archive_upload(zip_bytes({"a" * 256 + ".py": b"x"})),
        "path_component_too_long",
        None,
    )
    yield (
        "path too long",
        archive_upload(zip_bytes({"/".join(["b" * 100] * 6) + "/x.py": b"x"})),
        "path_too_long",
        None,
    )
    yield (
        "too many files",
        archive_upload(zip_bytes({f"f{i}.py": b"x" for i in range(21)})),
        "too_many_files",
        None,
    )
    yield "too large", py_upload("big.py", b"#" * (64 * KIB + 1)), "file_too_large", "big.py"
    yield (
        "NUL byte",
        archive_upload(zip_with_raw_name("aXb.py", b"a\x00b.py")),
        "invalid_path",
        None,
    )
    yield (
        "non-UTF-8 zip name",
        archive_upload(zip_with_raw_name("cafX.py", b"caf\xe9.py")),
        "invalid_path_encoding",
        None,
    )
    yield (
        "non-UTF-8 tar name",
        archive_upload(tar_bytes([("caf\udce9.py", b"x = 1\n")]), "p.tar"),
        "invalid_path_encoding",
        None,
    )
    yield "not an archive", archive_upload(b"just some bytes", "notes.txt"), "invalid_archive", None
    yield (
        "truncated zip",
        archive_upload(zip_bytes({"a.py": b"x" * 5000})[:60]),
        "invalid_archive",
        None,
    )


class HostileUploadCorpusTest(StorageTestMixin, APITestCase):
    limits = LIMITS

    def setUp(self):
        super().setUp()
        self.project = ScriptProject.objects.create(name="Corpus", key="corpus")
        self.add_permissions(
            "netbox_script_projects.change_scriptproject",
            "netbox_script_projects.add_scriptprojectrevision",
        )
        self.url = reverse(
            "plugins-api:netbox_script_projects-api:scriptproject-upload", args=[self.project.pk]
        )

    def upload(self, uploaded):
        return self.client.post(self.url, {"file": uploaded}, format="multipart", **self.header)

    def spool_dirs(self):
        return sorted(Path(tempfile.gettempdir()).glob("nbsp-upload-*"))

    def test_hostile_corpus_is_rejected_with_codes_and_stores_nothing(self):
        spools_before = self.spool_dirs()
        cases = list(_hostile_corpus())
        self.assertGreaterEqual(len(cases), 15)
        for case, uploaded, code, path in cases:
            with self.subTest(case=case):
                response = self.upload(uploaded)
                self.assertEqual(response.status_code, status.HTTP_400_BAD_REQUEST, response.data)
                errors = response.data["errors"]
                self.assertIn(code, {e["code"] for e in errors}, errors)
                for error in errors:
                    self.assertEqual(set(error), {"path", "code", "message"})
                if path is not None:
                    self.assertIn(path, {e["path"] for e in errors if e["code"] == code})
                if code in ("too_many_files", "project_too_large"):
                    self.assertIsNone(next(e for e in errors if e["code"] == code)["path"])
                revision = ScriptProjectRevision.objects.get(pk=response.data["revision"]["id"])
                self.assertEqual(revision.status, RevisionStatusChoices.INVALID)
                self.assertIsNone(revision.digest)
                self.assertIsNone(revision.script_file_digest)
                self.assertEqual(revision.validation_errors, errors)
                self.assertEqual(self.stored_files(), [], "a rejected upload wrote to storage")
        # The private spool directories are gone too.
        self.assertEqual(self.spool_dirs(), spools_before)

    def test_rejected_submissions_with_the_same_accepted_subset_do_not_share_identity(self):
        first = self.upload(archive_upload(zip_bytes({"ok.py": b"x = 1\n", "../a.py": b"1"})))
        second = self.upload(archive_upload(zip_bytes({"ok.py": b"x = 1\n", "../b.py": b"2"})))
        self.assertEqual((first.status_code, second.status_code), (400, 400))
        self.assertNotEqual(first.data["revision"]["id"], second.data["revision"]["id"])
        self.assertEqual(
            ScriptProjectRevision.objects.filter(project=self.project, digest__isnull=True).count(),
            2,
        )

    def test_accepted_archive_writes_only_below_the_revision_prefix(self):
        data = tar_bytes(
            [
                tar_special(".", tarfile.DIRTYPE),  # `tar -C tree .` writes the root first
                tar_special("./scripts", tarfile.DIRTYPE),
                ("./scripts/inventory.py", b"x = 1\n"),
                ("./lib/util.py", b"y = 2\n"),
            ],
            gzip=True,
        )
        response = self.upload(archive_upload(data, "project.tar.gz"))
        self.assertEqual(response.status_code, status.HTTP_201_CREATED, response.data)
        digest = response.data["revision"]["digest"]
        prefix = f"netbox-scripts/{self.project.storage_key}/revisions/{digest}/"
        self.assertEqual(
            self.stored_files(), [prefix + "lib/util.py", prefix + "scripts/inventory.py"]
        )
        self.assertEqual(response.data["revision"]["status"]["value"], "materialized")
        self.assertEqual(response.data["outcome"], "created")
