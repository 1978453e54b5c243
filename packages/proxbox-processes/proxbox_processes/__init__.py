"""Helpers for code that starts a server and waits for it: the devstack, the simulator's
runtime, the end-to-end tests, the plugin's, backend's, simulator's and script projects'
tests, the benchmarks.

* `free_port()`: a local TCP port nothing listens on right now;
* `wait_for_http(url, process)`: block until a URL answers (any HTTP status), failing
  early when the server process exits;
* `stop_process(popen)`: terminate a child, kill it if it does not exit in time;
* `run_into_closed_pipe(argv, env)`: run a command whose stdout reader is already gone
  (`command | head -1` once head has exited), stderr captured;
* `interruptible()`: a `preexec_fn` for a child a test interrupts with SIGINT (Ctrl-C);
* `wait_until(predicate, timeout, what)`: poll until the predicate holds and return its
  value, or raise `WaitTimeout` naming what was awaited (an AssertionError, so a test
  fails as on any assertion, and a TimeoutError, so code outside tests can catch it);
* `collect_garbage_less_often()`: CPython's cyclic collector at thresholds that fit a
  process holding a large heap (NetBox's, a test run's), called once at its start.

The devstack's `processes` module is the supervisor's side (records of detached children,
process groups); these helpers are for a `subprocess.Popen` the caller owns.
"""

from __future__ import annotations

import gc
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from importlib import metadata

import httpx

__all__ = [
    "GARBAGE_COLLECTION_THRESHOLDS",
    "WaitTimeout",
    "collect_garbage_less_often",
    "free_port",
    "interruptible",
    "run_into_closed_pipe",
    "stop_process",
    "wait_for_http",
    "wait_until",
]
__version__ = metadata.version("proxbox-processes")

LOCALHOST = "127.0.0.1"
# CPython collects its youngest generation after every 700 net allocations of container
# objects (default thresholds 700, 10, 10), and a process that holds NetBox's heap or
# generates thousands of requests collects all the time. Measured on a 2-core machine:
# the plugin's migration, page and filter tests used 13 % less CPU at these thresholds
# (75.5 -> 65.8 CPU-s), the plugin API fuzzing against a live NetBox 11 % less (76.3 ->
# 68.2 CPU-s, NetBox's gunicorn included). Cycles live a little longer; no more.
GARBAGE_COLLECTION_THRESHOLDS = (50_000, 50, 100)


def collect_garbage_less_often() -> None:
    """Set the cyclic collector's thresholds to GARBAGE_COLLECTION_THRESHOLDS; children
    forked afterwards (gunicorn's workers, warm RQ workers) keep them."""
    gc.set_threshold(*GARBAGE_COLLECTION_THRESHOLDS)


def interruptible() -> None:
    """`preexec_fn` for a child that will be sent SIGINT: the default action back.

    A shell starts a background job (`cmd &` in a script, a CI step run in the
    background) with SIGINT ignored, a child inherits that, and Python then installs no
    KeyboardInterrupt handler: the child would never see the Ctrl-C a test sends it.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def free_port(host: str = LOCALHOST) -> int:
    """A TCP port on `host` the kernel considers free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


class WaitTimeout(AssertionError, TimeoutError):
    """`wait_until` gave up: the predicate never held within the timeout."""


def wait_until[T](
    predicate: Callable[[], T], timeout: float = 60.0, what: str = "", interval: float = 0.1
) -> T:
    """Poll `predicate` every `interval` seconds until it returns something truthy and return
    that; after `timeout` seconds (the predicate checked once more) raise WaitTimeout
    "timed out after <timeout> s waiting for <what>". An exception of the predicate
    propagates at once."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"timed out after {timeout:g} s waiting for {what or predicate}")
        time.sleep(interval)


def wait_for_http(
    url: str,
    process: subprocess.Popen | None = None,
    timeout: float = 120.0,
    interval: float = 0.3,
    require_success: bool = False,
    **httpx_kwargs,
) -> None:
    """Block until `url` answers a GET with any HTTP response, or with `require_success`
    a 2xx one (a readiness endpoint answers 503 while the server starts). RuntimeError when
    `process` exits first ("<url>: server exited with <code>") or after `timeout` seconds
    ("<url> did not answer within <timeout>s", with the last status when there was one).
    `httpx_kwargs` go to the `httpx.Client` that polls (verify=False, headers)."""
    httpx_kwargs.setdefault("timeout", 2.0)
    deadline = time.monotonic() + timeout
    last_status = None
    # One client for every poll: a client per GET builds a TLS context each time (tens of
    # milliseconds of CPU), which adds up over a minute-long start on a busy machine.
    with httpx.Client(**httpx_kwargs) as client:
        while time.monotonic() < deadline:
            if process is not None and process.poll() is not None:
                raise RuntimeError(f"{url}: server exited with {process.returncode}")
            try:
                response = client.get(url)
            except httpx.TransportError:
                pass
            else:
                if not require_success or response.is_success:
                    return
                last_status = response.status_code
            time.sleep(interval)
    answered = f" (last answer: HTTP {last_status})" if last_status else ""
    raise RuntimeError(f"{url} did not answer within {timeout}s{answered}")


def stop_process(process: subprocess.Popen, timeout: float = 20.0) -> None:
    """Terminate `process` if it still runs; kill it when it has not exited after `timeout`
    seconds. Returns once the process has been reaped."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def run_into_closed_pipe(
    argv: list[str], env: dict[str, str] | None = None, timeout: float = 60.0
) -> subprocess.CompletedProcess:
    """Run `argv` with stdout a pipe whose reader has already closed: what a CLI meets as
    `cmd | head -1` after head exited. Deterministic, unlike a real `head`."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        return subprocess.run(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=writer,
            stderr=subprocess.PIPE,
            text=True,
            timeout=timeout,
        )
    finally:
        os.close(writer)
