"""Failures of ownership operations, each mapped to one HTTP status by the API layer."""

from __future__ import annotations

RETRY_HINT = "Retry after the inventory state has settled."


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
