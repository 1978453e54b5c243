"""Discovery of NetBox Script classes in a revision's Script Files.

Runs inside a validation Job, under the revision's validation lease. Content
problems become validation errors `{source_path, code, message,
exception_type, traceback}`; anything that says where the source lives at
runtime (the private namespace, storage keys, digests, temporary or cache
paths) is scrubbed, and module references are Project-relative.
"""

from __future__ import annotations

import inspect
import traceback
from dataclasses import dataclass, field

from django.core.exceptions import ValidationError
from extras.scripts import Script
from extras.utils import is_script
from rq.timeouts import JobTimeoutException

from ..storage.paths import script_module_name_errors
from .loader import LoadedRevision, module_name_for

# NetBox's Script.name is a CharField(max_length=79) holding "<module>.<class>".
MAX_SCRIPT_NAME_LENGTH = 79


class DiscoveryCodes:
    SYNTAX_ERROR = "syntax_error"
    IMPORT_ERROR = "import_error"
    NO_SCRIPTS = "no_scripts"
    NO_SCRIPT_FILES = "no_script_files"
    SCRIPT_FILE_MISSING = "script_file_missing"
    DUPLICATE_SCRIPT = "duplicate_script"
    INVALID_DECLARATION = "invalid_declaration"
    NAME_TOO_LONG = "script_name_too_long"
    INVALID_MODULE_NAME = "invalid_module_name"
    INVALID_SCRIPT_ORDER = "invalid_script_order"


@dataclass
class Discovery:
    scripts: list[dict] = field(default_factory=list)
    errors: list[dict] = field(default_factory=list)
    # Per Script File id: (discovered entries, errors)
    by_script_file: dict[int, tuple[list[dict], list[dict]]] = field(default_factory=dict)


class Scrubber:
    """Removes runtime locations from text recorded for users."""

    def __init__(self, loaded: LoadedRevision, secrets: list[str]):
        self.loaded = loaded
        # Longest first: a path inside another (site-packages inside the
        # virtualenv) is hidden whole, not left half-named.
        self.secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        text = text.replace(self.loaded.namespace + ".", "").replace(
            self.loaded.namespace, "<project>"
        )
        for secret in self.secrets:
            text = text.replace(secret, "<hidden>")
        return text


def script_execution_defaults(cls) -> dict:
    return {
        "commit_default": bool(cls.commit_default),
        "job_timeout": cls.job_timeout,
        "scheduling_enabled": bool(cls.scheduling_enabled),
        "notifications_default": cls.notifications_default,
    }


def _error(source_path, code, message, exc=None, scrub=None, project_files=()):
    entry = {
        "source_path": source_path,
        "code": code,
        "message": scrub(message) if scrub else message,
    }
    if exc is not None:
        entry["exception_type"] = type(exc).__name__
        entry["traceback"] = scrub(_project_traceback(exc, project_files)) if scrub else ""
    return entry


