"""Embedded PostgreSQL and Redis: start, reuse, port choice, stale records, clean stop."""

from __future__ import annotations

import json
import signal
import socket
import stat
import subprocess
import sys
import time

import psutil
import psycopg
import pytest

from proxbox_devstack import postgres_server, redis_server, services
from proxbox_devstack.processes import ProcessRecord, ProcessSpec, spawn, stop, wait_ready
from proxbox_devstack.state import StackState
from proxbox_devstack.testdb import server_supports_icu


def _records(data_dir) -> dict[str, ProcessRecord]:
    state = StackState.load(data_dir)
    assert state is not None
    return {name: ProcessRecord.from_json(raw) for name, raw in state.processes.items()}


def test_embedded_services_answer_and_are_recorded(embedded):
    data_dir, started = embedded
    assert started.started == ["postgres", "redis"]
    with psycopg.connect(started.database_url) as conn:
        assert conn.execute("SELECT current_user").fetchone() == ("postgres",)
    host, port = started.redis_url.removeprefix("redis://").split(":")
    assert redis_server.ping(host, int(port))
    assert host == "127.0.0.1"
    state_file = data_dir / "stack.json"
    assert stat.S_IMODE(state_file.stat().st_mode) == 0o600
    recorded = json.loads(state_file.read_text())
    assert set(recorded["processes"]) == {"postgres", "redis"}
    assert all(record.alive() for record in _records(data_dir).values())


def test_service_logs_are_private_like_the_credentials(embedded):
    data_dir, _started = embedded
    logs = data_dir / "logs"
    assert {path.name for path in logs.iterdir()} >= {"postgres.log", "redis.log"}
    assert stat.S_IMODE(logs.stat().st_mode) == 0o700
    assert {path.name: stat.S_IMODE(path.stat().st_mode) for path in logs.iterdir()} == {
        path.name: 0o600 for path in logs.iterdir()
    }


def test_a_log_an_older_version_left_readable_is_tightened(tmp_path):
    log_file = tmp_path / "logs" / "backend.log"
    log_file.parent.mkdir(mode=0o755)
    log_file.write_text("an earlier run's lines\n")
    log_file.chmod(0o644)
    spec = ProcessSpec(
        name="talker",
        argv=[sys.executable, "-c", "print('GET /runs/x?token=***', flush=True)"],
        log_file=log_file,
        ready=lambda: True,
    )
    spawn(spec).wait(timeout=30)
    assert stat.S_IMODE(log_file.stat().st_mode) == 0o600
    # Nobody else may list or write the folder; others keep only the search bit it had.
    assert stat.S_IMODE(log_file.parent.stat().st_mode) == 0o711
    lines = log_file.read_text().splitlines()
    assert lines[0] == "an earlier run's lines" and lines[-1] == "GET /runs/x?token=***"


def test_postgres_runs_unprivileged_and_without_icu(embedded):
    data_dir, started = embedded
    postmaster = psutil.Process(_records(data_dir)["postgres"].pid)
    if psutil.Process().uids().effective == 0:
        assert postmaster.username() == postgres_server.SERVICE_ACCOUNT
    with psycopg.connect(started.database_url, autocommit=True) as conn:
        # The wheel lacks ICU: NetBox's natural_sort collation needs the stand-in.
        assert server_supports_icu(conn) is False


def test_second_start_reuses_running_services(embedded):
    data_dir, first = embedded
    before = _records(data_dir)
    again = services.start_services(data_dir, log=lambda _line: None)
    assert again.started == []
    assert (again.database_url, again.redis_url) == (first.database_url, first.redis_url)
    assert _records(data_dir) == before
    assert services.running_services(data_dir) is not None


def test_taken_default_ports_fall_back_to_free_ones(home, monkeypatch):
    blockers = []
    for port in (postgres_server.DEFAULT_PORT, redis_server.DEFAULT_PORT):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # As the servers bind: a port whose last connections linger in TIME_WAIT (the
        # previous test's server) is free for them, so it must be taken here too.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen()
        except OSError:
            pass  # already taken by something else: just as good for this test
        blockers.append(sock)
    try:
        started = services.start_services(home, log=lambda _line: None)
        try:
            assert f":{postgres_server.DEFAULT_PORT}/" not in started.database_url
            assert not started.redis_url.endswith(f":{redis_server.DEFAULT_PORT}")
            with psycopg.connect(started.database_url):
                pass
        finally:
            stopped = services.stop_services(home)
    finally:
        for sock in blockers:
            sock.close()
    assert sorted(stopped) == ["postgres", "redis"]


