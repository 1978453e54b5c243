"""The documentation site: the workspace's READMEs and docs/ as one site (zensical,
configured by the root mkdocs.yml), built offline and strictly (a broken link between
pages fails the build). Used by the `docs` nox session and its test.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from .release import WORKSPACE_ROOT, workspace_packages

CONFIG = "mkdocs.yml"
BUILD = ".docs-build"
# Besides docs/: the top-level README, compose/, and each package's README and CHANGELOG.
PAGES = ("README.md", "CHANGELOG.md")
ASSETS = (".md", ".svg", ".png")


def sources(root: Path = WORKSPACE_ROOT) -> list[Path]:
    """Every file of the site, relative to the repository root."""
    files = [Path("README.md"), Path("compose/README.md")]
    for package in workspace_packages(root):
        for name in PAGES:
            path = package.directory / name
            if path.is_file():
                files.append(path.relative_to(root))
    files += sorted(p.relative_to(root) for p in (root / "docs").rglob("*") if p.suffix in ASSETS)
    return files


def assemble(root: Path = WORKSPACE_ROOT) -> Path:
    """Copy the site's files into <root>/.docs-build/src, keeping their paths."""
    src = root / BUILD / "src"
    if src.exists():
        shutil.rmtree(src)
    for relative in sources(root):
        target = src / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / relative, target)
    return src


def build(root: Path = WORKSPACE_ROOT) -> subprocess.CompletedProcess:
    """Assemble and build strictly; the result carries zensical's output."""
    assemble(root)
    zensical = Path(sys.executable).parent / "zensical"
    return subprocess.run(
        [str(zensical), "build", "--strict", "--clean", "--config-file", str(root / CONFIG)],
        cwd=root,
        capture_output=True,
        text=True,
        env={"NO_COLOR": "1", "PATH": str(zensical.parent)},
    )


def site_dir(root: Path = WORKSPACE_ROOT) -> Path:
    return root / BUILD / "site"
