"""Async NetBox REST client: v1 (`Token …`) and v2 (`Bearer nbt_…`) tokens, paginated
bulk reads, and bulk writes whose per-object failures are isolated.

NetBox rolls a whole bulk request back when one object fails and names the failing
entries (by index for creates, by id for updates and deletes).  `bulk_*` record those
as failures and resend the rest, so one bad object never takes its batch down and
every success is one NetBox confirmed.
"""

from __future__ import annotations

import asyncio
import html
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from proxbox_backend.clients.http import ResilientTransport, RetryPolicy, connection_limits
from proxbox_backend.clients.tls import verify_setting
from proxbox_backend.secrets import Secret

PAGE_SIZE = 1000  # NetBox's default MAX_PAGE_SIZE
# Chunks of one bulk write go out concurrently (bounded by the client's semaphore), so
# NetBox's workers share a large write; each chunk is one transaction on NetBox's side.
WRITE_CHUNK = 100
# Bounded resends after isolating failures; each round removes at least one entry.
MAX_ISOLATION_ROUNDS = 5


def authorization_header(token: Secret) -> str:
    value = token.reveal()
    return f"Bearer {value}" if value.startswith("nbt_") else f"Token {value}"


class NetBoxError(Exception):
    def __init__(self, status: int, method: str, path: str, body: Any):
        self.status, self.method, self.path, self.body = status, method, path, body
        super().__init__(f"NetBox {method} {path} → {status}: {describe_error(body)}")


def describe_error(body: Any) -> str:
    """A one-line reason from NetBox's error bodies (detail, field errors, bulk errors,
    its API's server-error object, or an HTML page from NetBox or a proxy in front)."""
    if isinstance(body, dict):
        if body.keys() >= SERVER_ERROR_KEYS:
            return f"{body['exception']}: {body['error']}" if body["error"] else body["exception"]
        if "errors" in body and isinstance(body["errors"], list):
            return "; ".join(describe_error(e.get("errors", e)) for e in body["errors"])
        if "detail" in body and len(body) == 1:
            return str(body["detail"])
        parts = []
        for key, value in body.items():
            text = ", ".join(map(str, value)) if isinstance(value, list) else describe_error(value)
            parts.append(f"{key}: {text}")
        return "; ".join(parts)
    if isinstance(body, list):
        return "; ".join(describe_error(b) for b in body if b)
    if isinstance(body, str) and HTML_START.match(body):
        return _describe_page(body)
    return str(body)


# What NetBox's REST API answers an unhandled exception with
# (utilities.error_handlers.handle_rest_api_exception).
SERVER_ERROR_KEYS = {"error", "exception", "netbox_version"}
HTML_START = re.compile(r"\s*<(!doctype\s+html|html|head|body)\b", re.IGNORECASE)
_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)
# NetBox's 500.html shows the exception and its message first in a <pre> block.
_PRE = re.compile(r"<pre[^>]*>(.*?)(?:Python version|</pre>)", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"<[^>]+>")
_MAX_PAGE_REASON = 200


def _describe_page(page: str) -> str:
    """An HTML error page as its title and exception, not its markup (one log line)."""
    parts = [match.group(1) for match in (_TITLE.search(page), _PRE.search(page)) if match]
    text = " ".join(html.unescape(_TAG.sub(" ", " — ".join(parts or [page]))).split())
    summary = f"an HTML page of {len(page)} bytes"
    return f"{summary}: {text[:_MAX_PAGE_REASON]}" if text else summary


@dataclass
class BulkResult:
    """Per-entry outcome of a bulk write, keyed by the caller's position in its input."""

    succeeded: dict[int, Any] = field(default_factory=dict)  # position → NetBox's object (or id)
    failed: dict[int, str] = field(default_factory=dict)  # position → reason


