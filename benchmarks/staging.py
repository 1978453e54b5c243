"""Script project staging benchmark: prints figures, asserts nothing.

Generates a project tree of 1,000 Python files totalling 50 MiB, packs it
as a tar archive (not timed), then measures in the same run:

1. `stage_upload()` of the archive into a new project: defensive archive
   read with hashing and counting, canonical manifest and digest, the
   Project lock, one storage write per file into a FileSystemStorage, and
   verification of every stored file by re-reading it;
2. re-staging the same archive (an existing revision: verified before reuse);
3. the baseline: `sha256sum` over the same tree plus `cp -r` of it.

NetBox runs against a database cloned from the test template
(`nbsp_bench_<pid>`, dropped at the end) on PROXBOX_DATABASE_URL.

    uv run python benchmarks/staging.py [--files 1000] [--megabytes 50]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path


def generate_tree(root: Path, files: int, total_bytes: int) -> int:
    """Python-ish files of pseudo-random text; returns the bytes written."""
    size = total_bytes // files
    written = 0
    for index in range(files):
        path = root / f"pkg_{index // 50:02d}" / f"module_{index:04d}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        line = f"VALUE_{index} = {os.urandom(24).hex()!r}\n".encode()
        body = (line * (size // len(line) + 1))[:size]
        path.write_bytes(body)
        written += size
    return written


def timed(function):
    started = time.perf_counter()
    result = function()
    return time.perf_counter() - started, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--megabytes", type=int, default=50)
    args = parser.parse_args()

    from proxbox_devstack.testdb import netbox_scratch_database

    work = Path(tempfile.mkdtemp(prefix="nbsp-bench-"))
    with netbox_scratch_database("nbsp_bench_", log=lambda *a: None):
        from django.conf import settings
        from django.test import override_settings

        try:
            tree, store, copy = work / "tree", work / "store", work / "copy"
            tree.mkdir()
            total = generate_tree(tree, args.files, args.megabytes * 1024 * 1024)
            archive = work / "project.tar"
            with tarfile.open(archive, "w") as tar:
                tar.add(tree, arcname=".")

            storages = {
                **settings.STORAGES,
                "script_projects": {
                    "BACKEND": "django.core.files.storage.FileSystemStorage",
                    "OPTIONS": {"location": str(store)},
                },
            }
            with override_settings(STORAGES=storages):
                from netbox_script_projects.models import ScriptProject
                from netbox_script_projects.storage.service import stage_upload

                project = ScriptProject.objects.create(name="Benchmark", key="benchmark")

                def stage():
                    with open(archive, "rb") as upload:
                        return stage_upload(project, upload, archive.name)

                stage_seconds, first = timed(stage)
                restage_seconds, second = timed(stage)

            file_list = sorted(str(p) for p in tree.rglob("*.py"))
            sha_seconds, _ = timed(
                lambda: subprocess.run(
                    ["xargs", "-0", "sha256sum"],
                    input="\0".join(file_list).encode(),
                    stdout=subprocess.DEVNULL,
                    check=True,
                )
            )
            cp_seconds, _ = timed(
                lambda: subprocess.run(["cp", "-r", str(tree), str(copy)], check=True)
            )
            baseline = sha_seconds + cp_seconds

            mib = total / (1024 * 1024)
            print(
                f"tree: {args.files} files, {mib:.1f} MiB ({total} bytes); archive {archive.stat().st_size} bytes (tar)"
            )
            print(
                f"stage_upload (new revision, {first.outcome}):  {stage_seconds:7.3f} s  {mib / stage_seconds:7.1f} MiB/s"
            )
            print(
                f"stage_upload (same content, {second.outcome}):  {restage_seconds:7.3f} s  "
                f"{mib / restage_seconds:7.1f} MiB/s"
            )
            print(f"baseline sha256sum:                     {sha_seconds:7.3f} s")
            print(f"baseline cp -r:                         {cp_seconds:7.3f} s")
            print(
                f"baseline sha256sum + cp -r:             {baseline:7.3f} s  {mib / baseline:7.1f} MiB/s"
            )
            print(f"stage / baseline:                       {stage_seconds / baseline:7.2f} x")
            print(
                f"revision {first.revision.digest[:16]}… status {first.revision.status}, files {first.revision.file_count}"
            )
        finally:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
