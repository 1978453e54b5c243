"""Opt-in container services for the test sessions (PROXBOX_TEST_SERVICES=containers)."""

from __future__ import annotations

import psycopg
import pytest
import redis

from proxbox_devstack import containers
from proxbox_devstack.errors import EXIT_SERVICE_UNREACHABLE, StackError
from proxbox_devstack.state import DATABASE_URL_ENV, REDIS_URL_ENV

ENGINE_PROBLEM = containers.docker_engine_problem()


@pytest.mark.parametrize(
    ("value", "mode"), [(None, "auto"), ("", "auto"), ("containers", "containers")]
)
def test_the_default_is_unchanged_and_containers_are_opt_in(monkeypatch, value, mode):
    if value is None:
        monkeypatch.delenv(containers.SERVICES_ENV, raising=False)
    else:
        monkeypatch.setenv(containers.SERVICES_ENV, value)
    assert containers.services_mode() == mode


def test_an_unknown_mode_is_named(monkeypatch):
    monkeypatch.setenv(containers.SERVICES_ENV, "podman")
    with pytest.raises(
        StackError, match="PROXBOX_TEST_SERVICES='podman' is not one of auto, containers"
    ):
        containers.services_mode()


@pytest.mark.skipif(ENGINE_PROBLEM is None, reason="a Docker engine answers here")
def test_without_an_engine_containers_fail_in_one_line_before_starting_anything():
    with pytest.raises(StackError) as raised, containers.container_services():
        pass
    assert raised.value.exit_code == EXIT_SERVICE_UNREACHABLE
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("PROXBOX_TEST_SERVICES=containers needs a Docker engine")
    assert message.endswith("unset PROXBOX_TEST_SERVICES to use the embedded or external servers")


@pytest.mark.skipif(ENGINE_PROBLEM is not None, reason=f"no Docker engine: {ENGINE_PROBLEM}")
def test_containers_serve_postgresql_and_redis_from_the_production_images():
    with containers.container_services() as urls:
        with psycopg.connect(urls[DATABASE_URL_ENV]) as conn:
            assert conn.execute("show server_version").fetchone()[0].startswith("17")
        client = redis.Redis.from_url(urls[REDIS_URL_ENV])
        try:
            assert client.ping()
            assert client.info("server")["redis_version"].startswith("7.")
        finally:
            client.close()
