"""The running stack's addresses, recorded so later commands can find it."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

STATE_FILE = "stack.json"
DATABASE_URL_ENV = "PROXBOX_DATABASE_URL"
REDIS_URL_ENV = "PROXBOX_REDIS_URL"


@dataclass
class StackState:
    database_url: str
    redis_url: str
    pids: dict[str, int] = field(default_factory=dict)
    urls: dict[str, str] = field(default_factory=dict)

    def save(self, data_dir: Path) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        tmp = data_dir / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n", "utf-8")
        os.chmod(tmp, 0o600)
        tmp.replace(data_dir / STATE_FILE)

    @classmethod
    def load(cls, data_dir: Path) -> StackState | None:
        try:
            raw = json.loads((data_dir / STATE_FILE).read_text("utf-8"))
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        return cls(**raw)

    @staticmethod
    def clear(data_dir: Path) -> None:
        (data_dir / STATE_FILE).unlink(missing_ok=True)


def service_urls(data_dir: Path) -> tuple[str, str]:
    """Database and Redis URLs: the environment wins, then a running stack's record."""
    database_url = os.environ.get(DATABASE_URL_ENV)
    redis_url = os.environ.get(REDIS_URL_ENV)
    if database_url and redis_url:
        return database_url, redis_url
    recorded = StackState.load(data_dir)
    if recorded is not None:
        database_url = database_url or recorded.database_url
        redis_url = redis_url or recorded.redis_url
    if not database_url or not redis_url:
        missing = DATABASE_URL_ENV if not database_url else REDIS_URL_ENV
        raise RuntimeError(
            f"{missing} is not set and no running dev stack is recorded in {data_dir}: "
            "start one with `uv run proxbox up -d` (or `proxbox services up -d`) or set the URL."
        )
    return database_url, redis_url
