"""The NetBox gunicorn settings: a stopping worker runs its exit handlers and skips the
interpreter's teardown of its heap."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import httpx
from proxbox_processes import free_port, wait_for_http

APP = textwrap.dedent(
    """
    import atexit, os

    MARKS = os.environ["MARKS"]

    def mark(name):
        open(os.path.join(MARKS, f"{name}-{os.getpid()}"), "w").close()

    class TornDown:
        # Bound now: in the teardown, module globals such as `os` may be gone already.
        def __del__(self, _open=open, _path=os.path.join(MARKS, f"teardown-{os.getpid()}")):
            _open(_path, "w").close()

    def application(environ, start_response):
        global kept
        if "kept" not in globals():
            kept = TornDown()  # freed only by the interpreter's teardown (pid of the worker)
            atexit.register(mark, "atexit")
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [str(os.getpid()).encode()]
    """
)


def test_a_stopping_worker_runs_its_exit_handlers_and_skips_the_teardown(tmp_path):
    (tmp_path / "marked_app.py").write_text(APP)
    marks = tmp_path / "marks"
    marks.mkdir()
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "--config",
            "python:proxbox_devstack.gunicorn_config",
            "--no-control-socket",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "1",
            "--chdir",
            str(tmp_path),
            "marked_app:application",
        ],
        env={"PATH": "/usr/bin:/bin", "MARKS": str(marks)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_http(f"http://127.0.0.1:{port}/", server, timeout=60)
        worker = int(httpx.get(f"http://127.0.0.1:{port}/").text)
    finally:
        server.send_signal(signal.SIGTERM)
        _, log = server.communicate(timeout=60)
    assert server.returncode == 0, log
    assert (marks / f"atexit-{worker}").exists(), log
    assert not (marks / f"teardown-{worker}").exists(), log
    assert f"Worker (pid:{worker}) exited with code" not in log  # its exit code was 0
