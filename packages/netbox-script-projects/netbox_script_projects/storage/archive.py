"""Defensive reading of uploads: a single .py file, or a zip/tar/tar.gz archive.

Nothing here extracts to a caller-chosen path. Member data is spooled to
numbered files in a private work directory while it is hashed and counted,
so a hostile name never touches a filesystem, and a decompression bomb
stops at the configured limit instead of at the end of its data. Member
types other than regular files and directories are refused, and names are
decoded strictly as UTF-8.
"""

from __future__ import annotations

import hashlib
import stat
import tarfile
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from ..choices import StorageErrorCodes as Codes
from ..constants import CHUNK_SIZE, SCRIPT_FILE_SUFFIX, Limits
from .paths import PathError, display_name, normalize_member_name, path_rule_errors, tree_conflicts

_GZIP_MAGIC = b"\x1f\x8b"
_ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")
_ZIP_UTF8_FLAG = 0x800
_ZIP_ENCRYPTED_FLAG = 0x1
_ZIP_UNIX = 3


@dataclass(frozen=True)
class SpooledFile:
    """An accepted member: canonical path, size, sha256 and its spooled bytes."""

    path: str
    size: int
    sha256: str
    spool: Path


@dataclass
class UploadContents:
    files: list[SpooledFile] = field(default_factory=list)
    errors: list[PathError] = field(default_factory=list)

    @property
    def accepted(self) -> bool:
        return not self.errors and bool(self.files)


class _Stop(Exception):
    """A project-wide limit was reached; reading ends here."""


class _Reader:
    def __init__(self, workdir: Path, limits: Limits):
        self.workdir = workdir
        self.limits = limits
        self.contents = UploadContents()
        self.file_count = 0
        self.entry_count = 0
        # Decompressed bytes processed so far, including data that was only
        # skipped: skipping a member of a compressed stream inflates it too.
        self.consumed = 0

    def error(self, path, code, message):
        self.contents.errors.append(PathError(path, code, message))

    def stop(self, code, message):
        self.error(None, code, message)
        raise _Stop

    def count_entry(self):
        self.entry_count += 1
        # Directories and refused members cost work too; bound them generously.
        if self.entry_count > 2 * self.limits.max_file_count + 1000:
            self.stop(
                Codes.TOO_MANY_FILES,
                f"The archive has more than {self.limits.max_file_count} files.",
            )

    def count_file(self):
        self.file_count += 1
        if self.file_count > self.limits.max_file_count:
            self.stop(
                Codes.TOO_MANY_FILES,
                f"The project has more than {self.limits.max_file_count} files.",
            )

    def charge(self, size: int):
        self.consumed += size
        if self.consumed > self.limits.max_project_size:
            self.stop(
                Codes.PROJECT_TOO_LARGE,
                f"The project exceeds {self.limits.max_project_size} bytes decompressed.",
            )

    def accept_name(self, raw: str) -> str | None:
        try:
            raw.encode("utf-8")
        except UnicodeEncodeError:
            self.error(
                display_name(raw), Codes.INVALID_PATH_ENCODING, "Member name is not valid UTF-8."
            )
            return None
        path, error = normalize_member_name(raw)
        if error:
            self.contents.errors.append(error)
            return None
        return path

    def regular_file(
        self, raw: str, declared_size: int | None, open_stream, precharged=False
    ) -> None:
        """Check, read, hash and spool one regular member.

        `precharged`: the member's declared size was already counted against
        the project limit (tar streams inflate it whether it is read or not).
        """
        self.count_file()
        path = self.accept_name(raw)
        if path is None:
            return
        if rule_errors := path_rule_errors(path):
            self.contents.errors.extend(rule_errors)
            return
        limit = self.limits.max_file_size
        if declared_size is not None and declared_size > limit:
            self.error(path, Codes.FILE_TOO_LARGE, f"File exceeds {limit} bytes.")
            return
        spool = self.workdir / f"{len(self.contents.files):06d}"
        digest = hashlib.sha256()
        size = 0
        with open_stream() as stream, open(spool, "wb") as out:
            while chunk := stream.read(CHUNK_SIZE):
                size += len(chunk)
                if not precharged:
                    self.charge(len(chunk))
                if size > limit:
                    out.close()
                    spool.unlink()
                    self.error(path, Codes.FILE_TOO_LARGE, f"File exceeds {limit} bytes.")
                    return
                digest.update(chunk)
                out.write(chunk)
        self.contents.files.append(SpooledFile(path, size, digest.hexdigest(), spool))

    def directory(self, raw: str) -> None:
        # Directories are implied by file paths and never stored; their
        # names must still be safe. The root itself (".", "./") is harmless.
        if raw.strip("/") in ("", "."):
            return
        self.accept_name(raw)

    def unsupported(self, raw: str, kind: str) -> None:
        self.error(display_name(raw), Codes.UNSUPPORTED_MEMBER, f"{kind} members are not accepted.")


