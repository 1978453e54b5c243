"""Domain errors carry the HTTP status and message PVE would answer with.

The API adapter renders them; domain code never imports the web framework.
"""

from __future__ import annotations


class PveError(Exception):
    status = 500

    def __init__(self, message: str, *, status: int | None = None, errors: dict | None = None):
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status
        self.errors = errors


class ParameterError(PveError):
    """400 with per-field messages, like PVE's JSONSchema verification."""

    status = 400

    def __init__(self, errors: dict[str, str]):
        super().__init__("Parameter verification failed.", errors=errors)


class AuthenticationFailed(PveError):
    status = 401

    def __init__(self, message: str = "authentication failure"):
        super().__init__(message)


class TicketRejected(AuthenticationFailed):
    """The request's credentials were refused before any API method ran.

    PVE's HTTP server checks the ticket, token and CSRF header in its own
    authentication step and answers that refusal itself, without the response
    formatter (so no ``data`` envelope, and a real 401 even for ``/api2/extjs``)."""


class PermissionDenied(PveError):
    status = 403

    def __init__(self, message: str = "Permission check failed"):
        super().__init__(message)


class NotImplementedByHandler(PveError):
    status = 501


class Conflict(PveError):
    """A stale writer lost an optimistic-version race, or a lock is held."""

    status = 500


class StaleWrite(Conflict):
    """An optimistic version check failed: someone committed in between."""
