"""One resilient request loop for both APIs: timeouts, bounded retries, bounded concurrency.

Which failures are retried depends on whether repeating the request is safe:
idempotent methods (GET, PUT, PATCH with absolute values, DELETE) retry on any
5xx, 409, 429 and transport error; POST only when the server cannot have acted
on it (connection never established, 429, 503) or said "conflict, retry later"
(409), so a create is never silently doubled by a retry.
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import httpx

log = logging.getLogger("proxbox_backend.http")

# A server closes a keep-alive connection it has not seen a request on for a while
# (gunicorn: 2 s by default, pveproxy and nginx longer). A request written on a connection
# the server is closing is lost: a POST cannot be retried, so the sync failed with
# "ReadError" after a read phase of a few seconds. Connections idle this long are not
# reused; a burst of requests (milliseconds apart) still shares them.
KEEPALIVE_EXPIRY = 1.0


def connection_limits(concurrency: int) -> httpx.Limits:
    """At most `concurrency` connections, kept open for reuse only briefly."""
    return httpx.Limits(
        max_connections=concurrency,
        max_keepalive_connections=concurrency,
        keepalive_expiry=KEEPALIVE_EXPIRY,
    )


IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "PATCH", "DELETE"})
RETRY_ANY_METHOD = frozenset({409, 429, 503})
# A server that does not implement the method or speak the HTTP version will not later:
# Proxmox answers 501 for an API path an older release lacks.
NEVER_RETRIED = frozenset({501, 505})


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 4  # total tries, the first one included
    backoff: float = 0.5  # seconds before the first retry; doubles each time
    max_backoff: float = 10.0
    jitter: float = 0.2  # fraction of the delay added at random, so clients don't stampede

    def delay(self, retry: int, retry_after: float | None = None) -> float:
        base = min(self.max_backoff, self.backoff * (2 ** (retry - 1)))
        if retry_after is not None:
            base = min(self.max_backoff, max(base, retry_after))
        return base + base * self.jitter * random.random()


@dataclass
class RequestStats:
    """What a client sent, by method: the benchmark's and the CLI's view of the traffic."""

    by_method: Counter = field(default_factory=Counter)
    retries: int = 0

    @property
    def total(self) -> int:
        return sum(self.by_method.values())

    @property
    def writes(self) -> int:
        return sum(n for m, n in self.by_method.items() if m not in ("GET", "HEAD", "OPTIONS"))

    def as_dict(self) -> dict:
        return {
            "total": self.total,
            "writes": self.writes,
            "retries": self.retries,
            "by_method": dict(self.by_method),
        }


class TransportError(Exception):
    """The request failed after every allowed attempt without an HTTP answer."""


class CertificateNotTrusted(TransportError):
    """The server's TLS certificate failed verification: no retry can change that."""


def _certificate_failure(exc: BaseException) -> ssl.SSLCertVerificationError | None:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, ssl.SSLCertVerificationError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _retriable_status(method: str, status: int) -> bool:
    if status in RETRY_ANY_METHOD:
        return True
    return method in IDEMPOTENT and status >= 500 and status not in NEVER_RETRIED


def _retriable_exception(method: str, exc: httpx.TransportError) -> bool:
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout):
        return True  # nothing reached the server
    return method in IDEMPOTENT


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


class ResilientTransport:
    """An `httpx.AsyncClient` behind a semaphore and the retry policy above."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        retry: RetryPolicy | None = None,
        concurrency: int = 8,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        name: str = "http",
        tls_hint: str = "",
    ):
        self.client = client
        # Paths are joined to the base as text: httpx would parse the base URL again for
        # every request (a third of its own cost per request, seen in a profile).
        self._base = str(client.base_url).rstrip("/")
        self.retry = retry or RetryPolicy()
        self.semaphore = asyncio.Semaphore(concurrency)
        self.stats = RequestStats()
        self._sleep = sleep
        self.name = name
        # What to do about an untrusted certificate, in the terms of this client's settings.
        self.tls_hint = tls_hint

    async def request(
        self,
        method: str,
        url: str,
        *,
        should_retry: Callable[[httpx.Response], bool] | None = None,
        **kwargs,
    ) -> httpx.Response:
        """`should_retry` replaces the status rule for answers whose meaning the caller
        knows better (e.g. a 409 that is a final verdict rather than a race)."""
        method = method.upper()
        attempt = 0
        while True:
            attempt += 1
            try:
                async with self.semaphore:
                    self.stats.by_method[method] += 1
                    response = await self.client.request(method, self._absolute(url), **kwargs)
            except httpx.TransportError as exc:
                if failure := _certificate_failure(exc):
                    reason = failure.verify_message or failure.reason or str(failure)
                    raise CertificateNotTrusted(
                        f"{self.name}: the TLS certificate of {self.client.base_url.join(url).host} is not "
                        f"trusted ({reason}). {self.tls_hint}".rstrip()
                    ) from None
                if attempt >= self.retry.attempts or not _retriable_exception(method, exc):
                    raise TransportError(
                        f"{self.name}: {method} {url} failed after {attempt} attempt(s): "
                        f"{type(exc).__name__}: {exc}"
                    ) from exc
                delay = self.retry.delay(attempt)
                log.warning(
                    "%s: %s %s: %s; retry in %.2fs",
                    self.name,
                    method,
                    url,
                    type(exc).__name__,
                    delay,
                )
            else:
                retriable = (
                    should_retry(response)
                    if should_retry is not None
                    else _retriable_status(method, response.status_code)
                )
                if attempt >= self.retry.attempts or not retriable:
                    return response
                delay = self.retry.delay(attempt, _retry_after(response))
                log.warning(
                    "%s: %s %s answered %s; retry in %.2fs",
                    self.name,
                    method,
                    url,
                    response.status_code,
                    delay,
                )
            self.stats.retries += 1
            await self._sleep(delay)

    def _absolute(self, url: str) -> str:
        """`url` under the client's base URL, as httpx joins them (the base's path, then
        the path without its leading slash); an absolute URL as it is."""
        return f"{self._base}/{url.lstrip('/')}" if self._base and "://" not in url else url

    async def aclose(self) -> None:
        await self.client.aclose()
