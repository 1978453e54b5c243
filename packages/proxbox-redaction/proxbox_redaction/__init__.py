"""Secrets out of everything a Proxbox process logs, prints as a traceback, or shows as a URL.

`install()` puts one redactor in front of the process's log-record factory, so
every record is scrubbed when it is created: whichever logger made it, whichever
handlers a framework (uvicorn's `log_config`, Django's `LOGGING`, RQ) configures
before or after, and Python's last-resort handler. Uncaught exceptions in the main
thread and in threads are printed redacted too. `run_console` ends a command line
tool the way a terminal user expects when the user ends it: no traceback at all.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import threading
import traceback
from collections.abc import Callable, Iterable
from importlib import metadata

# The version lives in pyproject.toml only; the installed metadata carries it here.
__version__ = metadata.version("proxbox-redaction")

REDACTED = "***"

# Secrets shorter than this are masked only where they stand as a whole token (not inside a
# longer word): a short secret such as "proxmox" or "y" is also part of ordinary words, and
# masking it everywhere garbles every line ("alread*** in use"). Longer secrets are masked
# wherever they occur. The NetBox plugin refuses shorter token secrets at entry.
WHOLE_TOKEN_BELOW = 16

# The password of any URL: postgresql://user:pw@host, redis://:pw@host, https://u:pw@h.
# A scheme starts a word: tried from inside one too, a long word took quadratic time.
URL_PASSWORD = re.compile(
    r"(?<![a-z0-9+.-])([a-z][a-z0-9+.-]*://[^:/@\s'\"]*:)[^@\s/'\"]+(?=@)", re.IGNORECASE
)
# libpq key/value connection strings and the like: password=…
KEYWORD_PASSWORD = re.compile(r"(?i)(\bpassword\s*=\s*)[^\s&'\",]+")
# Words that mark a query parameter as a secret wherever they occur in its name
# (`token`, `access_token`, `csrfmiddlewaretoken`, `client_secret`, `X-Amz-Signature`),
# and whole names too short to search for inside others (`key`, `sig`, `pwd`).
SECRET_QUERY_WORDS = (
    "token",
    "secret",
    "password",
    "passwd",
    "apikey",
    "api_key",
    "api-key",
    "ticket",
    "csrf",
    "signature",
    "credential",
    "session",
)
SECRET_QUERY_NAMES = ("key", "sig", "pwd", "auth")
# Each such parameter of a URL, a query string or a bare `name=value` in a message: its
# value masked, the name kept. The letters around the word are bounded: unbounded, a long
# run of text without `=` (a blob in a log record) took quadratic time to reject.
# PVE's `PVEAPIToken=user@realm!id=secret` (a header) is left to the backend's and the
# simulator's patterns, which mask the secret and keep the token's id.
QUERY_SECRET = re.compile(
    r"(?i)(?<![^\s?&;'\"])(?!PVEAPIToken=)((?:[^=&;?#\s'\"]{0,40}(?:"
    + "|".join(re.escape(word) for word in SECRET_QUERY_WORDS)
    + r")[^=&;?#\s'\"]{0,40}|"
    + "|".join(SECRET_QUERY_NAMES)
    + r")=)[^&;#\s'\"]+"
)


class Redactor:
    """Rewrites text: each pattern keeps its group 1 and masks the rest of its match;
    each exact secret it was given is masked wherever it occurs, or, when shorter than
    WHOLE_TOKEN_BELOW, wherever it stands as a whole token."""

    def __init__(self, patterns: Iterable[re.Pattern] = (), secrets: Iterable[str] = ()):
        self.patterns: list[re.Pattern] = [URL_PASSWORD, KEYWORD_PASSWORD, QUERY_SECRET]
        self.secrets: list[str] = []
        self._short_secrets: re.Pattern | None = None
        self.add(patterns, secrets)

    def add(self, patterns: Iterable[re.Pattern] = (), secrets: Iterable[str] = ()) -> None:
        self.patterns.extend(p for p in patterns if p not in self.patterns)
        for value in secrets:
            if value and value not in self.secrets:
                self.secrets.append(value)
        # Longest first: a secret that contains another is masked whole.
        self.secrets.sort(key=len, reverse=True)
        short = [value for value in self.secrets if len(value) < WHOLE_TOKEN_BELOW]
        self._short_secrets = (
            re.compile(r"(?<!\w)(?:" + "|".join(re.escape(value) for value in short) + r")(?!\w)")
            if short
            else None
        )

    def __call__(self, text: str) -> str:
        for pattern in self.patterns:
            text = pattern.sub(lambda m: m.group(1) + REDACTED, text)
        for value in self.secrets:
            if len(value) >= WHOLE_TOKEN_BELOW:
                text = text.replace(value, REDACTED)
        if self._short_secrets is not None:
            text = self._short_secrets.sub(REDACTED, text)
        return text

    def data(self, value):
        """A JSON-like structure with every string value scrubbed; keys are kept, so a
        secret that happens to be a word ("proxmox") never rewrites the structure."""
        if isinstance(value, str):
            return self(value)
        if isinstance(value, dict):
            return {key: self.data(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [self.data(item) for item in value]
        return value

    def scrub_record(self, record: logging.LogRecord) -> None:
        """Mask secrets in the message, its arguments, the traceback and the stack."""
        try:
            message = record.getMessage()
        except Exception:
            # A broken format string or an argument whose str() raises: logging reports
            # it when a handler formats the record; logging must not raise here.
            message = None
        if message is not None and self(message) != message:
            # Scrubbing the arguments alone keeps their shape, which some formatters
            # need (uvicorn's access formatter unpacks them) …
            self._scrub_args(record)
            try:
                scrubbed = record.getMessage()
            except Exception:
                scrubbed = None
            if scrubbed is None or self(scrubbed) != scrubbed:
                # … unless the secret only shows once message and arguments are joined.
                record.msg, record.args = self(message), None
        elif message is None:
            # logging reports the broken record with its message and arguments: scrub both.
            if isinstance(record.msg, str):
                record.msg = self(record.msg)
            self._scrub_args(record)
        if record.exc_info:
            # Formatters print exc_text when it is set; the raw exception goes.
            text = record.exc_text or "".join(traceback.format_exception(*record.exc_info))
            record.exc_text, record.exc_info = self(text.rstrip("\n")), None
        elif record.exc_text:
            record.exc_text = self(record.exc_text)
        if record.stack_info:
            record.stack_info = self(record.stack_info)

    def _scrub_args(self, record: logging.LogRecord) -> None:
        if isinstance(record.args, dict):
            record.args = {k: self._scrub_arg(v) for k, v in record.args.items()}
        elif record.args:
            record.args = tuple(self._scrub_arg(a) for a in record.args)

    def _scrub_arg(self, value: object) -> object:
        if isinstance(value, str):
            return self(value)
        if value is None or isinstance(value, int | float):
            return value  # keeps %d and %.2f working
        try:
            text = str(value)
        except Exception:
            return value
        cleaned = self(text)
        return value if cleaned == text else cleaned


_DEFAULT = Redactor()
_process_redactor: Redactor | None = None
_previous: tuple | None = None


def install(patterns: Iterable[re.Pattern] = (), secrets: Iterable[str] = ()) -> Redactor:
    """Redact every log record and uncaught traceback of this process from now on.

    Calls add to one process-wide redactor, so each component (a CLI, a library
    it embeds) contributes its patterns and the secrets it knows.
    """
    global _process_redactor, _previous
    if _process_redactor is None:
        redactor = Redactor()
        previous_factory = logging.getLogRecordFactory()

        def factory(*args, **kwargs) -> logging.LogRecord:
            record = previous_factory(*args, **kwargs)
            redactor.scrub_record(record)
            return record

        def excepthook(exc_type, exc, tb) -> None:
            text = "".join(traceback.format_exception(exc_type, exc, tb))
            sys.stderr.write(redactor(text))

        def thread_excepthook(hook_args) -> None:
            if hook_args.exc_type is SystemExit:
                return
            name = hook_args.thread.name if hook_args.thread else "?"
            text = "".join(
                traceback.format_exception(
                    hook_args.exc_type, hook_args.exc_value, hook_args.exc_traceback
                )
            )
            sys.stderr.write(f"Exception in thread {name}:\n{redactor(text)}")

        _previous = (previous_factory, sys.excepthook, threading.excepthook)
        logging.setLogRecordFactory(factory)
        sys.excepthook = excepthook
        threading.excepthook = thread_excepthook
        _process_redactor = redactor
    _process_redactor.add(patterns, secrets)
    return _process_redactor


def uninstall() -> None:
    """Back to the factory and hooks found by the first `install()` (for tests)."""
    global _process_redactor, _previous
    if _previous is not None:
        logging.setLogRecordFactory(_previous[0])
        sys.excepthook, threading.excepthook = _previous[1], _previous[2]
    _process_redactor = _previous = None


def redact(text: str) -> str:
    """`text` scrubbed by the process's redactor: for what a process writes outside its
    logs (reports, error messages stored in NetBox, API answers)."""
    return (_process_redactor or _DEFAULT)(text)


def redact_url(url: str) -> str:
    """A URL (or libpq connection string) fit to print: its password and the values of
    its secret query parameters masked."""
    return _DEFAULT(url)


# As a shell reports a command Ctrl-C stopped (128 + SIGINT) and the writer of a pipe its
# reader closed, `yes | head -1`'s `yes` (128 + SIGPIPE).
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141


def run_console(prog: str, main: Callable[[], int | None]) -> int | None:
    """Run a console command's `main`: its exit code, except when the user ends it.

    A closed stdout (`proxbox status --json | head -1`) ends it quietly with
    EXIT_BROKEN_PIPE; Ctrl-C prints `<prog>: interrupted` on stderr and gives
    EXIT_INTERRUPTED. Neither prints a traceback; `finally` blocks have run.
    """
    try:
        code = main()
        # Output still buffered would otherwise meet the closed pipe at exit, outside here.
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        _discard_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        with contextlib.suppress(OSError):
            print(f"{prog}: interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED


def _discard_stdout() -> None:
    """What stdout still buffers goes nowhere: the interpreter flushes it at exit."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        finally:
            os.close(devnull)
