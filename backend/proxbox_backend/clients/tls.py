"""TLS verification settings shared by both clients: on by default, optional CA bundle."""

from __future__ import annotations

import ssl
from pathlib import Path


def verify_setting(
    verify_tls: bool = True, ca_bundle: str | Path | None = None
) -> ssl.SSLContext | bool:
    if not verify_tls:
        return False
    if ca_bundle:
        return ssl.create_default_context(cafile=str(ca_bundle))
    return True
