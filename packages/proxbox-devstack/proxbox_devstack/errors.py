"""The one exception the CLI turns into a single line and a non-zero exit code."""

from __future__ import annotations


class StackError(Exception):
    """A problem the user can fix: the message says what is wrong and what to change."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


# Exit codes, so scripts can tell the failure classes apart.
EXIT_FAILURE = 1
EXIT_PORT_IN_USE = 3
EXIT_SERVICE_UNREACHABLE = 4
EXIT_DATA_DIR = 5
EXIT_PYTHON_VERSION = 6
EXIT_NOT_RUNNING = 7
