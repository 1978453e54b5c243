"""Where the developer stack keeps its state."""

from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "PROXBOX_HOME"


def repo_root() -> Path:
    """The workspace root: the nearest ancestor holding the uv workspace definition.

    Searched from the working directory first (a user running `uv run proxbox`
    inside a checkout), then from this file (an editable install).
    """
    for start in (Path.cwd(), Path(__file__).resolve().parent):
        for candidate in (start, *start.parents):
            pyproject = candidate / "pyproject.toml"
            if pyproject.is_file() and "[tool.uv.workspace]" in pyproject.read_text("utf-8"):
                return candidate
    return Path.cwd()


def data_dir() -> Path:
    """The stack's data directory: `$PROXBOX_HOME`, else `.proxbox/` at the repo root."""
    configured = os.environ.get(HOME_ENV)
    return Path(configured).expanduser().resolve() if configured else repo_root() / ".proxbox"
