"""Debian's Chromium for the browser tests of every package: where it is, how it starts,
and the rule that CI must have it (`.ci/run` installs it) while a laptop may skip.

Playwright drives it through `executable_path`; no browser is ever downloaded. A failed
browser test keeps a screenshot of each of its pages under `artifacts_dir()`.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

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


ARTIFACTS_ENV = "PROXBOX_TEST_ARTIFACTS"


def artifacts_dir() -> Path:
    """Where failed browser tests leave their screenshots: `$PROXBOX_TEST_ARTIFACTS/browser`,
    else `test-artifacts/browser` under the working directory (CI uploads either)."""
    return Path(os.environ.get(ARTIFACTS_ENV) or Path.cwd() / "test-artifacts") / "browser"


def save_screenshots(test_id: str, pages) -> list[Path]:
    """A full-page PNG of every still-open page, named after the test; the paths written."""
    target = artifacts_dir()
    target.mkdir(parents=True, exist_ok=True)
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", test_id)
    saved = []
    for index, page in enumerate(pages):
        if page.is_closed():
            continue
        path = target / f"{stem}-{index}.png"
        page.screenshot(path=str(path), full_page=True)
        saved.append(path)
    return saved


class ScreenshotsOnFailure:
    """A unittest TestCase mixin: the pages passed to `keep_screenshot` are saved by
    `save_screenshots` when the test method fails.

    It hooks the test method itself because unittest runs the cleanups (which close the
    browser contexts) inside the same pytest phase, before any report hook could look.
    """

    def keep_screenshot(self, page):
        self.__dict__.setdefault("_screenshot_pages", []).append(page)
        return page

    def _callTestMethod(self, method):
        try:
            super()._callTestMethod(method)
        except BaseException:
            for path in save_screenshots(self.id(), self.__dict__.get("_screenshot_pages", [])):
                # Captured output: pytest prints it with the failure.
                print(f"screenshot kept: {path}")
            raise
