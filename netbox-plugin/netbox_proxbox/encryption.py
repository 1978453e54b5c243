"""Encryption at rest for endpoint API token secrets.

``PLUGINS_CONFIG["netbox_proxbox"]["encryption_key"]`` is one Fernet key, or a
list of Fernet keys, newest first, while keys are being rotated: secrets are
encrypted with the newest and decrypted with whichever key matches
(``MultiFernet``). ``manage.py proxbox_rotate_keys`` re-encrypts every stored
secret with the newest key, after which the older keys can be dropped. Only
ciphertext is ever stored; the plaintext exists in memory while an authorised
caller uses it.
"""

from __future__ import annotations

from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

SETTING = 'PLUGINS_CONFIG["netbox_proxbox"]["encryption_key"]'


class SecretDecryptionError(Exception):
    """The stored ciphertext cannot be decrypted with any configured key (a key was dropped or lost)."""


def _configured_keys() -> tuple[str, ...]:
    configured = settings.PLUGINS_CONFIG.get("netbox_proxbox", {}).get("encryption_key")
    keys = (configured,) if isinstance(configured, str) else tuple(configured or ())
    if not keys or not all(keys):
        raise ImproperlyConfigured(
            f"{SETTING} is not set: configure a Fernet key "
            "(cryptography.fernet.Fernet.generate_key()), or a list of keys newest first, "
            "to store Proxmox token secrets."
        )
    return keys


@lru_cache(maxsize=4)
def _fernets_for(keys: tuple[str, ...]) -> tuple[Fernet, ...]:
    fernets = []
    for position, key in enumerate(keys):
        try:
            fernets.append(Fernet(key))
        except (ValueError, TypeError) as exc:
            where = "" if len(keys) == 1 else f" (entry {position}, counting from 0)"
            raise ImproperlyConfigured(
                f"{SETTING}{where} is not a valid Fernet key (32 url-safe base64-encoded bytes)."
            ) from exc
    return tuple(fernets)


def fernet() -> MultiFernet:
    """Encrypts with the newest configured key, decrypts with any of them."""
    return MultiFernet(_fernets_for(_configured_keys()))


def encrypt_secret(plaintext: str) -> str:
    return fernet().encrypt(plaintext.encode()).decode()


def decrypt_secret(ciphertext: str) -> str:
    try:
        return fernet().decrypt(ciphertext.encode()).decode()
    except InvalidToken as exc:
        raise SecretDecryptionError(
            "The stored token secret cannot be decrypted with any configured encryption key."
        ) from exc


def encrypted_with_newest_key(ciphertext: str) -> bool:
    try:
        _fernets_for(_configured_keys())[0].decrypt(ciphertext.encode())
    except InvalidToken:
        return False
    return True


def reencrypt_with_newest_key(ciphertext: str) -> str:
    """The same secret encrypted with the newest key (SecretDecryptionError if no key opens it)."""
    try:
        return fernet().rotate(ciphertext.encode()).decode()
    except InvalidToken as exc:
        raise SecretDecryptionError(
            "The stored token secret cannot be decrypted with any configured encryption key."
        ) from exc
