"""Dev-stack benchmark: prints figures, asserts nothing.

Measured, in this order, from a data dir of its own (a temp dir):

1. cold `proxbox up -d` until an authenticated `GET /api/status/` answers:
   empty data dir, embedded PostgreSQL and Redis initialised from scratch,
   NetBox migrated into a new template (an empty template cache, the shipped
   dumps ignored: PROXBOX_NO_SHIPPED_DUMPS), database cloned, admin created,
   demo seeded and synced once;
1b. `proxbox template build` (the dump of that template), then cold again on a
   second empty data dir with that cache: the template restored from the dump
   instead of migrated; printed with its ratio to 1 (same run, same machine);
1c. cold again on a third empty data dir with an empty cache, as on a new
   machine: the template restored from the dump proxbox-devstack ships;
2. warm restart: `proxbox down`, then `proxbox up -d` again in the same data
   dir until the API answers (servers restart, template and database reused);
3. the NetBox plugin test suites, first run then second run, against the
   same embedded servers (`proxbox services up -d`): the first run builds
   whatever template tier the suites need that the stack did not, the second
   only clones.

With `--external`, steps run against PROXBOX_DATABASE_URL/PROXBOX_REDIS_URL
instead (the template may already exist there, so "cold" is then a first run
on a new data dir, not a first migration). Every process is stopped at the end.

    uv run python benchmarks/stack.py [--external] [--keep-home] [--cold-only]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
SUITES = ["netbox-plugin", "packages/netbox-script-projects"]
URL_ENVS = ("PROXBOX_DATABASE_URL", "PROXBOX_REDIS_URL")


def proxbox(env: dict[str, str], *args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, "-m", "proxbox_devstack.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )
    if result.returncode != 0:
        raise SystemExit(f"proxbox {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result


def api_ready(home: Path, port: int, timeout: float = 120) -> None:
    from proxbox_processes import wait_until

    token = json.loads((home / "credentials.json").read_text())["token"]

    def ready() -> bool:
        try:
            response = httpx.get(
                f"http://127.0.0.1:{port}/api/status/",
                headers={"Authorization": f"Bearer {token}"},
                timeout=5,
            )
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    try:
        wait_until(ready, timeout, f"the API on port {port}", interval=0.1)
    except AssertionError as exc:
        raise SystemExit(str(exc)) from None


def timed_up(env: dict[str, str], home: Path, port: int) -> float:
    began = time.monotonic()
    proxbox(env, "up", "-d", "--port", str(port))
    api_ready(home, port)
    return time.monotonic() - began


def timed_suite(env: dict[str, str]) -> tuple[float, str]:
    began = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "pytest", *SUITES, "-q", "-p", "no:cacheprovider"],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    elapsed = time.monotonic() - began
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    return elapsed, (lines[-1] if lines else f"exit {result.returncode}")


class _Done(Exception):
    """Ends the measured steps early (--cold-only)."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--external", action="store_true", help="use the servers in the env URLs")
    parser.add_argument("--keep-home", action="store_true", help="keep the temp data dir")
    parser.add_argument("--port", type=int, default=0, help="NetBox port (default: a free one)")
    parser.add_argument(
        "--cold-only", action="store_true", help="only the two cold starts (no warm, no suites)"
    )
    args = parser.parse_args()

    from proxbox_processes import free_port

    port = args.port or free_port()
    home = Path(tempfile.mkdtemp(prefix="proxbox-bench-"))
    # A private template cache: the first cold start must find no dump.
    cache = Path(tempfile.mkdtemp(prefix="proxbox-bench-cache-"))
    env = dict(
        os.environ,
        PROXBOX_HOME=str(home),
        PROXBOX_TEMPLATE_CACHE=str(cache),
        PROXBOX_NO_SHIPPED_DUMPS="1",
    )
    env["PROXBOX_NETBOX_DATABASE"] = f"devstack_bench_{os.getpid()}"
    if not args.external:
        for name in URL_ENVS:
            env.pop(name, None)
    elif not all(env.get(name) for name in URL_ENVS):
        raise SystemExit("--external needs PROXBOX_DATABASE_URL and PROXBOX_REDIS_URL")

    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    )
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"servers: {'external (env URLs)' if args.external else 'embedded'}; data dir {home}")
    figures: list[tuple[str, str]] = []
    second_home = Path(tempfile.mkdtemp(prefix="proxbox-bench-"))
    second_env = dict(env, PROXBOX_HOME=str(second_home))
    third_home = Path(tempfile.mkdtemp(prefix="proxbox-bench-"))
    empty_cache = Path(tempfile.mkdtemp(prefix="proxbox-bench-cache-"))
    third_env = dict(env, PROXBOX_HOME=str(third_home), PROXBOX_TEMPLATE_CACHE=str(empty_cache))
    third_env.pop("PROXBOX_NO_SHIPPED_DUMPS")
    try:
        cold = timed_up(env, home, port)
        figures.append(("cold proxbox up (migrating) -> API ready", f"{cold:.1f} s"))
        proxbox(env, "down")
        began = time.monotonic()
        proxbox(env, "template", "build")
        built = time.monotonic() - began
        dumps = list(cache.glob("*.dump"))
        size = sum(d.stat().st_size for d in dumps) / 1e6
        figures.append(("proxbox template build", f"{built:.1f} s ({size:.1f} MB)"))
        if args.external:
            # The template itself survives on the shared server; only a new server
            # shows the restore, so the dump run is embedded-only.
            figures.append(("cold proxbox up (from the dump)", "skipped with --external"))
        else:
            restored = timed_up(second_env, second_home, port)
            proxbox(second_env, "down")
            figures.append(
                (
                    "cold proxbox up (from the dump) -> API ready",
                    f"{restored:.1f} s (x{restored / cold:.2f} of migrating)",
                )
            )
            shipped = timed_up(third_env, third_home, port)
            proxbox(third_env, "down")
            figures.append(
                (
                    "cold proxbox up, empty cache (the shipped dump) -> API ready",
                    f"{shipped:.1f} s (x{shipped / cold:.2f} of migrating)",
                )
            )
        if args.cold_only:
            raise _Done
        warm = timed_up(env, home, port)
        figures.append(("warm restart (down, up -d) -> API ready", f"{warm:.1f} s"))
        proxbox(env, "down")

        suite_env = dict(env)
        if not args.external:
            started = proxbox(env, "services", "up", "-d").stdout
            for line in started.splitlines():
                name, _, value = line.partition("=")
                if name in URL_ENVS:
                    suite_env[name] = value
        suite_env.pop("PROXBOX_NETBOX_DATABASE", None)
        first, first_summary = timed_suite(suite_env)
        figures.append(("test suite, first run", f"{first:.1f} s ({first_summary})"))
        second, second_summary = timed_suite(suite_env)
        figures.append(("test suite, second run", f"{second:.1f} s ({second_summary})"))
    except _Done:
        pass
    finally:
        print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        for stack_env in (env, second_env, third_env):
            subprocess.run(
                [sys.executable, "-m", "proxbox_devstack.cli", "down"],
                env=stack_env,
                capture_output=True,
            )
        shutil.rmtree(cache, ignore_errors=True)
        shutil.rmtree(empty_cache, ignore_errors=True)
        if not args.keep_home:
            shutil.rmtree(second_home, ignore_errors=True)
            shutil.rmtree(third_home, ignore_errors=True)
        if args.external:
            import psycopg

            with psycopg.connect(env["PROXBOX_DATABASE_URL"], autocommit=True) as conn:
                conn.execute(
                    f'DROP DATABASE IF EXISTS "{env["PROXBOX_NETBOX_DATABASE"]}" WITH (FORCE)'
                )
        if not args.keep_home:
            shutil.rmtree(home, ignore_errors=True)

    print(f"suites: {' '.join(SUITES)}")
    width = max(len(label) for label, _ in figures)
    for label, value in figures:
        print(f"{label:<{width}}  {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
