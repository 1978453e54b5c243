"""The suite runner `nox` uses: suites side by side, every one run, each one's figures."""

from __future__ import annotations

import os
import re

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
    table, machine = said[-2:]
    assert table.startswith("suite durations (1 at once):")
    assert "FAILED  fails" in table and "passed  passes" in table and "wall clock" in table
    # What the machine did meanwhile (this runs on Linux: /proc/stat is there).
    assert re.fullmatch(
        r"machine: \d+ CPUs \d+ % busy, \d+ % stolen by the host; [\d,]+ CPU-s of work while"
        r" the suites ran; a fixed piece of Python work took \d+\.\d\d CPU-s before them and"
        r" \d+\.\d\d after \(less is a faster machine\)",
        machine,
    ), machine


def _stat(path, user, system, idle, steal):
    """A /proc/stat in ticks: user nice system idle iowait irq softirq steal guest."""
    hz = os.sysconf("SC_CLK_TCK")
    ticks = [user * hz, 0, system * hz, idle * hz, 0, 0, 0, steal * hz, 5 * hz]
    path.write_text("cpu  " + " ".join(str(int(t)) for t in ticks) + "\ncpu0 1 2 3\n")
    return runner.CpuTimes.read(path)


def test_the_machine_line_reads_busy_stolen_and_work_from_proc_stat(tmp_path):
    before = _stat(tmp_path / "a", user=100, system=20, idle=400, steal=0)
    after = _stat(tmp_path / "b", user=250, system=50, idle=420, steal=20)
    assert (after.busy, after.idle, after.stolen) == (300, 420, 20)  # guest is in user
    line = runner.machine_summary(before, after, 2, 0.31, 0.35)
    # 180 CPU-s busy of 220 (180 busy, 20 idle, 20 stolen).
    assert line.startswith("machine: 2 CPUs 82 % busy, 9 % stolen by the host; 180 CPU-s")
    assert "took 0.31 CPU-s before them and 0.35 after" in line


def test_no_machine_line_without_proc_stat(tmp_path):
    assert runner.CpuTimes.read(tmp_path / "missing") is None
    (tmp_path / "other").write_text("intr 1 2 3\n")
    assert runner.CpuTimes.read(tmp_path / "other") is None
    (tmp_path / "short").write_text("cpu  1 2 3 4\n")  # fewer fields than steal needs
    assert runner.CpuTimes.read(tmp_path / "short") is None
    (tmp_path / "garbled").write_text("cpu  1 2 x 4 5 6 7 8\n")
    assert runner.CpuTimes.read(tmp_path / "garbled") is None


def test_the_reference_work_takes_cpu_time_and_is_the_fastest_of_its_repeats(monkeypatch):
    clock = iter([0.0, 0.5, 1.0, 1.3, 2.0, 2.9])
    monkeypatch.setattr(runner.time, "process_time", lambda: next(clock))
    assert runner.reference_work_seconds(repeats=3) == pytest.approx(0.3)


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