def test_stop_leaves_no_process_and_clears_the_record(home):
    services.start_services(home, log=lambda _line: None)
    records = _records(home)
    children = [p for r in records.values() for p in psutil.Process(r.pid).children(recursive=True)]
    services.stop_services(home)
    assert not any(record.alive() for record in records.values())
    assert not any(
        child.is_running() and child.status() != psutil.STATUS_ZOMBIE for child in children
    )
    assert StackState.load(home) is None
    assert not (home / "postgres" / "postmaster.pid").exists()


def test_unrecorded_servers_are_stopped_before_a_new_start(home):
    """Servers whose record was lost (a crashed CLI) must not block the next start or leak."""
    services.start_services(home, log=lambda _line: None)
    orphans = _records(home)
    StackState.clear(home)
    restarted = services.start_services(home, log=lambda _line: None)
    try:
        assert not any(record.alive() for record in orphans.values())
        assert restarted.started == ["postgres", "redis"]
    finally:
        services.stop_services(home)


def test_stale_record_never_stops_an_unrelated_process():
    """A recorded PID the kernel reused for another program is left alone."""
    unrelated = subprocess.Popen(["sleep", "30"])
    try:
        record = ProcessRecord(
            pid=unrelated.pid, started=ProcessRecord.of(unrelated.pid).started - 100
        )
        assert record.alive() is False
        assert stop(record) is False
        assert unrelated.poll() is None
    finally:
        unrelated.kill()
        unrelated.wait()


def test_stop_escalates_to_kill_after_the_timeout():
    ignores_term = "import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); time.sleep(60)"
    stubborn = subprocess.Popen(
        [sys.executable, "-c", ignores_term], stdout=subprocess.PIPE, start_new_session=True
    )
    assert stubborn.stdout.readline().strip() == b"1"  # the handler is installed
    record = ProcessRecord.of(stubborn.pid)
    began = time.monotonic()
    assert stop(record, signal.SIGTERM, timeout=1) is True
    # It ignored SIGTERM, so only the SIGKILL after the timeout can have ended it.
    assert time.monotonic() - began >= 1
    assert record.alive() is False
    stubborn.wait(5)


def test_external_database_url_must_answer_within_the_timeout(home, listener, monkeypatch):
    # A port that accepts TCP but never speaks PostgreSQL, checked with a short timeout.
    port = listener.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(services.StackError) as failure:
        services.check_database(f"postgresql://u:secret@127.0.0.1:{port}/db", timeout=2)
    assert time.monotonic() - started < 8
    assert "PROXBOX_DATABASE_URL=postgresql://u:***@127.0.0.1" in str(failure.value)
    assert "secret" not in str(failure.value)
    assert failure.value.exit_code == services.EXIT_SERVICE_UNREACHABLE


def test_a_process_dying_at_start_is_reported_with_its_last_log_line(tmp_path):
    spec = ProcessSpec(
        name="doomed",
        argv=[
            sys.executable,
            "-c",
            "print('FATAL: no such role', flush=True); raise SystemExit(2)",
        ],
        log_file=tmp_path / "doomed.log",
        ready=lambda: False,
    )
    popen = spawn(spec)
    with pytest.raises(services.StackError) as failure:
        wait_ready(spec, popen)
    assert str(failure.value) == (
        f"doomed exited with code 2 while starting: FATAL: no such role (see {spec.log_file})"
    )


def test_external_redis_url_is_reported_without_its_password(home, listener):
    port = listener.getsockname()[1]
    with pytest.raises(services.StackError) as failure:
        services.check_redis(f"redis://:rpw-secret@127.0.0.1:{port}/0", timeout=2)
    assert f"PROXBOX_REDIS_URL=redis://:***@127.0.0.1:{port}/0" in str(failure.value)
    assert "rpw-secret" not in str(failure.value)
