"""Short-lived NetBox processes forked from one that has already imported NetBox.

Tests that drain a queue with NetBox's own RQ worker start a new process each time, and
each spends seconds of CPU importing NetBox and loading its URLconf (the GraphQL schema)
before it looks at the queue. A warm process does that once per test session and forks a
child per run: the child starts from the state NetBox's `rqworker` reaches before it
forks its own work horses (NetBox loaded, URLconf built, no database connection open).

    run(target, argv, env, timeout) -> subprocess.CompletedProcess

`target` is a module name (run as `python -m target`) or a path to a `.py` file. The run
is forked from the warm process when `env` matches the environment it started with in
everything but the variables a run may change (RUN_VARIABLES); otherwise, or when the
warm process cannot start, it is an ordinary `python` child. Either way the caller gets
its exit code, stdout and stderr. Runs are one at a time (the warm process serves one
request after another), which is how a test drains a queue.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

# Read by the run itself (after the fork), so they may differ from the warm process's.
RUN_VARIABLES = frozenset(
    {
        "PROXBOX_TEST_PLUGIN_CONFIG",
        "NBSP_TEST_PLUGIN_CONFIG",
        "NBSP_TEST_STORAGE_ROOT",
        "NBSP_TEST_STORAGE_BACKEND",
        "PYTEST_CURRENT_TEST",
    }
)
READY = "warm-netbox ready"

_lock = threading.Lock()
_server: _WarmServer | None = None


class _WarmServer:
    def __init__(self, env: dict[str, str]):
        self.env = env
        self.folder = Path(tempfile.mkdtemp(prefix="warm-netbox-"))
        self.socket_path = self.folder / "socket"
        with (self.folder / "log").open("w") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", __name__, "serve", str(self.socket_path)],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                start_new_session=True,
            )
        first = self.process.stdout.readline().strip()
        if first != READY:
            self.process.kill()
            self.process.wait()
            log = (self.folder / "log").read_text()
            raise RuntimeError(f"the warm NetBox process did not start: {log[-2000:]}")

    def matches(self, env: dict[str, str]) -> bool:
        return _fixed(env) == self.env

    def run(self, target: str, argv: list[str], env: dict[str, str], timeout: float):
        stdout = self.folder / "stdout"
        stderr = self.folder / "stderr"
        request = {
            "target": target,
            "argv": argv,
            "env": env,
            "stdout": str(stdout),
            "stderr": str(stderr),
            "timeout": timeout,
        }
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(str(self.socket_path))
            conn.sendall(json.dumps(request).encode() + b"\n")
            reply = json.loads(_read_line(conn))
        if reply.get("timeout"):
            raise subprocess.TimeoutExpired([target, *argv], timeout)
        return subprocess.CompletedProcess(
            [target, *argv], reply["returncode"], stdout.read_text(), stderr.read_text()
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        for name in ("socket", "stdout", "stderr", "log"):
            (self.folder / name).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self.folder.rmdir()


def _fixed(env: dict[str, str]) -> dict[str, str]:
    """What the warm process's state depends on: the environment but RUN_VARIABLES."""
    return {k: v for k, v in env.items() if k not in RUN_VARIABLES}


def _read_line(conn: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            raise RuntimeError("the warm NetBox process closed the connection")
        data += chunk
    return data


def run(
    target: str, argv: list[str], env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess:
    """`python -m target argv` (or `python target argv` for a path) with `env`, output
    captured as text; TimeoutExpired after `timeout` seconds (the run is killed)."""
    global _server
    with _lock:
        if _server is not None and not _server.matches(env):
            return _cold(target, argv, env, timeout)
        if _server is None or _server.process.poll() is not None:
            try:
                _server = _WarmServer(_fixed(env))
            except RuntimeError:
                return _cold(target, argv, env, timeout)
            atexit.register(_server.stop)
        return _server.run(target, argv, env, timeout)


def _cold(target: str, argv: list[str], env: dict[str, str], timeout: float):
    command = [sys.executable, target] if target.endswith(".py") else [sys.executable, "-m", target]
    return subprocess.run(
        [*command, *argv], env=env, capture_output=True, text=True, timeout=timeout
    )


# -- the warm process --------------------------------------------------------------------


def load_netbox_for_forks() -> None:
    """NetBox set up and its URLconf built, in a process that forks NetBox processes from
    itself: they inherit both. No database connection is left open for a child to share
    (each connects on its own; Redis clients reconnect after a fork by themselves)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "netbox.settings")
    import django

    django.setup()
    from django.db import connections
    from django.urls import get_resolver

    get_resolver().url_patterns  # noqa: B018 - built here once, inherited by every child
    connections.close_all()


def serve(socket_path: str) -> None:
    load_netbox_for_forks()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(socket_path)
        listener.listen()
        print(READY, flush=True)
        while True:
            conn, _ = listener.accept()
            with conn:
                request = json.loads(_read_line(conn))
                conn.sendall(json.dumps(_fork_run(request)).encode() + b"\n")


def _fork_run(request: dict) -> dict:
    pid = os.fork()
    if pid == 0:  # the run
        _child(request)
    # Polled rather than timed by a thread: the next fork is from a single-threaded process.
    deadline = time.monotonic() + request["timeout"]
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return {"returncode": os.waitstatus_to_exitcode(status)}
        if time.monotonic() > deadline:
            for kill in (os.killpg, os.kill):  # its group, and itself should it have none
                with contextlib.suppress(ProcessLookupError):
                    kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return {"timeout": True}
        time.sleep(0.02)


def _child(request: dict) -> None:
    code = 1
    try:
        # Its own process group, as a fresh child of the test would be, so a timeout
        # kills the work horses it forks too.
        os.setsid()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        stdin = os.open(os.devnull, os.O_RDONLY)
        stdout = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        stderr = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
            os.dup2(fd, target)
            os.close(fd)
        os.environ.clear()
        os.environ.update(request["env"])
        import random

        random.seed()  # not the warm process's sequence
        import runpy

        target = request["target"]
        sys.argv = [target, *request["argv"]]
        try:
            if target.endswith(".py"):
                runpy.run_path(target, run_name="__main__")
            else:
                runpy.run_module(target, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if exc.code is not None and not isinstance(exc.code, int):
                print(exc.code, file=sys.stderr)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"] and len(sys.argv) == 3:
        serve(sys.argv[2])
    else:
        sys.exit("usage: python -m proxbox_devstack.warm_netbox serve SOCKET")
