"""The Redis databases a stack's NetBox uses, leased so stacks sharing a server stay apart.

NetBox's RQ queues have fixed names (high, default, low). Two stacks whose
NetBox processes use the same Redis database therefore share their queues:
one stack's worker takes the other's jobs and fails them against the wrong
NetBox database, and the other stack's job stays pending forever. So every
`proxbox up` leases a pair of databases (tasks, caching) of its own on the
Redis server it uses:

- the lease is a key in the pair's tasks database that expires unless the
  supervisor renews it, so a killed supervisor frees its pair by itself;
- a pair is free when no lease holds it and no live RQ worker is registered
  in it (the workers a killed supervisor left behind keep their pair taken);
- the same data dir on the same host gets its own pair back, with what its
  NetBox left there (scheduled system jobs); a pair last used by another
  stack is emptied first, because the jobs left in it carry Job objects of
  that stack's NetBox database (ids a new database reuses);
- pair (0, 1) is never leased: it is what a configuration without a lease
  uses (the test suites, whose NetBox test mixins flush the queue database);
- a Redis URL that names a database is the user's choice and is not leased.

The supervisor passes the pair to its children in PROXBOX_REDIS_DATABASES,
which the NetBox configuration reads.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from proxbox_redaction import redact_url

from .errors import EXIT_FAILURE, StackError

DATABASES_ENV = "PROXBOX_REDIS_DATABASES"
LEASE_KEY = "proxbox:stack-lease"
# Who used the pair last (kept after release): a returning data dir keeps the contents.
LAST_HOLDER_KEY = "proxbox:last-holder"
LEASE_TTL = 60
FIRST_LEASED_DATABASE = 2
RQ_WORKERS_KEY = "rq:workers"

# Compare-and-set on the lease value, so a supervisor never renews or deletes a
# lease that expired and was taken by another stack meanwhile.
_RENEW = """
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('set', KEYS[1], ARGV[2], 'EX', ARGV[3])
end
return false
"""
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('del', KEYS[1])
end
return 0
"""


@dataclass(frozen=True)
class RedisDatabases:
    tasks: int
    caching: int

    def to_env(self) -> str:
        return f"{self.tasks},{self.caching}"

    def describe(self) -> str:
        return f"database {self.tasks} tasks, {self.caching} caching"


UNLEASED = RedisDatabases(0, 1)


def from_env(environ: dict[str, str] | os._Environ = os.environ) -> RedisDatabases:
    """The pair named by PROXBOX_REDIS_DATABASES ("tasks,caching"), or (0, 1)."""
    raw = environ.get(DATABASES_ENV, "").strip()
    if not raw:
        return UNLEASED
    parts = [part.strip() for part in raw.split(",")]
    if len(parts) != 2 or not all(part.isdigit() for part in parts):
        raise ValueError(
            f"{DATABASES_ENV}={raw!r} is invalid: expected two database numbers, "
            "tasks and caching, such as 2,3"
        )
    tasks, caching = (int(part) for part in parts)
    if tasks == caching:
        raise ValueError(f"{DATABASES_ENV}={raw!r}: tasks and caching need different databases")
    return RedisDatabases(tasks, caching)


def url_names_database(redis_url: str) -> bool:
    """True for URLs such as redis://host:6379/4 (the path selects a database)."""
    path = urlsplit(redis_url).path.strip("/")
    return path.isdigit()


def lease_owner(data_dir: Path) -> str:
    """Who holds a lease: this host's data dir (the same dir gets its pair back)."""
    return f"{socket.gethostname()}:{data_dir.resolve()}"


def _client(redis_url: str, database: int):
    import redis

    return redis.Redis.from_url(
        redis_url, db=database, socket_connect_timeout=5, socket_timeout=5, decode_responses=True
    )


@contextlib.contextmanager
def _connection(redis_url: str, database: int):
    client = _client(redis_url, database)
    try:
        yield client
    finally:
        client.close()


def _exists(redis_url: str, database: int) -> bool:
    import redis

    with _connection(redis_url, database) as client:
        try:
            client.ping()
        except redis.ResponseError:  # "DB index is out of range"
            return False
    return True


def candidate_pairs(redis_url: str) -> Iterator[RedisDatabases]:
    """Every leasable pair the server has: (2, 3), (4, 5), … up to its last database."""
    tasks = FIRST_LEASED_DATABASE
    while _exists(redis_url, tasks + 1):
        yield RedisDatabases(tasks, tasks + 1)
        tasks += 2


def live_rq_workers(redis_url: str, database: int) -> int:
    """RQ workers registered in `database` whose heartbeat key has not expired."""
    with _connection(redis_url, database) as client:
        keys = client.smembers(RQ_WORKERS_KEY)
        return sum(1 for key in keys if client.exists(key))


