"""Helpers of the stack end-to-end tests: a handle on a running stack, and
the process checks that prove a stopped stack left nothing behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import psycopg
from psycopg import sql

from proxbox_devstack.processes import ProcessRecord

# A cold first run migrates NetBox into the template: minutes of CPU.
UP_TIMEOUT = float(os.environ.get("PROXBOX_E2E_UP_TIMEOUT", "1200"))


@dataclass
class Stack:
    home: Path
    port: int
    env: dict[str, str]
    database: str
    up_output: str = ""
    records: dict[str, ProcessRecord] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def credentials(self) -> dict[str, str]:
        return json.loads((self.home / "credentials.json").read_text())

    def client(self, authenticated: bool = True) -> httpx.Client:
        headers = {"Accept": "application/json"}
        if authenticated:
            headers["Authorization"] = f"Bearer {self.credentials['token']}"
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def proxbox(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "proxbox_devstack.cli", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    def recorded_processes(self) -> dict[str, ProcessRecord]:
        state = json.loads((self.home / "stack.json").read_text())
        records = {name: ProcessRecord.from_json(raw) for name, raw in state["processes"].items()}
        if state.get("supervisor"):
            records["proxbox up"] = ProcessRecord.from_json(state["supervisor"])
        return records

    def redis_databases(self) -> list[int]:
        """The Redis databases (tasks, caching) `proxbox up` leased for this stack."""
        return json.loads((self.home / "stack.json").read_text())["redis_databases"]

    def stop(self) -> subprocess.CompletedProcess:
        return self.proxbox("down")


def processes_using(home: Path) -> list[psutil.Process]:
    """Every live process started for the stack in `home` (by environment or arguments)."""
    marker = str(home)
    found = []
    for proc in psutil.process_iter(["cmdline", "environ", "status"]):
        if proc.info["status"] == psutil.STATUS_ZOMBIE or proc.pid == os.getpid():
            continue
        cmdline = " ".join(proc.info["cmdline"] or [])
        environ = proc.info["environ"] or {}
        if marker in cmdline or environ.get("PROXBOX_HOME") == marker:
            found.append(proc)
    return found


def drop_database(env: dict[str, str], name: str) -> None:
    url = env.get("PROXBOX_DATABASE_URL")
    if not url:
        return  # embedded servers: the database disappears with the data dir
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
