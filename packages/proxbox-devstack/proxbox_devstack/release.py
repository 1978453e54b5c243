"""Release artifacts of the workspace: build every package, check what its wheel ships,
and smoke-test each wheel in a virtualenv of its own.

Used by the `release` nox session (build, check, install, start) and by the fast
wheel-contents test that runs with the devstack suite.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

from packaging.requirements import Requirement

WORKSPACE_ROOT = Path(__file__).resolve().parents[3]
# The host application of the plugins: never one of their requirements (a plugin
# installed into a NetBox must not pull a second NetBox); compatibility is the
# PluginConfig's min_version/max_version instead.
HOST = "netbox"
PLUGINS = ("netbox-proxbox-platform", "netbox-script-projects")
# What a release must carry besides code.
REQUIRED_METADATA = ("Classifier", "Project-URL", "License-Expression", "License-File")
# The same resolution the workspace uses (see the root pyproject's override).
PSYCOPG_OVERRIDE = "psycopg[binary,pool]==3.3.6"


@dataclass(frozen=True)
class Package:
    name: str
    directory: Path
    version: str
    scripts: tuple[str, ...]
    # The import package its wheel ships (the plugin's is not its distribution name).
    module: str


def workspace_packages(root: Path = WORKSPACE_ROOT) -> list[Package]:
    """Every distribution the workspace publishes, read from the members' pyproject files."""
    workspace = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["uv"]["workspace"]
    directories: list[Path] = []
    for pattern in workspace["members"]:
        directories.extend(
            sorted(p for p in root.glob(pattern) if (p / "pyproject.toml").is_file())
        )
    packages = []
    for directory in directories:
        pyproject = tomllib.loads((directory / "pyproject.toml").read_text())
        project = pyproject["project"]
        shipped = _hatch_wheel(pyproject).get("packages") or [project["name"].replace("-", "_")]
        packages.append(
            Package(
                name=project["name"],
                directory=directory,
                version=project["version"],
                scripts=tuple(project.get("scripts", {})),
                module=Path(shipped[0]).name,
            )
        )
    return packages


def _hatch_wheel(pyproject: dict) -> dict:
    """The `[tool.hatch.build.targets.wheel]` table, or {}."""
    table = pyproject
    for key in ("tool", "hatch", "build", "targets", "wheel"):
        table = table.get(key, {})
    return table


