"""The `proxbox` command's failures: one clear line on stderr and a distinct exit code."""

from __future__ import annotations

import importlib.metadata
import json
import time

import pytest
from proxbox_processes import free_port

from proxbox_devstack import cli
from proxbox_devstack.errors import (
    EXIT_DATA_DIR,
    EXIT_NOT_RUNNING,
    EXIT_PORT_IN_USE,
    EXIT_PYTHON_VERSION,
    EXIT_SERVICE_UNREACHABLE,
)

from .conftest import cli_env, run_cli


def _one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    return lines[0]


def test_port_in_use_names_the_port_and_the_option(tmp_path, listener):
    port = listener.getsockname()[1]
    result = run_cli("up", "--port", str(port), env=cli_env(tmp_path / "home"))
    assert result.returncode == EXIT_PORT_IN_USE
    assert _one_line(result.stderr) == (
        f"proxbox: port {port} on 127.0.0.1 is in use: choose another with --port"
    )


def test_detached_up_fails_the_same_way_before_detaching(tmp_path, listener):
    port = listener.getsockname()[1]
    result = run_cli("up", "-d", "--port", str(port), env=cli_env(tmp_path / "home"))
    assert result.returncode == EXIT_PORT_IN_USE
    assert "--port" in _one_line(result.stderr)


def test_unreachable_database_url_fails_within_ten_seconds(tmp_path):
    closed = free_port()
    env = cli_env(
        tmp_path / "home",
        PROXBOX_DATABASE_URL=f"postgresql://postgres@127.0.0.1:{closed}/postgres",
    )
    began = time.monotonic()
    result = run_cli("up", "--port", str(free_port()), env=env)
    elapsed = time.monotonic() - began
    assert result.returncode == EXIT_SERVICE_UNREACHABLE
    line = _one_line(result.stderr)
    assert line.startswith(
        f"proxbox: PROXBOX_DATABASE_URL=postgresql://postgres@127.0.0.1:{closed}/postgres "
        "is unreachable after 10 s"
    )
    assert elapsed < 15  # 10 s of retries plus interpreter start-up


def test_data_dir_that_cannot_be_written(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    result = run_cli("up", env=cli_env(blocker / "home"))
    assert result.returncode == EXIT_DATA_DIR
    line = _one_line(result.stderr)
    assert line.startswith(f"proxbox: data directory {blocker / 'home'} is not writable")
    assert line.endswith("set PROXBOX_HOME to a writable directory")


def test_python_older_than_3_12_is_refused(monkeypatch, capsys):
    monkeypatch.setattr(cli.sys, "version_info", (3, 11, 9, "final", 0))
    assert cli.main(["status"]) == EXIT_PYTHON_VERSION
    assert _one_line(capsys.readouterr().err).startswith("proxbox: Python 3.11.9 is too old")


@pytest.mark.parametrize("version", [(3, 12, 0), (3, 13, 1)])
def test_supported_pythons_pass_the_check(version):
    assert cli.check_python(version) is None


def test_status_and_down_without_a_stack(tmp_path):
    env = cli_env(tmp_path / "home")
    status = run_cli("status", env=env)
    assert status.returncode == EXIT_NOT_RUNNING
    assert "no stack is running" in status.stdout
    down = run_cli("down", env=env)
    assert down.returncode == 0
    as_json = run_cli("status", "--json", env=env)
    assert as_json.returncode == EXIT_NOT_RUNNING
    assert json.loads(as_json.stdout) == {"running": False, "data_dir": str(tmp_path / "home")}


def test_version_and_exit_codes_in_help(tmp_path):
    from proxbox_devstack import __version__

    env = cli_env(tmp_path / "home")
    version = run_cli("--version", env=env)
    assert (version.returncode, version.stdout.strip()) == (0, f"proxbox {__version__}")
    assert __version__ == importlib.metadata.version("proxbox-devstack")
    usage = run_cli("--help", env=env)
    assert usage.returncode == 0
    codes = usage.stdout.split("exit codes:", 1)[1]
    for code, exit_code in [
        ("3", EXIT_PORT_IN_USE),
        ("4", EXIT_SERVICE_UNREACHABLE),
        ("5", EXIT_DATA_DIR),
        ("6", EXIT_PYTHON_VERSION),
        ("7", EXIT_NOT_RUNNING),
    ]:
        assert f"\n  {exit_code} " in codes and code == str(exit_code)


def test_services_up_detached_prints_urls_and_down_stops_them(scratch):
    env = cli_env(scratch / "home")
    started = run_cli("services", "up", "-d", env=env)
    try:
        assert started.returncode == 0, started.stderr
        urls = dict(
            line.split("=", 1)
            for line in started.stdout.splitlines()
            if line.startswith("PROXBOX_")
        )
        assert urls["PROXBOX_DATABASE_URL"].startswith("postgresql://postgres@127.0.0.1:")
        assert urls["PROXBOX_REDIS_URL"].startswith("redis://127.0.0.1:")
        status = run_cli("status", env=env)
        assert status.returncode == 0
        assert "postgres" in status.stdout and "running" in status.stdout
        report = json.loads(run_cli("status", "--json", env=env).stdout)
        assert report["running"] is True
        assert {name: p["running"] for name, p in report["processes"].items()} == {
            "postgres": True,
            "redis": True,
        }
        assert report["database_url"] == urls["PROXBOX_DATABASE_URL"]
    finally:
        stopped = run_cli("services", "down", env=env)
    assert stopped.returncode == 0
    assert "postgres" in stopped.stdout and "redis" in stopped.stdout
    assert run_cli("status", env=env).returncode == EXIT_NOT_RUNNING


def test_a_closed_pipe_ends_status_quietly(tmp_path):
    """`proxbox status --json | head -1` once head has exited: the reader of the pipe is
    gone before the status is written."""
    import sys

    from proxbox_processes import run_into_closed_pipe

    from proxbox_redaction import EXIT_BROKEN_PIPE

    result = run_into_closed_pipe(
        [sys.executable, "-m", "proxbox_devstack.cli", "status", "--json"],
        env=cli_env(tmp_path / "home"),
    )
    assert (result.returncode, result.stderr) == (EXIT_BROKEN_PIPE, "")


def test_ctrl_c_during_a_wait_prints_one_line_and_exits_130(tmp_path, listener):
    """`proxbox services up` waiting for a PostgreSQL that accepts but never answers."""
    import signal
    import subprocess
    import sys

    from proxbox_processes import interruptible, stop_process

    port = listener.getsockname()[1]
    env = cli_env(
        tmp_path / "home", PROXBOX_DATABASE_URL=f"postgresql://postgres@127.0.0.1:{port}/db"
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "proxbox_devstack.cli", "services", "up"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
        preexec_fn=interruptible,
    )
    try:
        listener.settimeout(60)
        connection, _ = listener.accept()  # the command is in its wait now
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=30)
        connection.close()
    finally:
        stop_process(process)
    assert process.returncode == 130, stderr
    assert stderr == "proxbox: interrupted\n"
