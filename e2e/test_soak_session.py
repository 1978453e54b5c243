"""`nox -s soak`, the nightly-size session, run whole at a few dozen guests.

The nightly run takes hours, so nothing else would notice its parts drifting apart:
the sync benchmark, the live-sync benchmark and the fuzz suites at an example budget.
Here it runs as an operator starts it, with the environment knobs it documents, and
must print each part's figures and end well; its fuzzing runs the suites at their own
derandomized budgets. `nox -s soak_smoke` runs it (minutes; not part of `tests`).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GUESTS = 20
SESSION_TIMEOUT = 900


def test_soak_session_runs_every_part_at_small_size():
    env = {
        **os.environ,
        "PROXBOX_SOAK_GUESTS": str(GUESTS),
        "PROXBOX_SOAK_WATCH_ARGS": (
            f"--guests {GUESTS} --burst {GUESTS} --poll 1 --samples 2 --idle 2"
        ),
        # The fuzz suites at the derandomized budgets CI gives them: nothing by chance.
        "PROXBOX_FUZZ_EXAMPLES": "ci",
    }
    result = subprocess.run(
        [sys.executable, "-m", "nox", "-s", "soak"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=SESSION_TIMEOUT,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    # The sync benchmark: every phase, and the initial sync against its floor.
    for phase in ("initial sync", "no-op resync", "change-only resync", "floor (plain REST)"):
        assert re.search(rf"{GUESTS} guests\s+{re.escape(phase)}\s+[\d.]+ s", output), phase
    assert re.search(rf"{GUESTS} guests\s+initial sync [\d.]+× the floor", output)
    # The live-sync benchmark: lag percentiles, the idle watcher, the burst.
    assert re.search(r"change → NetBox over 2 changes: p50 [\d.]+ s", output)
    assert re.search(r"idle 2 s: [\d.]+ Proxmox requests per minute, 0 NetBox writes", output)
    assert re.search(rf"burst of {GUESTS} changes: all in NetBox after [\d.]+ s", output)
    # The fuzzing at the budget asked for: each suite ran and passed.
    assert "each suite's CI budget, derandomized" in output
    for suite in ("backend/tests/test_api_fuzz.py", "simulator/tests/test_api_fuzz.py"):
        assert f"pytest {suite} -p no:django" in output, suite
    assert "pytest e2e/test_plugin_api_fuzz.py" in output
    summaries = re.findall(r"=+ (\d+) passed(?:, [^=]*)? in [\d.]+s", output)
    assert len(summaries) == 3 and all(int(count) > 0 for count in summaries), summaries
    assert "Session soak was successful" in output
