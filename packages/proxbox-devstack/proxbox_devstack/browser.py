"""Debian's Chromium for the browser tests of every package: where it is, how it starts,
and the rule that CI must have it (`.ci/run` installs it) while a laptop may skip.

Playwright drives it through `executable_path`; no browser is ever downloaded.
"""

from __future__ import annotations

import os
import shutil

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)


def requires_chromium() -> pytest.MarkDecorator:
    """A module's `pytestmark`: skip without Chromium, except under CI, where it is an error."""
    if os.environ.get("CI") and not shutil.which(CHROMIUM):
        raise RuntimeError(f"CI needs Debian's chromium at {CHROMIUM} (.ci/run installs it)")
    return pytest.mark.skipif(not shutil.which(CHROMIUM), reason="needs Debian's chromium")


def launch(playwright):
    """A headless Chromium browser from a started Playwright (sync or async API)."""
    return playwright.chromium.launch(executable_path=CHROMIUM, args=list(CHROMIUM_ARGS))
