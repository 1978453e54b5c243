"""Proxmox response envelopes, headers and error bodies.

``/api2/json`` answers ``{"data": ...}`` with the real HTTP status and PVE's
message as reason phrase (and, from PVE 8.4, as ``message`` in the body);
``/api2/extjs`` answers a method's errors with 200, ``success`` and ``message``
in the body, as the ExtJS GUI expects.  A refused ticket is answered before
either formatter runs: a bare 401 in every format.
"""

from __future__ import annotations

import json
from email.utils import formatdate

from starlette.responses import Response

from proxmox_simulator.domain.errors import NotImplementedByHandler, PveError, TicketRejected

REASON_HEADER = "x-pve-reason"


class RawJSON:
    """Already-serialized JSON (e.g. built by PostgreSQL) to embed without re-encoding."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


class WithExtra:
    """Data plus top-level keys beside ``data`` (e.g. ``changes`` of /nodes/{node}/network)."""

    __slots__ = ("data", "extra")

    def __init__(self, data, extra: dict) -> None:
        self.data = data
        self.extra = extra


class WithTotal(WithExtra):
    """Data plus PVE's top-level ``total`` (task logs, paged lists)."""

    __slots__ = ()

    def __init__(self, data, total: int) -> None:
        super().__init__(data, {"total": total})

    @property
    def total(self) -> int:
        return self.extra["total"]


def _headers(extra: dict | None = None) -> dict:
    headers = {
        "Cache-Control": "max-age=0",
        "Pragma": "no-cache",
        "Expires": formatdate(usegmt=True),
        "Server": "pve-api-daemon/3.0",
    }
    if extra:
        headers.update(extra)
    return headers


def _encode(data) -> bytes:
    if isinstance(data, RawJSON):
        return data.text.encode()
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()


def success(data, fmt: str, *, extra: dict | None = None, headers: dict | None = None) -> Response:
    body = b'{"data":' + _encode(data)
    if fmt == "extjs":
        body += b',"success":1'
    for key, value in (extra or {}).items():
        body += b',"' + key.encode() + b'":' + _encode(value)
    body += b"}"
    return Response(
        body, 200, headers=_headers(headers), media_type="application/json;charset=UTF-8"
    )


def download(data: bytes, content_type: str) -> Response:
    """A download endpoint's bytes, streamed as PVE does, without a JSON envelope."""
    return Response(data, 200, headers=_headers(), media_type=content_type)


def _body_message(exc: PveError) -> str:
    """The message as PVE's body carries it: its handlers die with newline-terminated
    messages, and the body keeps the newline the status line drops.  "Method … not
    implemented" is the exception: the HTTP server builds it without one."""
    if isinstance(exc, NotImplementedByHandler) or exc.message.endswith("\n"):
        return exc.message
    return exc.message + "\n"


def error(exc: PveError, fmt: str, *, message_in_body: bool = False) -> Response:
    """A refusal as the served release answers it.

    ``message_in_body``: the release writes the message into the body as well as the
    status line (PVE 8.4 on, see ``version_adapters``).  A refused ticket never
    reaches the response formatter, so it has no envelope in any format.
    """
    message = exc.message.rstrip("\n")
    # The reason phrase travels in a private header that our server protocol
    # turns into the status line (see server.py) and strips before sending.
    reason = message.splitlines()[0][:200] if message else ""
    # Header values are latin-1; a message quoting the caller's input may not be, and
    # the status line keeps printable ASCII only anyway (server.py).
    reason = reason.encode("ascii", "replace").decode("ascii")
    if isinstance(exc, TicketRejected):
        body = _body_message(exc).encode() if message_in_body else b""
        return Response(body, exc.status, headers=_headers({REASON_HEADER: reason}))
    payload: dict = {"data": None}
    if exc.errors:
        payload["errors"] = exc.errors
    if fmt == "extjs":
        payload.update({"success": 0, "message": _body_message(exc), "status": exc.status})
        return Response(
            _encode(payload), 200, headers=_headers(), media_type="application/json;charset=UTF-8"
        )
    if message_in_body:
        payload["message"] = _body_message(exc)
    return Response(
        _encode(payload),
        exc.status,
        headers=_headers({REASON_HEADER: reason}),
        media_type="application/json;charset=UTF-8",
    )