class NetBoxClient:
    def __init__(
        self,
        base_url: str,
        token: Secret,
        *,
        verify_tls: bool = True,
        ca_bundle: str | None = None,
        timeout: float = 60.0,
        retry: RetryPolicy | None = None,
        concurrency: int = 4,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep=None,
    ):
        self.base_url = base_url.rstrip("/")
        if not self.base_url.endswith("/api"):
            self.base_url += "/api"
        client = httpx.AsyncClient(
            base_url=self.base_url,
            headers={
                "Authorization": authorization_header(token),
                "Accept": "application/json",
                "Content-Type": "application/json",
            },
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            verify=verify_setting(verify_tls, ca_bundle),
            transport=transport,
            limits=connection_limits(concurrency),
        )
        extra = {"sleep": sleep} if sleep is not None else {}
        self.transport = ResilientTransport(
            client,
            retry=retry,
            concurrency=concurrency,
            name="netbox",
            tls_hint="Give NetBox's CA bundle (--netbox-ca-bundle or PROXBOX_NETBOX_CA_BUNDLE).",
            **extra,
        )

    def __repr__(self) -> str:
        return f"NetBoxClient({self.base_url!r})"

    @property
    def stats(self):
        return self.transport.stats

    async def request(self, method: str, path: str, **kwargs) -> httpx.Response:
        return await self.transport.request(method, path, **kwargs)

    async def call(self, method: str, path: str, *, expect: Iterable[int] = (), **kwargs) -> Any:
        """The decoded body of a successful answer; NetBoxError otherwise."""
        response = await self.request(method, path, **kwargs)
        body = response_body(response)
        if response.is_success or response.status_code in set(expect):
            return body
        raise NetBoxError(response.status_code, method.upper(), path, body)

    async def get(self, path: str, **params) -> Any:
        return await self.call("GET", path, params=params or None)

    async def list(self, path: str, params: dict | None = None) -> list[dict]:
        """Every object matching the filters, page by page."""
        query = {**(params or {}), "limit": PAGE_SIZE, "offset": 0}
        results: list[dict] = []
        url: str | None = path
        while url is not None:
            page = await self.call("GET", url, params=query)
            results.extend(page["results"])
            if not page.get("next"):
                break
            query["offset"] += PAGE_SIZE
        return results

    async def list_by_ids(
        self, path: str, key: str, ids: Sequence[int], params: dict | None = None, chunk: int = 100
    ) -> list[dict]:
        """A filtered list over many parent ids, a bounded URL at a time (concurrently)."""
        unique = sorted(set(ids))
        pages = await asyncio.gather(
            *(
                self.list(path, {**(params or {}), key: unique[start : start + chunk]})
                for start in range(0, len(unique), chunk)
            )
        )
        return [obj for page in pages for obj in page]

    # -- bulk writes ----------------------------------------------------------------------

    async def bulk_create(self, path: str, items: Sequence[dict]) -> BulkResult:
        return await self._bulk("POST", path, items, by="index")

    async def bulk_update(self, path: str, items: Sequence[dict]) -> BulkResult:
        """PATCH; every item carries its object's `id`."""
        return await self._bulk("PATCH", path, items, by="id")

    async def bulk_delete(self, path: str, ids: Sequence[int]) -> BulkResult:
        return await self._bulk("DELETE", path, [{"id": i} for i in ids], by="id")

    async def _bulk(self, method: str, path: str, items: Sequence[dict], by: str) -> BulkResult:
        result = BulkResult()
        chunks = [
            list(range(start, min(start + WRITE_CHUNK, len(items))))
            for start in range(0, len(items), WRITE_CHUNK)
        ]
        await asyncio.gather(
            *(self._bulk_chunk(method, path, items, chunk, by, result) for chunk in chunks)
        )
        return result

    async def _bulk_chunk(self, method, path, items, positions, by, result: BulkResult) -> None:
        pending = list(positions)
        for _round in range(MAX_ISOLATION_ROUNDS):
            if not pending:
                return
            payload = [items[p] for p in pending]
            response = await self.request(method, path, json=payload)
            body = response_body(response)
            if response.is_success:
                if method == "DELETE":
                    for p in pending:
                        result.succeeded[p] = items[p]["id"]
                else:
                    for p, obj in zip(pending, body, strict=True):
                        result.succeeded[p] = obj
                return
            blamed = _blamed_positions(body, pending, items, by)
            if not blamed:
                # A failure NetBox did not attribute to entries (auth, permissions, server
                # error): every entry of the batch failed for the same reason.
                reason = f"HTTP {response.status_code}: {describe_error(body)}"
                for p in pending:
                    result.failed[p] = reason
                return
            for p, reason in blamed.items():
                result.failed[p] = f"HTTP {response.status_code}: {reason}"
            pending = [p for p in pending if p not in blamed]
        for p in pending:
            result.failed[p] = "NetBox kept rejecting the batch; gave up after isolating failures"

    async def aclose(self) -> None:
        await self.transport.aclose()

    async def __aenter__(self) -> NetBoxClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()


def response_body(response: httpx.Response) -> Any:
    """The answer's JSON, its text when it is not JSON, None when it is empty."""
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        return response.text


def _blamed_positions(body, pending: list[int], items, by: str) -> dict[int, str]:
    """Map NetBox's per-entry bulk errors back to the caller's positions."""
    if not isinstance(body, dict) or not isinstance(body.get("errors"), list):
        return {}
    by_id = {items[p].get("id"): p for p in pending} if by == "id" else {}
    blamed: dict[int, str] = {}
    for entry in body["errors"]:
        if not isinstance(entry, dict):
            continue
        reason = describe_error(entry.get("errors"))
        if "index" in entry and isinstance(entry["index"], int) and entry["index"] < len(pending):
            blamed[pending[entry["index"]]] = reason
        elif "id" in entry and entry["id"] in by_id:
            blamed[by_id[entry["id"]]] = reason
    return blamed
