"""Encryption at rest for endpoint API token secrets.

The key is a Fernet key configured in
``PLUGINS_CONFIG["netbox_proxbox"]["encryption_key"]``. Only ciphertext is ever
stored; the plaintext exists in memory while an authorised caller uses it.
"""

from __future__ import annotations

from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

SETTING = 'PLUGINS_CONFIG["netbox_proxbox"]["encryption_key"]'


class SecretDecryptionError(Exception):
    """The stored ciphertext cannot be decrypted with the configured key (key rotated or lost)."""


def _configured_key() -> str:
    key = settings.PLUGINS_CONFIG.get("netbox_proxbox", {}).get("encryption_key")
    if not key:
        raise ImproperlyConfigured(
            f"{SETTING} is not set: configure a Fernet key "
            "(cryptography.fernet.Fernet.generate_key()) to store Proxmox token secrets."
        )
    return key


@lru_cache(maxsize=4)
def _fernet_for(key: str) -> Fernet:
    try:
        return Fernet(key)
    except (ValueError, TypeError) as exc:
        raise ImproperlyConfigured(
            f"{SETTING} is not a valid Fernet key (32 url-safe base64-encoded bytes)."
        ) from exc


def fernet() -> Fernet:
    return _fernet_for(_configured_key())


def encrypt_secret(plaintext: str) -> str:
    return fernet().encrypt(plaintext.encode()).decode()


def decrypt_secret(ciphertext: str) -> str:
    try:
        return fernet().decrypt(ciphertext.encode()).decode()
    except InvalidToken as exc:
        raise SecretDecryptionError(
            "The stored token secret cannot be decrypted with the configured encryption key."
        ) from exc
