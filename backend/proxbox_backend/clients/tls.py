"""TLS verification settings shared by both clients: on by default, optional CA bundle."""

from __future__ import annotations

import functools
import os
import ssl
from pathlib import Path

import httpx


def verify_setting(
    verify_tls: bool = True, ca_bundle: str | Path | None = None
) -> ssl.SSLContext | bool:
    if not verify_tls:
        return False
    if not ca_bundle:
        return _default_context()
    try:
        stat = os.stat(ca_bundle)
    except OSError:
        # Let ssl name the unreadable bundle, as it would without the cache.
        return ssl.create_default_context(cafile=str(ca_bundle))
    # Keyed by the file's identity too: a bundle rotated in place is read again.
    return _bundle_context(str(ca_bundle), stat.st_mtime_ns, stat.st_size)


# One context per trust store for the process: every client (a watcher makes several per
# poll) would otherwise parse the CA bundle again, tens of milliseconds of CPU each. A
# context only read from is safe to share between clients and threads.


@functools.cache
def _default_context() -> ssl.SSLContext:
    # What `verify=True` gives: certifi's bundle, or SSL_CERT_FILE / SSL_CERT_DIR when set.
    return httpx.create_ssl_context()


@functools.lru_cache(maxsize=32)
def _bundle_context(path: str, _mtime_ns: int, _size: int) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=path)