def read_upload(upload: BinaryIO, name: str, workdir: Path, limits: Limits) -> UploadContents:
    """Read an uploaded file into spooled members plus storage-time errors."""
    reader = _Reader(workdir, limits)
    try:
        head = upload.read(4)
        upload.seek(0)
        if name.endswith(SCRIPT_FILE_SUFFIX):
            reader.regular_file(name, None, lambda: _Unclosed(upload))
        elif head.startswith(_ZIP_MAGICS):
            _read_zip(reader, upload)
        elif head.startswith(_GZIP_MAGIC) or _is_tar(upload):
            _read_tar(reader, upload, gzip=head.startswith(_GZIP_MAGIC))
        else:
            path, error = normalize_member_name(name)
            if error is None and path_rule_errors(path):
                reader.contents.errors.extend(path_rule_errors(path))
            else:
                reader.error(
                    None,
                    Codes.INVALID_ARCHIVE,
                    "Upload a .py file or a zip, tar or tar.gz archive.",
                )
    except _Stop:
        pass
    contents = reader.contents
    contents.errors.extend(tree_conflicts(f.path for f in contents.files))
    if not contents.files and not contents.errors:
        reader.error(None, Codes.EMPTY_PROJECT, "The upload contains no files.")
    contents.errors = sorted(set(contents.errors), key=lambda e: (e.path or "", e.code, e.message))
    return contents


class _Unclosed:
    """Context manager yielding the upload itself (the caller owns closing it)."""

    def __init__(self, stream):
        self.stream = stream

    def __enter__(self):
        return self.stream

    def __exit__(self, *exc):
        return False


def _is_tar(upload: BinaryIO) -> bool:
    block = upload.read(512)
    upload.seek(0)
    # ustar magic at offset 257 ("ustar\0" POSIX, "ustar " GNU).
    return len(block) == 512 and block[257:262] == b"ustar"


def _zip_name(info: zipfile.ZipInfo) -> str:
    """The member name decoded strictly as UTF-8 (surrogate-escaped if not)."""
    if info.flag_bits & _ZIP_UTF8_FLAG:
        return info.orig_filename
    raw = info.orig_filename.encode("cp437")
    return raw.decode("utf-8", "surrogateescape")


def _read_zip(reader: _Reader, upload: BinaryIO) -> None:
    try:
        archive = zipfile.ZipFile(upload)
    except UnicodeDecodeError:
        reader.stop(
            Codes.INVALID_PATH_ENCODING, "A member name flagged as UTF-8 is not valid UTF-8."
        )
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        reader.stop(Codes.INVALID_ARCHIVE, f"Unreadable zip archive: {exc}")
    with archive:
        for info in archive.infolist():
            reader.count_entry()
            raw = _zip_name(info)
            # Unix mode bits; many writers leave the file type out (= regular).
            mode = info.external_attr >> 16 if info.create_system == _ZIP_UNIX else 0
            if stat.S_IFMT(mode) and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                reader.unsupported(raw, _kind(mode))
            elif info.flag_bits & _ZIP_ENCRYPTED_FLAG:
                reader.unsupported(raw, "Encrypted")
            elif info.is_dir() or (mode and stat.S_ISDIR(mode)):
                reader.directory(raw)
            else:
                try:
                    reader.regular_file(raw, info.file_size, lambda info=info: archive.open(info))
                except (
                    zipfile.BadZipFile,
                    OSError,
                    EOFError,
                    NotImplementedError,
                    RuntimeError,
                ) as exc:
                    reader.stop(Codes.INVALID_ARCHIVE, f"Unreadable zip member: {exc}")


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "Symbolic link"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "Device"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    return "Special file"


def _tar_members(archive: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    while (member := archive.next()) is not None:
        yield member


def _read_tar(reader: _Reader, upload: BinaryIO, gzip: bool) -> None:
    try:
        # Stream mode: one forward pass, no member table lookups or seeks.
        with tarfile.open(
            fileobj=upload,
            mode="r|gz" if gzip else "r|",
            encoding="utf-8",
            errors="surrogateescape",
        ) as archive:
            for member in _tar_members(archive):
                _tar_member(reader, archive, member)
                # The stream skips any unread data of this member next.
                archive.members.clear()
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        reader.stop(Codes.INVALID_ARCHIVE, f"Unreadable tar archive: {exc}")


def _tar_member(reader: _Reader, archive: tarfile.TarFile, member: tarfile.TarInfo) -> None:
    reader.count_entry()
    # Whatever we do with it, the stream inflates the member's data, so its
    # declared size counts before anything is read or skipped.
    reader.charge(max(member.size, 0))
    if member.isreg():
        reader.regular_file(
            member.name, member.size, lambda: archive.extractfile(member), precharged=True
        )
    elif member.isdir():
        reader.directory(member.name)
    elif member.issym():
        reader.unsupported(member.name, "Symbolic link")
    elif member.islnk():
        reader.unsupported(member.name, "Hard link")
    elif member.ischr() or member.isblk():
        reader.unsupported(member.name, "Device")
    elif member.isfifo():
        reader.unsupported(member.name, "FIFO")
    else:
        reader.unsupported(member.name, "Special")
