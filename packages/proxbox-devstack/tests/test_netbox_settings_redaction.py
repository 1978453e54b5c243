"""The NetBox process masks every configured secret, each key of a rotation list included."""

from __future__ import annotations

import proxbox_redaction
from proxbox_devstack.netbox_settings import install_redaction

NEW_KEY = "bmV3LWtleS0xMjM0NTY3ODkwMTIzNDU2Nzg5MDEyMzQ1Ng=="
OLD_KEY = "b2xkLWtleS0xMjM0NTY3ODkwMTIzNDU2Nzg5MDEyMzQ1Ng=="


def _configuration(encryption_key) -> dict:
    return {
        "SECRET_KEY": "s" * 50,
        "API_TOKEN_PEPPERS": {1: "p" * 50},
        "PLUGINS_CONFIG": {
            "netbox_proxbox": {"encryption_key": encryption_key, "backend_token": "b" * 40}
        },
        "DATABASES": {"default": {"PASSWORD": "dbpass-0123456789"}},
        "REDIS": {"tasks": {"URL": "redis://:redispass-0123456789@127.0.0.1:6379/2"}},
    }


def test_each_key_of_a_rotation_list_is_masked():
    try:
        install_redaction(_configuration([NEW_KEY, OLD_KEY]))
        text = proxbox_redaction.redact(f"new={NEW_KEY} old={OLD_KEY} db=dbpass-0123456789")
    finally:
        proxbox_redaction.uninstall()
    assert NEW_KEY not in text and OLD_KEY not in text and "dbpass" not in text


def test_a_single_key_is_masked():
    try:
        install_redaction(_configuration(NEW_KEY))
        text = proxbox_redaction.redact(f"key={NEW_KEY}")
    finally:
        proxbox_redaction.uninstall()
    assert NEW_KEY not in text
