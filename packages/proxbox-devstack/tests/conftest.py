"""Fixtures of the dev-stack tests: a private data dir, embedded services in it."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxbox_devstack import services
from proxbox_devstack.state import DATABASE_URL_ENV, REDIS_URL_ENV


def _server_dir(prefix: str) -> Path:
    """A directory the unprivileged PostgreSQL account can reach.

    Not under pytest's temp root: every pytest session that starts resets that
    root to mode 0700, which would lock the server account out mid-test.
    """
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A fresh directory for a data dir holding embedded servers; removed afterwards."""
    path = _server_dir("devstack_test_")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def home(scratch: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh PROXBOX_HOME with no service URLs in the environment."""
    path = scratch / "proxbox-home"
    monkeypatch.setenv("PROXBOX_HOME", str(path))
    monkeypatch.delenv(DATABASE_URL_ENV, raising=False)
    monkeypatch.delenv(REDIS_URL_ENV, raising=False)
    return path


@pytest.fixture(scope="module")
def embedded() -> Iterator[tuple[Path, services.Services]]:
    """Embedded PostgreSQL and Redis in a module-wide data dir, stopped afterwards."""
    data_dir = _server_dir("devstack_test_")
    saved = {name: os.environ.pop(name, None) for name in (DATABASE_URL_ENV, REDIS_URL_ENV)}
    try:
        started = services.start_services(data_dir, log=lambda _line: None)
        yield data_dir, started
    finally:
        services.stop_services(data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)
        for name, value in saved.items():
            if value is not None:
                os.environ[name] = value


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A socket listening on a free 127.0.0.1 port (the port is `listener.getsockname()[1]`)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    yield sock
    sock.close()


def run_cli(*args: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess:
    """Run the `proxbox` console entry point in a child, like a user would."""
    return subprocess.run(
        [sys.executable, "-m", "proxbox_devstack.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def cli_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (DATABASE_URL_ENV, REDIS_URL_ENV)}
    env["PROXBOX_HOME"] = str(home)
    env.update(extra)
    return env