def _holder(raw: str | None) -> str | None:
    if raw is None:
        return None
    try:
        return json.loads(raw).get("owner")
    except (ValueError, AttributeError):
        return None


class RedisLease:
    """A held pair; `keep()` renews it from a background thread until `release()`."""

    def __init__(self, redis_url: str, databases: RedisDatabases, value: str, ttl: int) -> None:
        self.redis_url = redis_url
        self.databases = databases
        self.value = value
        self.ttl = ttl
        self._client = _client(redis_url, databases.tasks)
        self._stop = threading.Event()
        self._keeper: threading.Thread | None = None

    def renew(self) -> bool:
        """Extend the lease; False when it is no longer ours."""
        return bool(self._client.eval(_RENEW, 1, LEASE_KEY, self.value, self.value, self.ttl))

    def keep(self, on_lost: Callable[[str], None] = print) -> None:
        def run() -> None:
            while not self._stop.wait(self.ttl / 4):
                try:
                    if not self.renew():
                        on_lost(f"lost the lease on Redis {self.databases.describe()}")
                        return
                except Exception as exc:  # a Redis restart must not kill the supervisor
                    on_lost(f"could not renew the Redis lease: {exc}")

        self._keeper = threading.Thread(target=run, name="redis-lease", daemon=True)
        self._keeper.start()

    def empty(self) -> None:
        """Drop what the pair holds, the lease excepted: a throwaway holder (a test's
        workers) frees the pair now, instead of leaving a killed worker's registration
        to keep it taken until RQ's heartbeat expires."""
        _empty(self.redis_url, self.databases, self._client)

    def release(self) -> None:
        self._stop.set()
        if self._keeper is not None:
            self._keeper.join(timeout=5)
        with contextlib.suppress(Exception):  # unreleased, the key expires by itself
            self._client.eval(_RELEASE, 1, LEASE_KEY, self.value)
        self._client.close()


def acquire(redis_url: str, data_dir: Path, ttl: int = LEASE_TTL) -> RedisLease | None:
    """Lease a free pair for the stack of `data_dir`; None when the URL names a database."""
    if url_names_database(redis_url):
        return None
    owner = lease_owner(data_dir)
    value = json.dumps({"owner": owner, "pid": os.getpid(), "since": round(time.time(), 3)})
    pairs = list(candidate_pairs(redis_url))
    # The pair this data dir held before (a crashed supervisor's children may still use it).
    for pair in pairs:
        with _connection(redis_url, pair.tasks) as client:
            held = client.get(LEASE_KEY)
            if _holder(held) == owner and client.eval(_RENEW, 1, LEASE_KEY, held, value, ttl):
                return RedisLease(redis_url, pair, value, ttl)
    last_holders = {}
    for pair in pairs:
        with _connection(redis_url, pair.tasks) as client:
            last_holders[pair] = client.get(LAST_HOLDER_KEY)
    # The pair this data dir used last comes first: its scheduled jobs are still there.
    for pair in sorted(pairs, key=lambda pair: last_holders[pair] != owner):
        with _connection(redis_url, pair.tasks) as client:
            if not client.set(LEASE_KEY, value, nx=True, ex=ttl):
                continue
            if live_rq_workers(redis_url, pair.tasks):
                client.eval(_RELEASE, 1, LEASE_KEY, value)
                continue
            if client.get(LAST_HOLDER_KEY) != owner:
                _empty(redis_url, pair, client)
                client.set(LAST_HOLDER_KEY, owner)
        return RedisLease(redis_url, pair, value, ttl)
    raise StackError(
        f"every Redis database pair on {redact_url(redis_url)} is in use by another stack "
        f"({len(pairs)} pairs from database {FIRST_LEASED_DATABASE}): stop one with "
        "`proxbox down`, or give this stack a database of its own in PROXBOX_REDIS_URL "
        "(redis://host:port/N)",
        EXIT_FAILURE,
    )


def _empty(redis_url: str, pair: RedisDatabases, tasks_client) -> None:
    """Drop what another stack left in `pair`; the lease we hold keeps everyone else out."""
    with _connection(redis_url, pair.caching) as caching:
        caching.flushdb()
    stale = [key for key in tasks_client.scan_iter(count=1000) if key != LEASE_KEY]
    for start in range(0, len(stale), 1000):
        tasks_client.delete(*stale[start : start + 1000])


def release_owned(redis_url: str, data_dir: Path) -> list[RedisDatabases]:
    """Drop every lease this data dir holds (`proxbox down` after a killed supervisor)."""
    if url_names_database(redis_url):
        return []
    owner = lease_owner(data_dir)
    released = []
    for pair in candidate_pairs(redis_url):
        with _connection(redis_url, pair.tasks) as client:
            held = client.get(LEASE_KEY)
            if _holder(held) == owner and client.eval(_RELEASE, 1, LEASE_KEY, held):
                released.append(pair)
    return released
