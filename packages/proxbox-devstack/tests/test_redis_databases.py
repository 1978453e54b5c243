"""Redis database leases: stacks sharing one Redis server never share NetBox's queues.

Each test runs its own Redis-protocol server (the one the stack would start) so that leases held
by stacks running on the machine's Redis do not change what the tests see.
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import rq
from proxbox_processes import free_port

from proxbox_devstack import redis_databases
from proxbox_devstack.errors import StackError
from proxbox_devstack.redis_databases import RedisDatabases, acquire, release_owned
from proxbox_devstack.redis_server import ping, server_binary

DATABASES = 10  # pairs (2, 3), (4, 5), (6, 7), (8, 9)
PAIRS = [RedisDatabases(n, n + 1) for n in (2, 4, 6, 8)]


@contextlib.contextmanager
def private_redis(directory: Path, databases: int) -> Iterator[str]:
    """A redis-server with `databases` databases on a free port; yields its URL."""
    port = free_port()
    args = ["--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    args += ["--databases", str(databases), "--dir", str(directory)]
    server = subprocess.Popen([str(server_binary()), *args], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not ping("127.0.0.1", port):
            assert server.poll() is None and time.monotonic() < deadline, (
                "redis-server did not start"
            )
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(10)


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    with private_redis(tmp_path, DATABASES) as url:
        yield url


def test_stacks_get_different_pairs_and_a_data_dir_gets_its_own_back(redis_url, tmp_path):
    first = acquire(redis_url, tmp_path / "first")
    second = acquire(redis_url, tmp_path / "second")
    assert first.databases == PAIRS[0]
    assert second.databases == PAIRS[1]
    # A restarted supervisor of the same data dir (its old children may still run).
    again = acquire(redis_url, tmp_path / "first")
    assert again.databases == PAIRS[0]
    assert not first.renew()  # the old supervisor's lease is superseded
    assert again.renew()


def test_a_released_or_expired_pair_is_free_again(redis_url, tmp_path):
    released = acquire(redis_url, tmp_path / "released")
    expiring = acquire(redis_url, tmp_path / "expiring", ttl=1)
    released.release()
    assert acquire(redis_url, tmp_path / "next").databases == released.databases
    time.sleep(1.5)
    assert not expiring.renew()
    assert acquire(redis_url, tmp_path / "after").databases == expiring.databases


def test_a_pair_with_a_live_rq_worker_is_not_leased(redis_url, tmp_path):
    # The worker a killed supervisor left behind still takes jobs from its pair.
    orphan = rq.Worker(["default"], connection=redis.Redis.from_url(redis_url, db=PAIRS[0].tasks))
    orphan.register_birth()
    try:
        assert acquire(redis_url, tmp_path / "stack").databases == PAIRS[1]
    finally:
        orphan.register_death()
    assert acquire(redis_url, tmp_path / "later").databases == PAIRS[0]


def test_concurrent_stacks_each_get_a_pair_of_their_own(redis_url, tmp_path):
    barrier = threading.Barrier(len(PAIRS) + 1)
    leased: list[RedisDatabases] = []
    refused: list[str] = []

    def start(name: str) -> None:
        barrier.wait()
        try:
            leased.append(acquire(redis_url, tmp_path / name).databases)
        except StackError as exc:
            refused.append(str(exc))

    threads = [threading.Thread(target=start, args=(f"stack{i}",)) for i in range(len(PAIRS) + 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(leased, key=lambda pair: pair.tasks) == PAIRS
    assert len(refused) == 1
    assert redis_url in refused[0] and "proxbox down" in refused[0]


def test_keep_renews_the_lease_until_release(redis_url, tmp_path):
    lease = acquire(redis_url, tmp_path / "kept", ttl=2)
    lease.keep(on_lost=pytest.fail)
    time.sleep(3)  # longer than the TTL: only renewal keeps it
    other = acquire(redis_url, tmp_path / "other")
    assert other.databases != lease.databases
    lease.release()
    client = redis.Redis.from_url(redis_url, db=lease.databases.tasks)
    assert client.get(redis_databases.LEASE_KEY) is None


def test_down_releases_what_a_killed_supervisor_held(redis_url, tmp_path):
    acquire(redis_url, tmp_path / "crashed")  # never released: its supervisor was killed
    kept = acquire(redis_url, tmp_path / "running")
    assert release_owned(redis_url, tmp_path / "crashed") == [PAIRS[0]]
    assert kept.renew()
    assert acquire(redis_url, tmp_path / "new").databases == PAIRS[0]


def test_a_url_that_names_a_database_is_not_leased(redis_url, tmp_path):
    assert acquire(f"{redis_url}/5", tmp_path / "stack") is None
    assert release_owned(f"{redis_url}/5", tmp_path / "stack") == []


def test_a_server_without_spare_databases_is_a_clear_error(tmp_path):
    with (
        private_redis(tmp_path, 2) as url,
        pytest.raises(StackError, match="0 pairs from database 2"),
    ):
        acquire(url, tmp_path / "stack")


def test_a_pair_another_stack_used_is_handed_out_empty(redis_url, tmp_path):
    first = acquire(redis_url, tmp_path / "first")
    tasks = redis.Redis.from_url(redis_url, db=first.databases.tasks)
    caching = redis.Redis.from_url(redis_url, db=first.databases.caching)
    # What a NetBox leaves behind: a job scheduled for tomorrow, cached pages.
    tasks.zadd("rq:scheduled:default", {"housekeeping": time.time() + 86400})
    caching.set(":1:views.cache", "page")
    first.release()

    second = acquire(redis_url, tmp_path / "second")
    assert second.databases == first.databases
    assert tasks.exists("rq:scheduled:default") == 0 and caching.dbsize() == 0
    assert second.renew()


def test_a_returning_data_dir_gets_its_pair_back_with_its_contents(redis_url, tmp_path):
    lower = acquire(redis_url, tmp_path / "lower")
    home = acquire(redis_url, tmp_path / "home")
    tasks = redis.Redis.from_url(redis_url, db=home.databases.tasks)
    tasks.zadd("rq:scheduled:default", {"housekeeping": time.time() + 86400})
    home.release()
    lower.release()  # a lower pair is free too, but not the one this data dir used

    again = acquire(redis_url, tmp_path / "home")
    assert again.databases == home.databases
    assert tasks.zcard("rq:scheduled:default") == 1
