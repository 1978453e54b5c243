"""HTTP adapter for authentication: cookies, headers, CSRF."""

from __future__ import annotations

from starlette.requests import Request

from proxmox_simulator.domain import access_service
from proxmox_simulator.domain.access import Principal
from proxmox_simulator.domain.errors import AuthenticationFailed, TicketRejected

COOKIE = "PVEAuthCookie"
CSRF_HEADER = "csrfpreventiontoken"


async def authenticate(rt, request: Request, method: str) -> Principal:
    """The caller, or ``TicketRejected`` (PVE's authentication step, before any method)."""
    try:
        return await _authenticate(rt, request, method)
    except AuthenticationFailed as exc:
        if isinstance(exc, TicketRejected):
            raise
        raise TicketRejected(exc.message) from None


async def _authenticate(rt, request: Request, method: str) -> Principal:
    authorization = request.headers.get("authorization")
    if authorization and authorization.startswith("PVEAPIToken"):
        # Tokens are not a browser credential, so CSRF does not apply.
        return await access_service.authenticate_token(rt, authorization)
    ticket = request.cookies.get(COOKIE)
    if not ticket:
        raise AuthenticationFailed("No ticket")
    userid = rt.tickets.verify(ticket)
    if userid.startswith(access_service.OLD_TFA_PREFIX):
        # An old-format half ticket opens only the old second step, POST /access/tfa.
        if method != "POST" or not request.url.path.endswith("/access/tfa"):
            raise AuthenticationFailed()
        userid = userid.removeprefix(access_service.OLD_TFA_PREFIX)
    if await access_service.active_state(rt, userid) is None:
        raise AuthenticationFailed("user account disabled or expired")
    if method != "GET" and not rt.tickets.verify_csrf(request.headers.get(CSRF_HEADER), userid):
        raise AuthenticationFailed("Permission denied - invalid csrf token")
    return Principal(userid, via_ticket=True)
