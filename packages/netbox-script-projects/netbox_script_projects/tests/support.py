"""Shared test scaffolding: real storage in a temporary directory, archive
builders, a fault-injecting storage backend and a recording RQ queue."""

from __future__ import annotations

import io
import os
import shutil
import stat
import tarfile
import tempfile
import zipfile
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import FileSystemStorage
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import override_settings

from netbox_script_projects.constants import CLEANUP_JOB_NAME, PLUGIN_NAME


class SimulatedCrash(BaseException):
    """A process dying mid-write: not an Exception, so nothing handles it."""


class FaultyStorage(FileSystemStorage):
    """A real filesystem storage with injectable failures (class-level knobs).

    Injected errors name the full location, as real backends' errors do
    (path, storage_key, digest), so tests can check none of it leaks.
    """

    saves_before_failure: int | None = None
    crash_on_save = False
    fail_deletes = False
    fail_reads = False
    # A backend that reports success but keeps other bytes (a lossy gateway, a
    # truncating proxy): only reading the stored file back shows it.
    corrupt_saves = False
    saves = 0

    @classmethod
    def reset(cls):
        cls.saves_before_failure = None
        cls.crash_on_save = False
        cls.fail_deletes = False
        cls.fail_reads = False
        cls.corrupt_saves = False
        cls.saves = 0

    def _open(self, name, mode="rb"):
        if FaultyStorage.fail_reads:
            raise OSError(f"injected read failure: {self.path(name)}")
        return super()._open(name, mode)

    def _save(self, name, content):
        if FaultyStorage.saves_before_failure is not None:
            if FaultyStorage.saves_before_failure <= 0:
                if FaultyStorage.crash_on_save:
                    # Leave a torn file behind, as a killed writer would.
                    path = Path(self.path(name))
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(content.read(3))
                    raise SimulatedCrash(name)
                raise OSError(f"injected write failure: {self.path(name)}")
            FaultyStorage.saves_before_failure -= 1
        FaultyStorage.saves += 1
        if FaultyStorage.corrupt_saves:
            # One byte more than was sent (empty files included).
            return super()._save(name, ContentFile(content.read() + b"#"))
        return super()._save(name, content)

    def delete(self, name):
        if FaultyStorage.fail_deletes:
            raise OSError(f"injected delete failure: {self.path(name)}")
        return super().delete(name)


class StorageTestMixin:
    """Each test gets its own storage root under a fresh temporary directory."""

    limits: dict = {}
    storage_backend = "netbox_script_projects.tests.support.FaultyStorage"

    def setUp(self):
        super().setUp()
        self.sandbox = Path(tempfile.mkdtemp(prefix="nbsp-test-"))
        self.storage_root = self.sandbox / "store"
        self.storage_root.mkdir()
        FaultyStorage.reset()
        plugins_config = {**settings.PLUGINS_CONFIG, PLUGIN_NAME: dict(self.limits)}
        storages = {
            **settings.STORAGES,
            "script_projects": {
                "BACKEND": self.storage_backend,
                "OPTIONS": {"location": str(self.storage_root)},
            },
        }
        override = override_settings(STORAGES=storages, PLUGINS_CONFIG=plugins_config)
        override.enable()
        self.addCleanup(override.disable)
        self.addCleanup(shutil.rmtree, self.sandbox, ignore_errors=True)
        self.addCleanup(FaultyStorage.reset)
        self.queue = RecordingQueue()
        patcher = mock.patch("core.models.jobs.django_rq.get_queue", return_value=self.queue)
        patcher.start()
        self.addCleanup(patcher.stop)
        # NetBox indexes searchable objects inline unless it sees a live RQ
        # worker in Redis, in which case it queues a SearchCacheJob instead.
        # Redis is shared on dev machines, so another process's worker would
        # switch paths mid-run; pin the worker-less path so every run is alike.
        no_workers = mock.patch("netbox.search.deferred.any_workers_for_queue", return_value=False)
        no_workers.start()
        self.addCleanup(no_workers.stop)

    def stored_files(self) -> list[str]:
        """Every file in the sandbox, relative to the storage root."""
        found = []
        for root, _dirs, files in os.walk(self.sandbox):
            for name in files:
                found.append(os.path.relpath(os.path.join(root, name), self.storage_root))
        return sorted(found)


class RecordingQueue:
    """Stands in for an RQ queue: records the cleanup Jobs that would be submitted.

    NetBox may submit unrelated Jobs too (e.g. a SearchCacheJob when it sees
    a live RQ worker); they are dropped, so counts and runs concern this
    plugin's cleanup only.
    """

    def __init__(self):
        self.submitted = []

    def enqueue(self, func, *args, **kwargs):
        job = kwargs.get("job")
        if job is not None and job.name == CLEANUP_JOB_NAME:
            self.submitted.append((func, args, kwargs))

    def run_all(self):
        submitted, self.submitted = self.submitted, []
        for func, args, kwargs in submitted:
            func(*args, **kwargs)
        return len(submitted)


#
# Upload builders
#


def py_upload(name="hello.py", content=b"print('hello')\n"):
    return SimpleUploadedFile(name, content, content_type="text/x-python")


def zip_bytes(files: dict, infos=()) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in files.items():
            archive.writestr(name, content)
        for info, content in infos:
            archive.writestr(info, content)
    return buffer.getvalue()


def zip_with_raw_name(placeholder: str, raw: bytes, content=b"x = 1\n") -> bytes:
    """A zip whose member name bytes are `raw` (zipfile would refuse to write them)."""
    data = zip_bytes({placeholder: content})
    assert len(placeholder.encode()) == len(raw)
    return data.replace(placeholder.encode(), raw)


def zip_symlink(name="link.py", target="/etc/passwd") -> bytes:
    info = zipfile.ZipInfo(name)
    info.create_system = 3
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return zip_bytes({"ok.py": b"x = 1\n"}, infos=[(info, target)])


def tar_bytes(members, gzip=False) -> bytes:
    """members: (TarInfo, bytes | None) pairs; a str name + bytes makes a regular file."""
    buffer = io.BytesIO()
    with tarfile.open(
        fileobj=buffer,
        mode="w:gz" if gzip else "w",
        format=tarfile.GNU_FORMAT,
        encoding="utf-8",
        errors="surrogateescape",
    ) as archive:
        for member, content in members:
            if isinstance(member, str):
                member = tarfile.TarInfo(member)
                member.size = len(content)
            archive.addfile(member, io.BytesIO(content) if content is not None else None)
    return buffer.getvalue()


def tar_special(name, kind, linkname="") -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    return info, None


def archive_upload(data: bytes, name="project.zip"):
    return SimpleUploadedFile(name, data, content_type="application/octet-stream")


@contextmanager
def zero_stream_tar_gz(name: str, size: int):
    """A tar.gz with one member of `size` zero bytes, built without holding it."""
    with tempfile.TemporaryFile() as handle:
        with tarfile.open(fileobj=handle, mode="w:gz") as archive:
            info = tarfile.TarInfo(name)
            info.size = size
            archive.addfile(info, _Zeros(size))
        handle.seek(0)
        yield handle.read()


class _Zeros(io.RawIOBase):
    def __init__(self, size):
        self.left = size

    def readable(self):
        return True

    def readinto(self, buffer):
        n = min(len(buffer), self.left)
        buffer[:n] = b"\0" * n
        self.left -= n
        return n
