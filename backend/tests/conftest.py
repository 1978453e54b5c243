"""Fixtures shared by the backend's suites."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from proxbox_processes import free_port, stop_process, wait_until

from proxbox_devstack.redis_server import ping, server_binary


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    """A Redis server of the test's own (the devstack's binary), empty, gone afterwards."""
    port = free_port()
    args = ["--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    server = subprocess.Popen(
        [str(server_binary()), *args, "--dir", str(tmp_path)], stdout=subprocess.DEVNULL
    )
    try:
        wait_until(lambda: ping("127.0.0.1", port), 10, "redis-server to start")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        stop_process(server, timeout=10)
