"""Secrets generated once into the data directory and never printed again."""

from __future__ import annotations

import base64
import json
import os
import secrets
from pathlib import Path

SECRETS_FILE = "secrets.json"


def _new_secrets() -> dict[str, str]:
    return {
        "netbox_secret_key": secrets.token_urlsafe(60),
        # NetBox requires peppers of at least 50 characters for v2 API tokens.
        "netbox_api_token_pepper": secrets.token_urlsafe(60),
        # A Fernet key: 32 url-safe base64-encoded bytes.
        "proxbox_encryption_key": base64.urlsafe_b64encode(os.urandom(32)).decode("ascii"),
        # What NetBox's "Sync now" presents to the sync backend (PROXBOX_BACKEND_API_TOKEN).
        "backend_api_token": secrets.token_urlsafe(32),
    }


def write_private_file(path: Path, content: str) -> bool:
    """Create `path` with mode 0600 unless it already exists; True when this call wrote it.

    O_EXCL makes concurrent first runs agree on a single file.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(content)
    return True


def load_or_create_secrets(data_dir: Path) -> dict[str, str]:
    path = data_dir / SECRETS_FILE
    if not path.exists():
        write_private_file(path, json.dumps(_new_secrets(), indent=2) + "\n")
    stored = json.loads(path.read_text("utf-8"))
    missing = {k: v for k, v in _new_secrets().items() if k not in stored}
    if missing:
        # A data dir from an older version: add the new secrets, keep the old ones.
        stored.update(missing)
        tmp = path.with_suffix(".tmp")
        tmp.unlink(missing_ok=True)
        write_private_file(tmp, json.dumps(stored, indent=2) + "\n")
        tmp.replace(path)
    return stored