def _project_traceback(exc, project_files) -> str:
    """Only frames of Project files; the loader's and NetBox's frames say where things live."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename in project_files]
    lines = ["Traceback (most recent call last):\n", *traceback.format_list(frames)]
    lines.extend(traceback.format_exception_only(type(exc), exc))
    return "".join(lines)


def discover(loaded: LoadedRevision, snapshot: dict, scrub) -> Discovery:
    """Import every snapshot Script File and record the Script classes each publishes."""
    result = Discovery()
    declarations = snapshot["script_files"]
    if not declarations:
        result.errors.append(
            _error(
                None, DiscoveryCodes.NO_SCRIPT_FILES, "The revision has no enabled Script Files."
            )
        )
        return result
    project_files = set(loaded.files)
    seen: dict[tuple[str, str], str] = {}
    for declaration in declarations:
        path = declaration["path"]
        entries, errors = [], []
        result.by_script_file[declaration["id"]] = (entries, errors)
        if path not in loaded.files:
            errors.append(
                _error(
                    path,
                    DiscoveryCodes.SCRIPT_FILE_MISSING,
                    f"{path} is not part of the uploaded source.",
                )
            )
            continue
        if name_errors := script_module_name_errors(path):
            # Declared before the rule existed: published Scripts could never be named.
            errors.extend(
                _error(path, DiscoveryCodes.INVALID_MODULE_NAME, e.message) for e in name_errors
            )
            continue
        try:
            module = loaded.import_module(module_name_for(path))
        except JobTimeoutException:
            # The worker ran out of time: an environment failure, not a verdict.
            raise
        except SyntaxError as exc:
            # str(SyntaxError) names only the file's base name (a.py); the
            # Project-relative path says which a.py.
            errors.append(
                _error(
                    path,
                    DiscoveryCodes.SYNTAX_ERROR,
                    f"{type(exc).__name__}: {exc.msg} ({exc.filename}, line {exc.lineno})",
                    exc,
                    scrub,
                    project_files,
                )
            )
            continue
        # Whatever the source raises while importing is its content's fault,
        # including sys.exit(): SystemExit is no worker failure.
        except (Exception, SystemExit) as exc:
            errors.append(
                _error(
                    path,
                    DiscoveryCodes.IMPORT_ERROR,
                    f"{type(exc).__name__}: {exc}",
                    exc,
                    scrub,
                    project_files,
                )
            )
            continue
        try:
            published = _published_classes(module)
        except (Exception, SystemExit) as exc:
            errors.append(
                _error(
                    path,
                    DiscoveryCodes.INVALID_SCRIPT_ORDER,
                    f"script_order: {type(exc).__name__}: {exc}",
                    exc,
                    scrub,
                    project_files,
                )
            )
            continue
        for cls in published:
            if not str(cls.__module__).startswith(loaded.namespace + "."):
                # Defined outside the project (NetBox, a library, or a class
                # claiming another module): it could not be served from here.
                continue
            module_name = loaded.relative(cls.__module__)
            identity = (module_name, cls.__name__)
            if identity in seen:
                errors.append(
                    _error(
                        path,
                        DiscoveryCodes.DUPLICATE_SCRIPT,
                        f"{module_name}.{cls.__name__} is also published by {seen[identity]}.",
                    )
                )
                continue
            seen[identity] = path
            if len(f"{module_name}.{cls.__name__}") > MAX_SCRIPT_NAME_LENGTH:
                errors.append(
                    _error(
                        path,
                        DiscoveryCodes.NAME_TOO_LONG,
                        f"{module_name}.{cls.__name__} is longer than {MAX_SCRIPT_NAME_LENGTH} characters.",
                    )
                )
                continue
            try:
                cls.validate_meta()
                entry = {
                    "module": module_name,
                    "class_name": cls.__name__,
                    "script_file": path,
                    "name": str(cls.name),
                    "description": str(cls.description or ""),
                    "defaults": script_execution_defaults(cls),
                }
            except ValidationError as exc:
                errors.append(
                    _error(
                        path,
                        DiscoveryCodes.INVALID_DECLARATION,
                        f"{module_name}.{cls.__name__}: {'; '.join(exc.messages)}",
                        exc,
                        scrub,
                        project_files,
                    )
                )
                continue
            except Exception as exc:  # a Meta attribute that raises is a bad declaration too
                errors.append(
                    _error(
                        path,
                        DiscoveryCodes.INVALID_DECLARATION,
                        f"{module_name}.{cls.__name__}: {type(exc).__name__}: {exc}",
                        exc,
                        scrub,
                        project_files,
                    )
                )
                continue
            entries.append(entry)
        if not entries and not errors:
            errors.append(
                _error(path, DiscoveryCodes.NO_SCRIPTS, f"{path} defines no NetBox Script classes.")
            )
    for entries, errors in result.by_script_file.values():
        result.scripts.extend(entries)
        result.errors.extend(errors)
    return result


def _published_classes(module) -> list[type]:
    """NetBox's own rule: `script_order` first, then the remaining Script classes by name."""
    script_order = getattr(module, "script_order", ())
    if isinstance(script_order, (str, bytes)) or not hasattr(script_order, "__iter__"):
        raise TypeError(
            f"expected a list or tuple of Script classes, not {type(script_order).__name__}"
        )
    ordered = [cls for cls in script_order if is_script(cls)]
    for _name, cls in inspect.getmembers(module, is_script):
        if cls not in ordered:
            ordered.append(cls)
    return [cls for cls in ordered if issubclass(cls, Script)]


DISCOVERED_SCRIPT_KEYS = {"module", "class_name", "script_file", "name", "description", "defaults"}


def discovered_scripts_problems(records) -> list[str]:
    """Shape check of `discovered_scripts` before activation rebuilds Script rows from it."""
    if not isinstance(records, list):
        return ["discovered scripts: not a list"]
    problems = []
    identities = set()
    for index, record in enumerate(records):
        if not isinstance(record, dict) or set(record) != DISCOVERED_SCRIPT_KEYS:
            problems.append(f"discovered scripts: entry {index} has an unexpected shape")
            continue
        strings = ("module", "class_name", "script_file", "name", "description")
        if not all(isinstance(record[key], str) for key in strings):
            problems.append(f"discovered scripts: entry {index} has a non-text field")
            continue
        if not record["class_name"].isidentifier() or not all(
            part.isidentifier() for part in record["module"].split(".")
        ):
            problems.append(f"discovered scripts: entry {index} names an invalid module or class")
            continue
        if len(f"{record['module']}.{record['class_name']}") > MAX_SCRIPT_NAME_LENGTH:
            problems.append(f"discovered scripts: entry {index} has a name too long to publish")
        if not isinstance(record["defaults"], dict):
            problems.append(f"discovered scripts: entry {index} has invalid defaults")
        identity = (record["module"], record["class_name"])
        if identity in identities:
            problems.append(f"discovered scripts: entry {index} repeats {'.'.join(identity)}")
        identities.add(identity)
    return problems
