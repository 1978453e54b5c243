"""Runs forked from the warm NetBox process behave as the `python` children they replace:
exit code, output, environment, database and process group (a timeout kills what the run
started); a run whose environment differs from the warm process's starts cold."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import time

import pytest
from django.db import connection

from proxbox_devstack import warm_netbox

REPORT = textwrap.dedent(
    """
    import json, os, sys
    from django.apps import apps
    ready_at_start = apps.ready  # before anything here set NetBox up
    import django
    django.setup()
    from django.db import connection
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_database()")
        database = cursor.fetchone()[0]
    print(json.dumps({
        "argv": sys.argv[1:],
        "ready_at_start": ready_at_start,
        "parent": os.getppid(),
        "config": os.environ.get("PROXBOX_TEST_PLUGIN_CONFIG"),
        "database": database,
    }))
    print("to stderr", file=sys.stderr)
    sys.exit(3)
    """
)


@pytest.fixture
def report(tmp_path):
    path = tmp_path / "report.py"
    path.write_text(REPORT)
    return str(path)


def environment(**extra: str) -> dict[str, str]:
    return {**os.environ, "PROXBOX_NETBOX_DATABASE": connection.settings_dict["NAME"], **extra}


@pytest.mark.django_db(transaction=True)
def test_a_run_is_forked_warm_and_returns_what_a_child_would(report):
    done = warm_netbox.run(
        report, ["--burst", "q"], environment(PROXBOX_TEST_PLUGIN_CONFIG="{}"), 120
    )
    assert done.returncode == 3, done.stderr
    assert done.stderr.strip() == "to stderr"
    seen = json.loads(done.stdout)
    assert seen["argv"] == ["--burst", "q"]
    assert seen["ready_at_start"] is True  # NetBox was set up before the run began
    assert seen["parent"] == warm_netbox._server.process.pid
    assert seen["config"] == "{}"
    assert seen["database"] == connection.settings_dict["NAME"]

    # A run variable may change from run to run; the same warm process serves it.
    again = warm_netbox.run(report, [], environment(PROXBOX_TEST_PLUGIN_CONFIG='{"a": 1}'), 120)
    assert json.loads(again.stdout)["config"] == '{"a": 1}'
    assert json.loads(again.stdout)["parent"] == warm_netbox._server.process.pid


@pytest.mark.django_db(transaction=True)
def test_another_environment_starts_cold(report):
    warm_netbox.run(report, [], environment(), 120)  # the warm process exists
    done = warm_netbox.run(report, [], environment(PROXBOX_DEBUG="1"), 120)
    seen = json.loads(done.stdout)
    assert done.returncode == 3
    assert seen["ready_at_start"] is False
    assert seen["parent"] == os.getpid()


@pytest.mark.django_db(transaction=True)
def test_a_timeout_kills_the_run_and_what_it_started(tmp_path):
    marker = tmp_path / "grandchild.pid"
    script = tmp_path / "hang.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import os, time
            pid = os.fork()
            if pid == 0:
                time.sleep(600)
                os._exit(0)
            open({str(marker)!r}, "w").write(str(pid))
            time.sleep(600)
            """
        )
    )
    with pytest.raises(subprocess.TimeoutExpired):
        warm_netbox.run(str(script), [], environment(), 2)
    grandchild = int(marker.read_text())

    def state() -> str:
        try:
            with open(f"/proc/{grandchild}/stat") as stat:
                return stat.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return "gone"

    # Killed with its group (it may linger as a zombie until init reaps it). SIGKILL is
    # delivered asynchronously: a loaded machine showed it still running ("R") a moment
    # after the kill, so its death is awaited briefly rather than read once.
    deadline = time.monotonic() + 10
    while state() not in ("gone", "Z") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert state() in ("gone", "Z"), state()
