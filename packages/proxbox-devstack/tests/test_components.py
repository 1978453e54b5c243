"""`proxbox up`'s NetBox component: the web server and two RQ workers (forked from one
process), syncs on their own."""

from __future__ import annotations

import sys

from proxbox_devstack.components import COMPONENTS, NETBOX_QUEUES, SYNC_QUEUE
from proxbox_devstack.context import StackContext, UpOptions
from proxbox_devstack.rq_workers import parse
from proxbox_devstack.services import Services

RQ_WORKERS = [sys.executable, "-m", "proxbox_devstack.rq_workers"]


def netbox_processes(tmp_path) -> dict:
    ctx = StackContext(
        tmp_path,
        UpOptions(),
        Services("postgresql://postgres@127.0.0.1:5432/postgres", "redis://127.0.0.1:6379"),
        env={"PROXBOX_REDIS_DATABASES": "4,5"},
    )
    (netbox,) = [component for component in COMPONENTS if component.name == "netbox"]
    return {spec.name: spec for spec in netbox.specs(ctx)}


def test_netbox_queues_and_sync_queue_have_a_worker_each(tmp_path):
    processes = netbox_processes(tmp_path)
    assert set(processes) == {"netbox", "rqworkers"}
    spec = processes["rqworkers"]
    assert spec.argv[: len(RQ_WORKERS)] == RQ_WORKERS, spec.argv
    workers = {worker.name: worker for worker in parse(spec.argv[len(RQ_WORKERS) :])}
    assert {name: worker.queues for name, worker in workers.items()} == {
        "rqworker": NETBOX_QUEUES,
        "rqworker-sync": (SYNC_QUEUE,),
    }
    assert NETBOX_QUEUES == ("high", "default", "low")
    assert SYNC_QUEUE == "netbox_proxbox.sync"
    for name, worker in workers.items():
        # Each worker logs apart, so a sync's trace is not buried under NetBox's jobs.
        assert worker.log_file == tmp_path / "logs" / f"{name}.log"
    assert spec.env["PROXBOX_REDIS_DATABASES"] == "4,5"
    assert spec.stop_timeout == 30
