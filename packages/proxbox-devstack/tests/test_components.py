"""`proxbox up`'s NetBox component: the web server and two RQ workers, syncs on their own."""

from __future__ import annotations

import sys

from proxbox_devstack.components import COMPONENTS, NETBOX_QUEUES, SYNC_QUEUE
from proxbox_devstack.context import StackContext, UpOptions
from proxbox_devstack.services import Services

RQWORKER = [sys.executable, "-m", "netbox", "rqworker"]


def netbox_processes(tmp_path) -> dict:
    ctx = StackContext(
        tmp_path,
        UpOptions(),
        Services("postgresql://postgres@127.0.0.1:5432/postgres", "redis://127.0.0.1:6379"),
        env={"PROXBOX_REDIS_DATABASES": "4,5"},
    )
    (netbox,) = [component for component in COMPONENTS if component.name == "netbox"]
    return {spec.name: spec for spec in netbox.specs(ctx)}


def queues_of(spec) -> list[str]:
    assert spec.argv[: len(RQWORKER)] == RQWORKER, spec.argv
    return spec.argv[len(RQWORKER) :]


def test_netbox_queues_and_sync_queue_have_a_worker_each(tmp_path):
    processes = netbox_processes(tmp_path)
    workers = {name: queues_of(spec) for name, spec in processes.items() if name != "netbox"}
    assert workers == {
        "rqworker": ["high", "default", "low"],
        "rqworker-sync": ["netbox_proxbox.sync"],
    }
    assert tuple(workers["rqworker"]) == NETBOX_QUEUES
    assert workers["rqworker-sync"] == [SYNC_QUEUE]
    for name in workers:
        spec = processes[name]
        # Each worker logs apart, so a sync's trace is not buried under NetBox's jobs.
        assert spec.log_file == tmp_path / "logs" / f"{name}.log"
        assert spec.env["PROXBOX_REDIS_DATABASES"] == "4,5"
        assert spec.stop_timeout == 30
