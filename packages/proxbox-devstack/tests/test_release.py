"""Release artifacts: every package's wheel and sdist as `uv build` makes them.

The slow half (a clean virtualenv per wheel, NetBox loading the plugins) is the
`release` nox session; this checks the artifacts themselves.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from importlib import import_module
from pathlib import Path

import pytest

from proxbox_devstack import release

pytestmark = pytest.mark.skipif(shutil.which("uv") is None, reason="uv builds the artifacts")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    release.build(out)
    return out


def test_every_package_builds_a_releasable_wheel_and_sdist(built):
    packages = release.workspace_packages()
    assert {p.name for p in packages} >= {
        "netbox-proxbox-platform",
        "netbox-script-projects",
        "proxbox-devstack",
        "proxbox-redaction",
        "proxbox-processes",
        "proxmox-simulator",
        "proxbox-backend",
    }
    assert release.release_problems(built, packages) == []


def test_plugin_wheels_do_not_require_netbox_nor_ship_tests(built):
    for package in release.workspace_packages():
        if package.name not in release.PLUGINS:
            continue
        names, fields = release.wheel_metadata(release.artifact(built, package, "wheel"))
        assert not [r for r in fields.get("Requires-Dist", []) if r.startswith("netbox")]
        assert not [n for n in names if "/tests/" in n]
        assert f"{package.module}/__init__.py" in names


def _wheel(path: Path, requires: list[str], files: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w") as wheel:
        metadata = ["Metadata-Version: 2.4", "Name: netbox-proxbox-platform", "Version: 0.1.0"]
        metadata += [f"Requires-Dist: {r}" for r in requires]
        wheel.writestr(
            "netbox_proxbox_platform-0.1.0.dist-info/METADATA", "\n".join(metadata) + "\n"
        )
        for name, text in files.items():
            wheel.writestr(name, text)
    return path


def test_the_check_names_what_a_bad_wheel_gets_wrong(tmp_path):
    package = release.Package("netbox-proxbox-platform", tmp_path, "0.1.0", (), "netbox_proxbox")
    bad = _wheel(
        tmp_path / "bad.whl",
        ["netbox==4.7.*", "proxbox-redaction"],
        {"netbox_proxbox/tests/test_models.py": ""},
    )
    problems = "\n".join(release.wheel_problems(bad, package, {"proxbox-redaction"}))
    assert "ships tests (netbox_proxbox/tests/test_models.py)" in problems
    assert "no license file" in problems
    assert "requires netbox==4.7.*" in problems
    assert "'proxbox-redaction' is not a range" in problems
    assert "no Classifier" in problems


@pytest.mark.parametrize(
    ("readme", "module"),
    [
        ("netbox-plugin/README.md", "netbox_proxbox"),
        ("packages/netbox-script-projects/README.md", "netbox_script_projects"),
    ],
)
def test_compatibility_table_matches_the_plugin_config(readme, module):
    text = (release.WORKSPACE_ROOT / readme).read_text()
    section = text.split("## Compatibility", 1)[1].split("\n## ", 1)[0]
    config = import_module(module).config
    minor = ".".join(config.version.split(".")[:2])
    row = re.search(rf"^\| {re.escape(minor)}\.x \| (\S+) – (\S+) \|", section, re.M)
    assert row, f"no Compatibility row for {minor}.x in {readme}"
    assert (row.group(1), row.group(2)) == (config.min_version, config.max_version)


def test_the_guides_local_requirements_install_the_plugin_wheels(built, tmp_path):
    """NetBox's upgrade.sh installs /opt/netbox/local_requirements.txt: the guide's lines
    (their wheel names and versions) install both plugins from the built wheels."""
    guide = (release.WORKSPACE_ROOT / "docs" / "operator-guide.md").read_text()
    block = guide.split("# /opt/netbox/local_requirements.txt\n", 1)[1].split("```", 1)[0]
    lines = [line.replace("/opt/proxbox/dist/", f"{built}/") for line in block.splitlines()]
    requirements = tmp_path / "local_requirements.txt"
    requirements.write_text("\n".join(lines) + "\n")
    target = tmp_path / "site-packages"
    subprocess.run(
        ["uv", "pip", "install", "--quiet", "--no-deps", "--python", sys.executable]
        + ["--target", str(target), "-r", str(requirements)],
        check=True,
        timeout=120,
    )
    plugins = [p for p in release.workspace_packages() if p.name in release.PLUGINS]
    assert len(lines) == len(plugins)
    for package in plugins:
        assert (target / package.module / "__init__.py").is_file(), package.name
