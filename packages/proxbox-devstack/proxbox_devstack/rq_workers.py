"""NetBox's RQ workers of `proxbox up`, forked from one process that has imported NetBox.

    python -m proxbox_devstack.rq_workers --worker NAME LOG QUEUES [--worker ...]

QUEUES is a comma-separated list. Each worker is `netbox rqworker QUEUES`, as NetBox's own
command line starts it, writing to its own LOG. The parent loads NetBox and builds its
URLconf (the GraphQL schema) once, before forking: every worker would otherwise spend
seconds of CPU on each, and the forked workers share those pages in memory.

The parent stays and supervises: SIGTERM or SIGINT reaches each worker once, through the
parent, once the worker has set its handlers for it (RQ's warm shutdown: a running job
finishes first; a second signal a second or more later is RQ's cold shutdown, which kills
the job). Workers lead process groups of their own, so a signal to the parent's group does
not reach them twice. When a worker exits on its own the parent stops the others and exits
with that worker's code (128 + the signal's number when a signal ended it), so whoever
supervises the parent sees the failure. What a dead worker left in its process group (RQ's
scheduler, a job's work horse) is stopped, and a worker killed outright is removed from
RQ's registry. A parent killed outright takes the workers along (Linux's parent-death
signal).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .processes import open_log
from .warm_netbox import load_netbox_for_forks

_PR_SET_PDEATHSIG = 1
_STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}
# How long a stop waits for a starting worker to set its stop handlers.
STARTUP_GRACE = 10.0


@dataclass(frozen=True)
class Worker:
    name: str
    log_file: Path
    queues: tuple[str, ...]


def worker_arguments(workers: list[Worker]) -> list[str]:
    """The command-line arguments that run `workers`."""
    arguments = []
    for worker in workers:
        arguments += ["--worker", worker.name, str(worker.log_file), ",".join(worker.queues)]
    return arguments


def parse(argv: list[str]) -> list[Worker]:
    parser = argparse.ArgumentParser(prog="python -m proxbox_devstack.rq_workers")
    parser.add_argument(
        "--worker",
        nargs=3,
        action="append",
        required=True,
        metavar=("NAME", "LOG", "QUEUES"),
        help="a worker's name, its log file and its comma-separated queues",
    )
    options = parser.parse_args(argv)
    workers = []
    for name, log_file, queues in options.worker:
        names = tuple(queue for queue in queues.split(",") if queue)
        if not names:
            parser.error(f"--worker {name}: no queue named")
        workers.append(Worker(name, Path(log_file), names))
    return workers


def _die_with_parent() -> None:
    """Linux: SIGTERM (a warm shutdown) when the parent dies without stopping us."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _run_worker(worker: Worker, parent: int) -> None:
    code = 1
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
        os.setpgid(0, 0)
        _die_with_parent()
        if os.getppid() != parent:  # the parent died before the line above took effect
            os._exit(1)
        with open_log(worker.log_file) as log:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            log.write(f"\n--- {stamp} starting {worker.name}\n".encode())
            log.flush()
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
        from netbox.cli import main as netbox_main

        try:
            code = netbox_main(["rqworker", *worker.queues]) or 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _catches_or_ended(pid: int, signum: int) -> bool:
    """Whether `pid` has a handler for `signum` or has ended (Linux's /proc; elsewhere,
    and for a process already reaped, True)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    if fields.get("State", "").split()[:1] in (["Z"], ["X"]):
        return True
    caught = fields.get("SigCgt")
    return caught is None or bool(int(caught, 16) >> (signum - 1) & 1)


def _wait_until_it_catches(pid: int, signum: int, deadline: float) -> None:
    """RQ registers a worker and starts its scheduler before it sets its stop handlers; a
    stop in between would kill the worker outright (no warm shutdown, its scheduler left
    running, its registration kept until RQ's heartbeat expires). A worker not there by
    `deadline` (time.monotonic) is sent the signal anyway."""
    while not _catches_or_ended(pid, signum) and time.monotonic() < deadline:
        time.sleep(0.05)


def _stop_what_it_left(worker_pid: int) -> None:
    """A worker killed outright leaves its process group behind: RQ's scheduler and, when
    a job ran, its work horse. The group outlives its reaped leader while they live, so its
    id is not reused by then; a worker that exited cleanly leaves none (ESRCH)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(worker_pid, signal.SIGTERM)


def _forget_registration(worker: Worker, pid: int) -> None:
    """RQ keeps a worker killed outright registered until its heartbeat expires (seven
    minutes): NetBox would list it among the live workers, and `proxbox up` would take its
    Redis pair for another stack's."""
    try:
        import django_rq
        from rq import Worker as RQWorker

        hostname = socket.gethostname()
        for registered in RQWorker.all(queue=django_rq.get_queue(worker.queues[0])):
            if registered.pid == pid and registered.hostname == hostname:
                registered.register_death()
    except Exception as exc:  # the stop goes on; RQ forgets the worker later by itself
        print(f"could not remove {worker.name} from RQ's workers: {exc}", flush=True)


def supervise(workers: list[Worker]) -> int:
    parent = os.getpid()
    children: dict[int, Worker] = {}
    stopping = False

    def stop_workers(signum: int, _frame=None) -> None:
        nonlocal stopping
        if stopping:
            return
        stopping = True
        # One grace for all: the workers start side by side.
        deadline = time.monotonic() + STARTUP_GRACE
        for pid in children:
            _wait_until_it_catches(pid, signum, deadline)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    # A stop asked for while forking is handled once every worker exists to receive it.
    # The workers start with the default actions: a handler inherited from here would
    # read, to _wait_until_it_catches, as RQ's.
    signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    for signum in _STOP_SIGNALS:
        signal.signal(signum, signal.SIG_DFL)
    for worker in workers:
        pid = os.fork()
        if pid == 0:
            _run_worker(worker, parent)
        children[pid] = worker
    for signum in _STOP_SIGNALS:
        signal.signal(signum, stop_workers)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
    code = 0
    while children:
        pid, status = os.wait()
        worker = children.pop(pid, None)
        if worker is None:
            continue
        _stop_what_it_left(pid)
        exit_code = os.waitstatus_to_exitcode(status)
        if exit_code < 0:
            _forget_registration(worker, pid)
        if not stopping:
            if exit_code < 0:
                ended, code = f"ended by {signal.Signals(-exit_code).name}", 128 - exit_code
            else:
                ended, code = f"exited with code {exit_code}", exit_code or 1
            print(f"{worker.name} {ended}; stopping the other workers", flush=True)
            stop_workers(signal.SIGTERM)
    return code


def main(argv: list[str] | None = None) -> int:
    workers = parse(sys.argv[1:] if argv is None else argv)
    load_netbox_for_forks()
    return supervise(workers)


if __name__ == "__main__":
    sys.exit(main())
