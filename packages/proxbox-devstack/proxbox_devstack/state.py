"""The running stack's addresses and processes, recorded so later commands can find it."""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

STATE_FILE = "stack.json"
DATABASE_URL_ENV = "PROXBOX_DATABASE_URL"
REDIS_URL_ENV = "PROXBOX_REDIS_URL"


@dataclass
class StackState:
    """What `<data dir>/stack.json` records.

    `processes` maps a process name to its PID and start time (see
    `processes.ProcessRecord`); `pids` mirrors the PIDs alone for readers that
    only want those. `external` names the services supplied through the
    environment, which the stack never starts or stops. `supervisor` is the
    `proxbox up` process that owns the NetBox children.
    """

    database_url: str
    redis_url: str
    pids: dict[str, int] = field(default_factory=dict)
    urls: dict[str, str] = field(default_factory=dict)
    processes: dict[str, dict[str, float]] = field(default_factory=dict)
    external: list[str] = field(default_factory=list)
    supervisor: dict[str, float] | None = None
    # The Redis databases (tasks, caching) leased for this stack's NetBox; see
    # `redis_databases`. None when the Redis URL names its own database.
    redis_databases: list[int] | None = None
    # Set by the `up` run that created the admin credentials, so it (or the
    # `up -d` waiting for it) prints them once.
    credentials_created: bool = False

    def save(self, data_dir: Path) -> None:
        self.pids = {name: int(record["pid"]) for name, record in self.processes.items()}
        data_dir.mkdir(parents=True, exist_ok=True)
        tmp = data_dir / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n", "utf-8")
        os.chmod(tmp, 0o600)
        tmp.replace(data_dir / STATE_FILE)

    @classmethod
    def load(cls, data_dir: Path) -> StackState | None:
        try:
            raw: dict[str, Any] = json.loads((data_dir / STATE_FILE).read_text("utf-8"))
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        known = {f.name for f in dataclasses.fields(cls)}
        try:
            return cls(**{key: value for key, value in raw.items() if key in known})
        except TypeError:  # a state file missing required fields: treat as absent
            return None

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
