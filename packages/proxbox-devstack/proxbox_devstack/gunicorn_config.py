"""gunicorn settings for the NetBox that `proxbox up` and the test suites run:
`gunicorn --config python:proxbox_devstack.gunicorn_config ...`.

A NetBox worker that is told to stop spends seconds of CPU in the interpreter's own
teardown, freeing NetBox's heap object by object (measured: ~2 CPU-s a process idle, ~4 s
wall per stop on a busy machine) — for memory the kernel takes back at once. The worker
runs its exit handlers (`atexit`), flushes its output and ends with the exit code gunicorn
gave it, without that teardown.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys


def worker_exit(server, worker):
    """gunicorn calls this in the worker's last `finally`, while its SystemExit (the code
    the arbiter reads) propagates; an error on its way up is left to gunicorn."""
    ending = sys.exception()
    if not isinstance(ending, SystemExit):
        return
    code = 0 if ending.code is None else ending.code
    if not isinstance(code, int):
        return
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)
