"""Failures of ownership operations, each mapped to one HTTP status by the API layer."""

from __future__ import annotations

from contextlib import contextmanager

from django.db import DatabaseError
from rest_framework.exceptions import APIException
from utilities.exceptions import AbortRequest

RETRY_HINT = "Retry after the inventory state has settled."

# PostgreSQL SQLSTATEs that mean "another transaction got in the way": retryable.
SERIALIZATION_FAILURE = "40001"
DEADLOCK_DETECTED = "40P01"
LOCK_NOT_AVAILABLE = "55P03"
RETRYABLE_STATES = frozenset({SERIALIZATION_FAILURE, DEADLOCK_DETECTED, LOCK_NOT_AVAILABLE})


def sqlstate(exc: BaseException) -> str | None:
    cause = exc.__cause__
    return getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)


def is_retryable(exc: BaseException) -> bool:
    """A deadlock, serialization failure or lock timeout reported by PostgreSQL."""
    return isinstance(exc, DatabaseError) and sqlstate(exc) in RETRYABLE_STATES


class ClaimError(Exception):
    status_code = 400
    code = "invalid"

    def __init__(self, detail: str, *, code: str | None = None, field: str | None = None):
        super().__init__(detail)
        self.detail = detail
        self.field = field
        if code:
            self.code = code

    def as_response_data(self) -> dict:
        if self.field:
            return {self.field: [self.detail]}
        return {"detail": self.detail, "code": self.code}


class ClaimInvalid(ClaimError):
    status_code = 400


class ClaimForbidden(ClaimError):
    status_code = 403
    code = "permission_denied"


class ClaimNotFound(ClaimError):
    status_code = 404
    code = "not_found"


class ClaimConflict(ClaimError):
    """The inventory state forbids the claim; the detail says what an operator must review."""

    status_code = 409
    code = "conflict"


class InventoryInFlux(ClaimConflict):
    """A concurrent deletion or a database serialization conflict interrupted the claim."""

    code = "retry"

    def __init__(self, detail: str):
        super().__init__(f"{detail} {RETRY_HINT}")


class ConcurrentInventoryChange(APIException, AbortRequest):
    """An ordinary writer (REST, UI, deletion signal) was hit by a concurrent inventory change.

    REST answers 409 ``{"detail": …, "code": "retry"}`` (an APIException, also from inside
    NetBox's own views such as the native cluster DELETE); NetBox's UI views show the message
    (an AbortRequest).
    """

    status_code = 409
    default_code = "retry"

    def __init__(self, detail: str):
        message = f"{detail} {RETRY_HINT}"
        APIException.__init__(self, detail={"detail": message, "code": "retry"})
        AbortRequest.__init__(self, message)


@contextmanager
def concurrency_conflicts_as_retry(what: str):
    """Turn deadlocks and serialization failures inside the block into ConcurrentInventoryChange."""
    try:
        yield
    except DatabaseError as exc:
        if is_retryable(exc):
            raise ConcurrentInventoryChange(
                f"{what} collided with a concurrent inventory change."
            ) from exc
        raise
