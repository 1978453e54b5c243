"""The process helpers every server-starting package, test and benchmark shares."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Thread

import pytest
from proxbox_processes import (
    GARBAGE_COLLECTION_THRESHOLDS,
    WaitTimeout,
    free_port,
    stop_process,
    wait_for_http,
    wait_until,
)


def test_the_collector_thresholds_hold_in_the_process_and_its_forked_children():
    # A fresh interpreter: the test process itself already runs at these thresholds.
    program = (
        "import gc, os, sys\n"
        "print(gc.get_threshold())\n"
        "from proxbox_processes import collect_garbage_less_often\n"
        "collect_garbage_less_often()\n"
        "sys.stdout.flush()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    print(gc.get_threshold()); sys.stdout.flush(); os._exit(0)\n"
        "os.waitpid(pid, 0)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True, timeout=60
    )
    default, forked = result.stdout.splitlines()
    assert default == "(700, 10, 10)"
    assert forked == str(GARBAGE_COLLECTION_THRESHOLDS)


def test_free_port_can_be_bound():
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_wait_until_returns_the_predicates_value():
    values = iter([None, 0, {"state": "finished"}])
    assert wait_until(lambda: next(values), 5, "a value", interval=0.01) == {"state": "finished"}


def test_wait_until_names_what_it_waited_for():
    began = time.monotonic()
    with pytest.raises(WaitTimeout, match="timed out after 0.2 s waiting for the worker") as info:
        wait_until(lambda: False, 0.2, "the worker", interval=0.05)
    assert time.monotonic() - began >= 0.2
    assert isinstance(info.value, AssertionError) and isinstance(info.value, TimeoutError)


@contextmanager
def answering(*statuses: int) -> Iterator[tuple[str, Iterator[int]]]:
    """A local HTTP server answering each GET with the next of `statuses` (the last one
    once they run out); yields its URL and the statuses not yet answered."""
    pending = iter(statuses)

    class Answers(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(next(pending, statuses[-1]))
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Answers)
    Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", pending
    finally:
        server.shutdown()
        server.server_close()


def test_wait_for_http_returns_on_any_status():
    with answering(404) as (url, _pending):
        wait_for_http(f"{url}/", timeout=10)


def test_wait_for_http_can_wait_for_a_success_past_a_not_ready_answer():
    with answering(503, 503, 200) as (url, pending):
        wait_for_http(f"{url}/readyz", timeout=10, interval=0.01, require_success=True)
        assert next(pending, "drained") == "drained"


def test_wait_for_http_names_the_last_answer_when_never_ready():
    with (
        answering(503) as (url, _pending),
        pytest.raises(RuntimeError, match=r"within 0.5s \(last answer: HTTP 503\)"),
    ):
        wait_for_http(f"{url}/", timeout=0.5, interval=0.05, require_success=True)


def test_wait_for_http_fails_early_when_the_server_exits():
    process = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    url = f"http://127.0.0.1:{free_port()}/"
    with pytest.raises(RuntimeError, match="server exited with 3"):
        wait_for_http(url, process, timeout=30)


def test_wait_for_http_times_out():
    with pytest.raises(RuntimeError, match="did not answer within 0.5s"):
        wait_for_http(f"http://127.0.0.1:{free_port()}/", timeout=0.5, interval=0.1)


def test_stop_process_kills_what_ignores_sigterm():
    ignores = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); time.sleep(60)"
    process = subprocess.Popen([sys.executable, "-c", ignores], stdout=subprocess.PIPE)
    assert process.stdout.readline()  # the handler is installed
    stop_process(process, timeout=0.5)
    assert process.returncode == -9
    stop_process(process)  # already reaped: nothing to do
