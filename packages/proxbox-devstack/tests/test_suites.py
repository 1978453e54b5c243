"""The suite runner `nox` uses: suites side by side, every one run, each one's figures."""

from __future__ import annotations

import pytest

from proxbox_devstack import suites as runner


@pytest.fixture
def project(tmp_path):
    """One-test suites: one passes, one fails, and one that records when it starts and
    ends and ends only once a second one has started (or 60 s have passed)."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_passes.py").write_text("def test_ok():\n    assert True\n")
    (tmp_path / "test_fails.py").write_text("def test_broken():\n    assert 1 == 2, 'broken'\n")
    (tmp_path / "test_meets.py").write_text(
        "import os, time\n\n"
        "def test_meets():\n"
        "    marks = os.environ['MARKS']\n"
        "    with open(marks, 'a') as f:\n"
        "        f.write('start\\n')\n"
        "    deadline = time.monotonic() + float(os.environ['WAIT'])\n"
        "    while open(marks).read().count('start') < 2 and time.monotonic() < deadline:\n"
        "        time.sleep(0.05)\n"
        "    with open(marks, 'a') as f:\n"
        "        f.write('end\\n')\n"
    )
    return tmp_path


def _suite(project, name: str, marks, wait: float = 60) -> runner.Suite:
    return runner.Suite(
        name,
        [str(project / f"test_{name}.py"), "-c", str(project / "pytest.ini")],
        env={"MARKS": str(marks), "WAIT": str(wait), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
    )


def test_every_suite_runs_and_a_failure_shows_its_output(project, tmp_path):
    said: list[str] = []
    marks = tmp_path / "marks"
    suites = [_suite(project, "fails", marks), _suite(project, "passes", marks)]
    outcomes = runner.run_suites(suites, tmp_path / "logs", 1, {}, say=said.append)

    assert [(o.suite.name, o.passed) for o in outcomes] == [("fails", False), ("passes", True)]
    text = "\n".join(said)
    assert "fails: FAILED (exit 1)" in text
    assert "AssertionError: broken" in text  # the failed suite's whole log is printed
    assert "passes: passed in" in text
    table = said[-1]
    assert table.startswith("suite durations (1 at once):")
    assert "FAILED  fails" in table and "passed  passes" in table and "wall clock" in table


def test_suites_run_side_by_side_up_to_the_limit(project, tmp_path):
    marks = tmp_path / "marks"
    first = _suite(project, "meets", marks)
    second = runner.Suite("meets again", first.argv, first.env)
    outcomes = runner.run_suites([first, second], tmp_path / "logs", 2, {}, say=lambda _: None)
    assert all(o.passed for o in outcomes)
    # Both started before either ended: they ran at the same time.
    assert marks.read_text().split() == ["start", "start", "end", "end"]


def test_one_at_a_time_when_the_limit_is_one(project, tmp_path):
    marks = tmp_path / "marks"
    first = _suite(project, "meets", marks, wait=1)
    second = runner.Suite("meets again", first.argv, first.env)
    runner.run_suites([first, second], tmp_path / "logs", 1, {}, say=lambda _: None)
    assert marks.read_text().split() == ["start", "end", "start", "end"]


@pytest.mark.parametrize("raw", ["0", "two", "-1"])
def test_a_bad_job_count_is_refused_by_name(raw):
    with pytest.raises(ValueError, match=f"PROXBOX_TEST_JOBS={raw!r} is invalid"):
        runner.jobs_from_env({"PROXBOX_TEST_JOBS": raw})


def test_the_job_count_defaults_to_two():
    assert runner.jobs_from_env({}) == 2
    assert runner.jobs_from_env({"PROXBOX_TEST_JOBS": "3"}) == 3
