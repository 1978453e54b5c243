"""PostgreSQL and Redis for the test sessions from containers: opt-in where a Docker
engine runs (`PROXBOX_TEST_SERVICES=containers`), with the images compose/ uses in
production. Without it the sessions keep their default: the servers the environment's
URLs name, else the embedded ones (`services.start_services`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from .errors import EXIT_FAILURE, EXIT_SERVICE_UNREACHABLE, StackError
from .state import DATABASE_URL_ENV, REDIS_URL_ENV

SERVICES_ENV = "PROXBOX_TEST_SERVICES"
AUTO, CONTAINERS = "auto", "containers"
# The production images: compose/docker-compose.yml runs the same (a test keeps them equal).
POSTGRES_IMAGE = "postgres:17"
REDIS_IMAGE = "redis:7"
POSTGRES_PASSWORD = "postgres"


def services_mode() -> str:
    """`auto` (the default) or `containers`; anything else is refused in one line."""
    mode = os.environ.get(SERVICES_ENV, "").strip() or AUTO
    if mode not in (AUTO, CONTAINERS):
        raise StackError(
            f"{SERVICES_ENV}={mode!r} is not one of {AUTO}, {CONTAINERS}", EXIT_FAILURE
        )
    return mode


def docker_engine_problem() -> str | None:
    """Why no Docker engine answers here, or None when one does."""
    try:
        import docker

        client = docker.from_env(timeout=5)
        try:
            client.ping()
        finally:
            client.close()
    except Exception as exc:  # the SDK raises several unrelated types for "no engine"
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return None


@contextmanager
def container_services() -> Iterator[dict[str, str]]:
    """Start PostgreSQL and Redis containers; yield their URLs; remove them afterwards."""
    problem = docker_engine_problem()
    if problem is not None:
        raise StackError(
            f"{SERVICES_ENV}={CONTAINERS} needs a Docker engine, and none answers ({problem}); "
            f"unset {SERVICES_ENV} to use the embedded or external servers",
            EXIT_SERVICE_UNREACHABLE,
        )
    from testcontainers.community.postgres import PostgresContainer
    from testcontainers.community.redis import RedisContainer

    postgres = PostgresContainer(
        POSTGRES_IMAGE,
        username="postgres",
        password=POSTGRES_PASSWORD,
        dbname="postgres",
        driver=None,
    )
    with postgres, RedisContainer(REDIS_IMAGE) as redis:
        host = redis.get_container_host_ip()
        yield {
            DATABASE_URL_ENV: postgres.get_connection_url(driver=None),
            REDIS_URL_ENV: f"redis://{host}:{redis.get_exposed_port(6379)}",
        }
