"""`proxbox up`'s RQ workers, forked from one NetBox process: each serves its own queues
through RQ and logs apart; a stop reaches each once (RQ's warm shutdown), even while they
start; a worker that dies takes the others and the parent down with it, and leaves neither
its scheduler nor its registration behind; a parent killed outright takes them along."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import redis
from django.db import connection
from proxbox_processes import wait_until
from rq import Queue
from rq import Worker as RQWorker

from proxbox_devstack import redis_databases
from proxbox_devstack.components import SYNC_QUEUE, stack_workers
from proxbox_devstack.rq_workers import worker_arguments

pytestmark = pytest.mark.django_db(transaction=True)


class ForkedWorkers:
    """The workers on a Redis database pair of their own (leased as `proxbox up` leases
    one): the registration a killed worker leaves in RQ for minutes, and its scheduler's
    locks, must not reach the other tests' queues."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.workers = stack_workers(lambda name: folder / f"{name}.log")
        redis_url = os.environ["PROXBOX_REDIS_URL"]
        self.lease = redis_databases.acquire(redis_url, folder)
        assert self.lease is not None, f"{redis_url} names a database: no pair to lease"
        self.redis = redis.Redis.from_url(redis_url, db=self.lease.databases.tasks)
        self.output = folder / "rqworkers.log"
        with self.output.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "proxbox_devstack.rq_workers"]
                + worker_arguments(self.workers),
                env={
                    **os.environ,
                    "PROXBOX_NETBOX_DATABASE": connection.settings_dict["NAME"],
                    redis_databases.DATABASES_ENV: self.lease.databases.to_env(),
                },
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.children: dict[str, psutil.Process] = {}
        self.descendants: list[psutil.Process] = []

    def forks(self) -> list[psutil.Process]:
        """The parent's forked workers: a command NetBox's import runs has a command line of
        its own."""
        parent = psutil.Process(self.process.pid)
        command = parent.cmdline()
        forks = []
        for child in parent.children():
            with contextlib.suppress(psutil.NoSuchProcess):
                if child.cmdline() == command:
                    forks.append(child)
        return forks

    def registered(self) -> dict[int, set[str]]:
        """Queue names of the workers RQ knows, by the worker's process id."""
        return {worker.pid: set(worker.queue_names()) for worker in RQWorker.all(self.redis)}

    def enqueue_and_wait(self, queue_name: str) -> None:
        job = Queue(queue_name, connection=self.redis).enqueue("os.getpid")
        wait_until(
            lambda: job.get_status(refresh=True) == "finished",
            60,
            f"a job on {queue_name}",
            interval=0.25,
        )

    def wait_serving(self) -> None:
        """Until both workers are registered with RQ; `children` names them by their queues."""

        def mine() -> dict[int, set[str]]:
            assert self.process.poll() is None, self.output.read_text()
            children = {child.pid for child in psutil.Process(self.process.pid).children()}
            return {pid: queues for pid, queues in self.registered().items() if pid in children}

        wait_until(lambda: len(mine()) == 2, 120, "both workers registered with RQ", interval=0.5)
        names = {frozenset(worker.queues): worker.name for worker in self.workers}
        self.children = {
            names[frozenset(queues)]: psutil.Process(pid) for pid, queues in mine().items()
        }
        # RQ's scheduler processes too, killed at teardown should a failed test leave them.
        self.descendants = psutil.Process(self.process.pid).children(recursive=True)

    def log(self, name: str) -> str:
        return (self.folder / f"{name}.log").read_text()

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        for process in self.descendants:
            with contextlib.suppress(psutil.Error):
                process.kill()
        self.redis.close()
        self.lease.empty()
        self.lease.release()


@pytest.fixture
def forked(tmp_path):
    workers = ForkedWorkers(tmp_path)
    try:
        yield workers
    finally:
        workers.stop()


def test_each_worker_serves_its_queues_and_a_dying_one_stops_the_rest(forked):
    forked.wait_serving()
    assert set(forked.children) == {"rqworker", "rqworker-sync"}
    forked.enqueue_and_wait("default")
    forked.enqueue_and_wait(SYNC_QUEUE)
    assert "starting rqworker-sync" in forked.log("rqworker-sync")
    assert "netbox_proxbox.sync" in forked.log("rqworker-sync")
    assert "netbox_proxbox.sync" not in forked.log("rqworker")

    # RQ's scheduler, which a worker killed outright would leave running.
    left_behind = wait_until(
        lambda: forked.children["rqworker-sync"].children(), 30, "rqworker-sync's scheduler"
    )
    forked.children["rqworker-sync"].kill()
    assert forked.process.wait(60) == 128 + signal.SIGKILL
    assert "rqworker-sync ended by SIGKILL; stopping the other workers" in (
        forked.output.read_text()
    )
    assert not forked.children["rqworker"].is_running()
    _, alive = psutil.wait_procs(left_behind, timeout=30)
    assert not alive
    # RQ would list the killed worker for minutes, until its heartbeat expired.
    assert not forked.registered()
    assert "warm shut down requested" in forked.log("rqworker")


def test_a_stop_to_the_process_group_is_a_warm_shutdown_even_while_the_workers_start(forked):
    # What `proxbox down` and the supervisor send, here while the workers are still starting:
    # RQ registers a worker and starts its scheduler before it sets its stop handlers, and
    # a worker stopped in between would die outright and leave its scheduler running.
    wait_until(lambda: len(forked.forks()) == 2, 60, "the forked workers")
    workers = forked.forks()
    os.killpg(forked.process.pid, signal.SIGTERM)
    assert forked.process.wait(90) == 0, forked.output.read_text()
    for worker in forked.workers:
        log = forked.log(worker.name)
        assert "warm shut down requested" in log
        assert "cold shut down" not in log, log
    assert not forked.registered()
    for process in workers:  # its process group: the worker and its scheduler
        with pytest.raises(ProcessLookupError):
            os.killpg(process.pid, 0)


def test_workers_stop_when_their_parent_is_killed(forked):
    forked.wait_serving()
    os.kill(forked.process.pid, signal.SIGKILL)
    forked.process.wait()
    _, alive = psutil.wait_procs(list(forked.children.values()), timeout=60)
    assert not alive
    for name in forked.children:
        assert "warm shut down requested" in forked.log(name)