def normalized(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def build(out: Path, root: Path = WORKSPACE_ROOT) -> None:
    """`uv build` of every workspace package: one wheel and one sdist each, into `out`."""
    subprocess.run(
        ["uv", "build", "--all-packages", "--quiet", "--out-dir", str(out)],
        cwd=root,
        check=True,
    )


def artifact(out: Path, package: Package, kind: str) -> Path:
    stem = f"{package.name.replace('-', '_')}-{package.version}"
    path = out / (f"{stem}-py3-none-any.whl" if kind == "wheel" else f"{stem}.tar.gz")
    if not path.is_file():
        raise FileNotFoundError(f"{package.name}: no {kind} at {path}")
    return path


def wheel_metadata(path: Path) -> tuple[list[str], dict[str, list[str]]]:
    """The wheel's file names and its METADATA fields (each name: every value)."""
    with zipfile.ZipFile(path) as wheel:
        names = wheel.namelist()
        metadata_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        message = Parser().parsestr(wheel.read(metadata_name).decode())
    fields: dict[str, list[str]] = {}
    for key, value in message.items():
        fields.setdefault(key, []).append(value)
    return names, fields


def wheel_problems(path: Path, package: Package, siblings: set[str]) -> list[str]:
    """What is wrong with a package's wheel, one sentence each; empty when it is releasable."""
    names, fields = wheel_metadata(path)
    problems = [
        f"{package.name}: ships tests ({name})"
        for name in names
        if "/tests/" in f"/{name}" or Path(name).name.startswith("test_")
    ]
    if not any(".dist-info/licenses/LICENSE" in name for name in names):
        problems.append(f"{package.name}: no license file in the wheel")
    for field in REQUIRED_METADATA:
        if not fields.get(field):
            problems.append(f"{package.name}: no {field} in the metadata")
    if fields.get("Version") != [package.version]:
        problems.append(f"{package.name}: wheel version {fields.get('Version')} != pyproject")
    for line in fields.get("Requires-Dist", []):
        requirement = Requirement(line)
        name = normalized(requirement.name)
        if package.name in PLUGINS and name == HOST:
            problems.append(f"{package.name}: requires {line} (the host must not be a dependency)")
        if name in siblings:
            bounds = {spec.operator for spec in requirement.specifier}
            if not ({">=", "~=", "=="} & bounds and ({"<", "~=", "=="} & bounds)):
                problems.append(f"{package.name}: sibling requirement {line!r} is not a range")
    scripts = set()
    entry_points = next((n for n in names if n.endswith(".dist-info/entry_points.txt")), None)
    if entry_points:
        with zipfile.ZipFile(path) as wheel:
            text = wheel.read(entry_points).decode()
        section = ""
        for line in text.splitlines():
            if line.startswith("["):
                section = line.strip("[]")
            elif section == "console_scripts" and "=" in line:
                scripts.add(line.split("=", 1)[0].strip())
    if scripts != set(package.scripts):
        problems.append(f"{package.name}: entry points {sorted(scripts)} != {package.scripts}")
    return problems


def sdist_problems(path: Path, package: Package) -> list[str]:
    with tarfile.open(path) as sdist:
        names = {Path(name).name for name in sdist.getnames() if name.count("/") == 1}
    return [
        f"{package.name}: sdist has no {required}"
        for required in ("LICENSE", "CHANGELOG.md", "README.md", "pyproject.toml")
        if required not in names
    ]


def release_problems(out: Path, packages: list[Package]) -> list[str]:
    siblings = {p.name for p in packages}
    problems: list[str] = []
    for package in packages:
        problems += wheel_problems(artifact(out, package, "wheel"), package, siblings)
        problems += sdist_problems(artifact(out, package, "sdist"), package)
    return problems


# What a wheel installed into a clean virtualenv must do to count as working.
PLUGIN_CHECK_CONFIGURATION = """\
ALLOWED_HOSTS = ["*"]
DATABASES = {"default": {"ENGINE": "django.db.backends.postgresql", "NAME": "unused"}}
REDIS = {
    "tasks": {"URL": "redis://127.0.0.1:1/0"},
    "caching": {"URL": "redis://127.0.0.1:1/1"},
}
SECRET_KEY = "release-check-" + "x" * 50
API_TOKEN_PEPPERS = {1: "release-check-" + "y" * 50}
PLUGINS = %(plugins)r
PLUGINS_CONFIG = {"netbox_proxbox": {"encryption_key": %(key)r}}
"""


def _venv(path: Path, log: Callable[[str], None]) -> Path:
    subprocess.run(["uv", "venv", "--quiet", str(path)], check=True)
    log(f"virtualenv {path}")
    return path / "bin" / "python"


def _install(python: Path, requirements: list[str], wheels: Path) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as overrides:
        overrides.write(PSYCOPG_OVERRIDE + "\n")
    try:
        subprocess.run(
            [
                "uv",
                "pip",
                "install",
                "--quiet",
                "--python",
                str(python),
                "--find-links",
                str(wheels),
                "--override",
                overrides.name,
                *requirements,
            ],
            check=True,
        )
    finally:
        os.unlink(overrides.name)


def _run(argv: list[str], log: Callable[[str], None], **kwargs) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {result.returncode}:\n{result.stderr}")
    output = result.stdout.strip()
    last = output.splitlines()[-1] if output else "ok"
    log(f"{Path(argv[0]).name} {' '.join(argv[1:])}: {last}")
    return output


def smoke_test(
    out: Path, packages: list[Package], work: Path, netbox: str, log: Callable[[str], None]
) -> None:
    """Each wheel in a clean virtualenv: applications answer `--version` with their
    version and import; the plugins load into a NetBox (`manage.py check`)."""
    for package in packages:
        if package.name in PLUGINS:
            continue
        python = _venv(work / package.name, log)
        _install(python, [str(artifact(out, package, "wheel"))], out)
        module = package.module
        for script in package.scripts:
            printed = _run([str(python.parent / script), "--version"], log)
            if package.version not in printed:
                raise RuntimeError(f"{script} --version printed {printed!r}")
        _run([str(python), "-c", f"import {module}; print({module}.__version__)"], log)

    python = _venv(work / "netbox-with-plugins", log)
    plugins = [p for p in packages if p.name in PLUGINS]
    _install(python, [netbox, *(str(artifact(out, p, "wheel")) for p in plugins)], out)
    from cryptography.fernet import Fernet

    config_dir = work / "netbox-configuration"
    config_dir.mkdir(exist_ok=True)
    (config_dir / "release_check_configuration.py").write_text(
        PLUGIN_CHECK_CONFIGURATION
        % {
            "plugins": [p.module for p in plugins],
            "key": Fernet.generate_key().decode(),
        }
    )
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": str(config_dir),
        "NETBOX_CONFIGURATION": "release_check_configuration",
        "DJANGO_SETTINGS_MODULE": "netbox.settings",
    }
    _run([str(python), "-m", "netbox", "check"], log, env=env)
    listing = _run(
        [
            str(python),
            "-c",
            "import django; django.setup(); from django.apps import apps; "
            "print(' '.join(sorted(c.name for c in apps.get_app_configs() "
            "if c.name.startswith('netbox_') and c.name != 'netbox')))",
        ],
        log,
        env=env,
    )
    expected = {p.module for p in plugins}
    if set(listing.split()) < expected:
        raise RuntimeError(f"NetBox loaded plugins {listing!r}, expected {sorted(expected)}")


def main() -> int:
    """`python -m proxbox_devstack.release OUT`: build into OUT and check the artifacts."""
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "dist")
    packages = workspace_packages()
    build(out)
    problems = release_problems(out, packages)
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
