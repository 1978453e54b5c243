"""The container image and its compose services: non-root, migrate and seed as
separate one-shot commands of the real CLI.

``docker compose config`` over the whole file (these services included) runs in
the devstack's ``tests/test_compose.py``, which finds the compose CLI.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

import yaml
from simtest_support import REPO_ROOT, create_database, drop_database

from proxmox_simulator.cli import build_parser
from proxmox_simulator.config import Settings, settings_env

COMPOSE_FILE = REPO_ROOT / "compose" / "docker-compose.yml"
DOCKERFILE = REPO_ROOT / "compose" / "simulator.Dockerfile"
SIMULATOR_SERVICES = ("simulator-migrate", "simulator-seed", "simulator")


def _command(service: dict) -> list[str]:
    command = service["command"]
    return shlex.split(command) if isinstance(command, str) else list(command)


def test_simulator_services_are_real_cli_commands_in_order():
    services = yaml.safe_load(COMPOSE_FILE.read_text())["services"]
    parser = build_parser()
    verbs = {}
    for name in SIMULATOR_SERVICES:
        argv = _command(services[name])
        assert argv[0] == "proxmox-simulator", name
        verbs[name] = parser.parse_args(argv[1:]).command  # exits (fails) on a stale flag
    assert verbs == {"simulator-migrate": "migrate", "simulator-seed": "seed", "simulator": "serve"}
    assert "--if-empty" in _command(services["simulator-seed"])
    # Each job waits for the previous one to complete; the API for all of them.
    chain = [("simulator-migrate", "simulator-database")]
    chain += [("simulator-seed", "simulator-migrate"), ("simulator", "simulator-seed")]
    for service, before in chain:
        condition = services[service]["depends_on"][before]["condition"]
        assert condition == "service_completed_successfully", service
    for job in ("simulator-database", "simulator-migrate", "simulator-seed"):
        assert services[job]["restart"] == "no", job


def test_image_runs_as_a_non_root_user_and_serves_by_default():
    lines = [line.strip() for line in DOCKERFILE.read_text().splitlines()]
    users = [line.split()[1] for line in lines if line.startswith("USER ")]
    assert users and users[-1] not in ("root", "0"), users
    assert f"--uid 10001 --gid {users[-1]}" in DOCKERFILE.read_text()
    cmd = next(line for line in lines if line.startswith("CMD "))
    argv = yaml.safe_load(cmd.removeprefix("CMD "))
    assert argv[:2] == ["proxmox-simulator", "serve"] and "--tls" in argv
    build_parser().parse_args(argv[1:])
    assert (REPO_ROOT / "compose" / "simulator.Dockerfile.dockerignore").exists()


def test_seed_if_empty_keeps_an_existing_inventory(tmp_path):
    url = create_database("deploy")
    try:
        settings = Settings(database_url=url, data_dir=tmp_path)
        env = {**os.environ, **settings_env(settings)}

        def cli(*args):
            return subprocess.run(
                [sys.executable, "-m", "proxmox_simulator", *args],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )

        first = cli("seed", "--profile", "standalone", "--seed", "1", "--if-empty")
        assert first.returncode == 0, first.stderr
        assert '"nodes": 1' in first.stdout
        again = cli("seed", "--profile", "small", "--seed", "2", "--if-empty")
        assert again.returncode == 0, again.stderr
        assert again.stdout.strip() == "inventory present: not seeding (--if-empty)"
    finally:
        drop_database(url)
