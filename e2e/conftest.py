"""End-to-end fixtures: a real `proxbox up` stack, started and stopped by the tests.

The stack runs from a private PROXBOX_HOME in pytest's temp dir, on a free
port, with its own NetBox database (`devstack_e2e_<pid>`, dropped afterwards).
When PROXBOX_DATABASE_URL / PROXBOX_REDIS_URL are set (nox exports the
session's services), the stack uses those servers and the migrated template
already on them; otherwise embedded servers start once from the default data
dir (`services_env`) and every stack of the session uses them.

Later suites reuse `stack` (a running stack: URLs, admin token) and
`start_stack` (another stack with extra options or environment).

Run: uv run nox -s e2e, or uv run pytest e2e/test_stack.py
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest
from proxbox_processes import free_port
from stack_support import UP_TIMEOUT, Stack, drop_database

# One NetBox (and work dir) for every sync suite of the session: a fixture assigned in
# each module would be a session fixture per module, one NetBox start (a minute) each.
# A suite that writes arbitrary data (the API fuzzing) assigns its own.
from sync_fixtures import netbox_server, sync_workdir  # noqa: F401

from proxbox_devstack.paths import data_dir as default_data_dir
from proxbox_devstack.services import start_services, stop_services
from proxbox_devstack.state import DATABASE_URL_ENV, REDIS_URL_ENV


@pytest.fixture(scope="session")
def services_env() -> Iterator[dict[str, str]]:
    """Database and Redis for every stack of the session.

    Without URLs in the environment, embedded servers start once from the
    default data dir (where the migrated template survives between runs) and
    their URLs are exported, so each stack reuses them instead of building a
    template of its own.
    """
    if os.environ.get(DATABASE_URL_ENV) and os.environ.get(REDIS_URL_ENV):
        yield {}
        return
    data_dir = default_data_dir()
    started = start_services(data_dir)
    exported = started.env()
    os.environ.update(exported)
    try:
        yield exported
    finally:
        for name in exported:
            os.environ.pop(name, None)
        stop_services(data_dir, tuple(started.started))


@pytest.fixture(scope="session")
def start_stack(tmp_path_factory, services_env) -> Iterator[Callable[..., Stack]]:
    """Start a detached stack; every stack started this way is stopped at the end."""
    started: list[Stack] = []

    def start(name: str = "stack", *args: str, **extra_env: str) -> Stack:
        home = tmp_path_factory.mktemp(f"e2e-{name}")
        database = f"devstack_e2e_{os.getpid()}_{name}"
        env = dict(os.environ, PROXBOX_HOME=str(home), PROXBOX_NETBOX_DATABASE=database)
        env.update(extra_env)
        stack = Stack(home=home, port=free_port(), env=env, database=database)
        started.append(stack)
        result = stack.proxbox("up", "-d", "--port", str(stack.port), *args, timeout=UP_TIMEOUT)
        stack.up_output = result.stdout + result.stderr
        assert result.returncode == 0, stack.up_output
        stack.records = stack.recorded_processes()
        return stack

    yield start
    for stack in started:
        stack.stop()
        drop_database(stack.env, stack.database)
        drop_database(stack.env, f"{stack.database}_simulator")


@pytest.fixture(scope="session")
def stack(start_stack, tmp_path_factory) -> Stack:
    """One running stack shared by the session's tests, with a template cache of its own
    (empty at the start) and the shipped dumps ignored: as on a release no dump matches,
    its `up` must leave the template's dump in the cache."""
    cache = tmp_path_factory.mktemp("template-cache")
    return start_stack("main", PROXBOX_TEMPLATE_CACHE=str(cache), PROXBOX_NO_SHIPPED_DUMPS="1")


# How the suite is spread over pytest-xdist workers (`nox` runs it with `-n 2`): a module
# is a unit, so its module-scoped servers start once; modules that share state beyond
# their own fixtures form one unit: the two that use the session's `stack` (one
# `proxbox up` for both) and the two that sync the session's shared simulators into one
# NetBox, in file order.
SHARED_UNITS = {
    "e2e/test_stack.py": "stack",
    "e2e/test_stack_sync.py": "stack",
    "e2e/test_sync_cluster.py": "shared simulators",
    "e2e/test_sync_endpoints.py": "shared simulators",
}
# The longest units start first so the workers finish together: seconds each took on two
# xdist workers beside the other suites (a scheduling hint only; a unit not listed
# starts last).
UNIT_SECONDS = {
    "stack": 260,
    "e2e/test_chaos_workers.py": 200,
    "e2e/test_sync_policy.py": 190,
    "e2e/test_sync_incremental.py": 155,
    "shared simulators": 135,
    "e2e/test_plugin_api_fuzz.py": 125,
    "e2e/test_sync_watch.py": 100,
    "e2e/test_chaos.py": 95,
    "e2e/test_sync_sdn.py": 90,
    "e2e/test_sync_majors.py": 80,
    "e2e/test_compliance.py": 80,
    "e2e/test_chaos_postgres.py": 75,
    "e2e/test_secrets.py": 75,
    "e2e/test_sync_node_hardware.py": 65,
    "e2e/test_sync_webhook.py": 65,
    "e2e/test_ipam_hygiene.py": 65,
    "e2e/test_sync_breadth.py": 60,
    "e2e/test_sync_prefixes.py": 60,
    "e2e/test_sync_guest_network.py": 55,
    "e2e/test_sync_preview.py": 55,
    "e2e/test_sync_permissions.py": 35,
    "e2e/test_sync_kept_addresses.py": 30,
    "e2e/test_chaos_faults.py": 20,
    "e2e/test_sync_assignment_rules.py": 15,
    "e2e/test_sync_ha_rules.py": 15,
    "e2e/test_sync_adoption.py": 10,
}


def work_unit(nodeid: str) -> str:
    module = nodeid.split("::", 1)[0]
    return SHARED_UNITS.get(module, module)


def pytest_collection_modifyitems(config, items):
    """Longest units first (a stable sort: file order within a unit)."""
    items.sort(key=lambda item: -UNIT_SECONDS.get(work_unit(item.nodeid), 0))


def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class WorkUnits(LoadScopeScheduling):
        """pytest-xdist's per-module scheduling with the units above, in collection order."""

        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    config.option.loadscopereorder = False
    return WorkUnits(config, log)
