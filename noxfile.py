"""Automation for the whole workspace: `uv run nox` runs lint, then every test suite
(the end-to-end one included) side by side; `nox -s unit` / `nox -s e2e` run a part.

Sessions run in the workspace's own virtualenv (`uv sync` made it; nox
creates none and resolves nothing). When PROXBOX_DATABASE_URL and
PROXBOX_REDIS_URL are unset, the `tests` and `e2e` sessions start embedded
PostgreSQL and Redis from the default data dir (`.proxbox/`, or
$PROXBOX_HOME) for their duration; servers that were already running are
reused and left running.
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import nox

nox.options.default_venv_backend = "none"
nox.options.sessions = ["lint", "tests"]
nox.options.error_on_missing_interpreters = True

ROOT = Path(__file__).parent
LINT_PATHS = ["."]
# Suites that run under pytest-django with NetBox's settings and our configuration.
DJANGO_SUITES = ["netbox-plugin", "packages"]
# Suites of packages that never load Django.
PLAIN_SUITES = ["simulator/tests", "backend/tests"]
E2E_SUITE = "e2e"
PLAIN_SUITE_WORKERS = {"simulator/tests": ("-n", "2")}
E2E_WORKERS = "2"
# Schemathesis suites: a small example budget runs with `tests`; `fuzz` runs them longer.
FUZZ_SUITES = ["backend/tests/test_api_fuzz.py", "simulator/tests/test_api_fuzz.py"]
# Needs a live NetBox (pytest-django loads its settings) and the session's services.
FUZZ_STACK_SUITES = ["e2e/test_plugin_api_fuzz.py"]
FUZZ_EXAMPLES = "1000"
# PROXBOX_FUZZ_EXAMPLES=ci: each fuzz suite at the derandomized budget `tests` gives it.
FUZZ_CI_BUDGET = "ci"
# `soak` run whole at small size (minutes): its own session, not part of `tests`.
SOAK_TEST = "e2e/test_soak_session.py"
# The guests of `soak`'s sync benchmark.
SOAK_GUESTS = "10000"
# `soak`'s live-sync benchmark: every guest changed at once after its samples.
SOAK_WATCH_ARGS = "--guests 1000 --burst 1000"
# The slowest tests of each run, printed so CI's time budget can be watched.
DURATIONS = "--durations=15"
CHAOS_SUITES = [
    "e2e/test_chaos.py",
    "e2e/test_chaos_faults.py",
    "e2e/test_chaos_workers.py",
    "e2e/test_chaos_postgres.py",
]
# The NetBox the `release` session installs the plugin wheels into.
RELEASE_NETBOX = "netbox==4.7.*"


def session(func):
    """A nox session that ends by printing how long it took (nox itself does not), the
    figure CI's time budget is watched by."""

    @functools.wraps(func)
    def timed(session: nox.Session) -> None:
        started = time.monotonic()
        try:
            func(session)
        finally:
            session.log(f"session {session.name} took {time.monotonic() - started:.0f} s")

    return nox.session(timed)


def has_tests(path: str) -> bool:
    return any((ROOT / path).rglob("test_*.py"))


# Test databases are thrown away: their commits need not wait for the WAL to reach the disk
# (4.8 ms a commit on this machine, 0.4 ms without). Only a crash of the server itself
# could lose the last commits, which no test does (the chaos case stops PostgreSQL with a
# fast shutdown, which flushes them). libpq clients (NetBox, the test helpers) read it.
TEST_PGOPTIONS = "-c synchronous_commit=off"


@contextmanager
def stack_services(session: nox.Session) -> Iterator[dict[str, str]]:
    """The service URLs for a session, with TEST_PGOPTIONS for its PostgreSQL clients and
    the tablespace in memory its test databases go to where the server allows one."""
    options = " ".join(filter(None, [os.environ.get("PGOPTIONS"), TEST_PGOPTIONS]))
    with service_urls(session) as urls:
        yield {**urls, "PGOPTIONS": options, **scratch_tablespace_env(session, urls)}


def scratch_tablespace_env(session: nox.Session, urls: dict[str, str]) -> dict[str, str]:
    """PROXBOX_TEST_TABLESPACE for the suites: the environment's, else one made in memory
    (`proxbox_devstack.scratch_tablespace`: a test database in 0.09 CPU-s instead of 2.1)."""
    from proxbox_devstack import scratch_tablespace

    if scratch_tablespace.configured():
        return {}
    name, line = scratch_tablespace.ensure(urls["PROXBOX_DATABASE_URL"])
    session.log(line if name else f"test databases in the default tablespace: {line}")
    return {scratch_tablespace.TABLESPACE_ENV: name} if name else {}


@contextmanager
def service_urls(session: nox.Session) -> Iterator[dict[str, str]]:
    """The service URLs: containers when PROXBOX_TEST_SERVICES=containers, else the
    environment's, else embedded servers'."""
    from proxbox_devstack.containers import CONTAINERS, container_services, services_mode
    from proxbox_devstack.errors import StackError

    try:
        mode = services_mode()
    except StackError as exc:
        session.error(str(exc))
    if mode == CONTAINERS:
        try:
            with container_services() as urls:
                session.log("services: PostgreSQL and Redis containers")
                yield urls
        except StackError as exc:
            session.error(str(exc))
        return
    names = ("PROXBOX_DATABASE_URL", "PROXBOX_REDIS_URL")
    if all(os.environ.get(name) for name in names):
        yield {name: os.environ[name] for name in names}
        return
    from proxbox_devstack.paths import data_dir
    from proxbox_devstack.services import start_services, stop_services
    from proxbox_redaction import redact_url

    home = data_dir()
    services = start_services(home, log=session.log)
    session.log(f"services: {redact_url(services.database_url)} {redact_url(services.redis_url)}")
    try:
        yield services.env()
    finally:
        if services.started:
            stop_services(home, tuple(services.started))
            session.log(f"stopped {', '.join(services.started)}")


@session
def lint(session: nox.Session) -> None:
    session.run("ruff", "check", *LINT_PATHS, external=True)
    session.run("ruff", "format", "--check", *LINT_PATHS, external=True)


def e2e_workers() -> list[str]:
    """pytest-xdist options for the e2e suite: PROXBOX_E2E_WORKERS processes (default 2),
    each module (or group of modules, e2e/conftest.py) on one of them."""
    workers = os.environ.get("PROXBOX_E2E_WORKERS", E2E_WORKERS)
    if workers == "0":
        return []
    return ["-n", workers, "--dist", "loadscope"]


def suite_runs(with_e2e: bool) -> list:
    """The suites of a run, longest first (the runner starts them in this order)."""
    from proxbox_devstack.suites import Suite

    suites = []
    if with_e2e and has_tests(E2E_SUITE):
        # pytest-django stays on: some e2e suites read NetBox's database through its ORM.
        suites.append(Suite("e2e", [E2E_SUITE, *e2e_workers(), f"--ignore={SOAK_TEST}"]))
    django_suites = [path for path in DJANGO_SUITES if has_tests(path)]
    if django_suites:
        suites.append(Suite(" ".join(django_suites), django_suites))
    # One process per package: each suite has its own conftest and helpers. The simulator's
    # runs on xdist workers: it mostly ends alone, after e2e and beside the backend's
    # (measured alone here: 149 s on two workers, about 340 s in one process).
    suites += [
        Suite(path, [path, "-p", "no:django", *PLAIN_SUITE_WORKERS.get(path, ())])
        for path in PLAIN_SUITES
        if has_tests(path)
    ]
    return suites


def ensure_netbox_template(session: nox.Session, env: dict[str, str]) -> None:
    """The migrated NetBox template, restored from a matching dump (or built) once before
    suites that clone it start side by side: otherwise the first suite to need it builds
    it while the others wait on its build lock."""
    started = time.monotonic()
    output = session.run(
        "python",
        "-m",
        "proxbox_devstack.netbox_db",
        "template",
        env=env,
        external=True,
        silent=True,
    )
    template = output.strip().splitlines()[-1] if output else ""
    session.log(f"NetBox template ready in {time.monotonic() - started:.0f} s: {template}")


def run_suites(session: nox.Session, suites: list) -> None:
    """Every suite runs even when an earlier one fails, so one CI run reports them all."""
    from proxbox_devstack import suites as runner

    try:
        jobs = runner.jobs_from_env()
    except ValueError as exc:
        session.error(str(exc))
    for suite in suites:
        suite.argv = [*suite.argv, DURATIONS, *session.posargs]
    with stack_services(session) as env:
        ensure_netbox_template(session, env)
        outcomes = runner.run_suites(suites, ROOT / ".nox-logs", jobs, env, say=session.log)
    failed = [outcome.suite.name for outcome in outcomes if not outcome.passed]
    if failed:
        session.error(f"failing suites: {', '.join(failed)}")


@session
def tests(session: nox.Session) -> None:
    """Every package's suite and the end-to-end suite, side by side (PROXBOX_TEST_JOBS
    at once, default 2): the e2e suite mostly waits on its servers, the others compute."""
    run_suites(session, suite_runs(with_e2e=True))


@session
def unit(session: nox.Session) -> None:
    """Every package's suite without the end-to-end suite."""
    run_suites(session, suite_runs(with_e2e=False))


@session
def e2e(session: nox.Session) -> None:
    """`proxbox up` end to end: API ready, both plugins, token auth, nothing left running."""
    if not has_tests(E2E_SUITE):
        session.skip("no end-to-end tests")
    with stack_services(session) as env:
        ensure_netbox_template(session, env)
        session.run(
            "pytest",
            E2E_SUITE,
            *e2e_workers(),
            f"--ignore={SOAK_TEST}",
            DURATIONS,
            *session.posargs,
            env=env,
            external=True,
        )


@session
def chaos(session: nox.Session) -> None:
    """Every chaos case and nothing else (they run in `e2e` too): minutes."""
    with stack_services(session) as env:
        session.run("pytest", *CHAOS_SUITES, *session.posargs, env=env, external=True)


@session
def fuzz(session: nox.Session) -> None:
    """Schemathesis with a large example budget (not in the default sessions): minutes."""
    run_fuzzing(session)


def run_fuzzing(session: nox.Session) -> None:
    """The fuzz suites at PROXBOX_FUZZ_EXAMPLES examples per operation (default 1,000;
    `ci`: each suite's own budget, derandomized)."""
    examples = os.environ.get("PROXBOX_FUZZ_EXAMPLES", FUZZ_EXAMPLES)
    if examples == FUZZ_CI_BUDGET:
        env: dict[str, str | None] = {"PROXBOX_FUZZ_EXAMPLES": None}
        session.log("each suite's CI budget, derandomized")
    else:
        env = {"PROXBOX_FUZZ_EXAMPLES": examples}
        session.log(f"{examples} examples per operation")
    with stack_services(session) as services:
        env.update(services)
        # One process per suite: each package has its own conftest and helpers.
        for suite in FUZZ_SUITES:
            session.run(
                "pytest", suite, "-p", "no:django", *session.posargs, env=env, external=True
            )
        session.run("pytest", *FUZZ_STACK_SUITES, *session.posargs, env=env, external=True)


@session
def soak(session: nox.Session) -> None:
    """Nightly size (hours; `soak_smoke` runs it at 20 guests): the sync benchmark at
    PROXBOX_SOAK_GUESTS guests (default 10,000: the initial sync, its floor and the resync
    phases), the live-sync benchmark with PROXBOX_SOAK_WATCH_ARGS (default: a burst of
    1,000 changes at once among 1,000 guests) and then `fuzz` (PROXBOX_FUZZ_EXAMPLES,
    default 1,000 per operation). Figures go to stdout."""
    guests = os.environ.get("PROXBOX_SOAK_GUESTS", SOAK_GUESTS)
    watch_args = shlex.split(os.environ.get("PROXBOX_SOAK_WATCH_ARGS", SOAK_WATCH_ARGS))
    with stack_services(session) as env:
        session.log(f"sync benchmark at {guests} guests")
        sync_args = ["--sizes", guests, "--rounds", "1"]
        session.run("python", "benchmarks/sync.py", *sync_args, env=env, external=True)
        session.log(f"live-sync benchmark: {shlex.join(watch_args)}")
        session.run("python", "benchmarks/watch.py", *watch_args, env=env, external=True)
    run_fuzzing(session)


@session
def soak_smoke(session: nox.Session) -> None:
    """`soak` run whole at 20 guests with the fuzz suites at their CI budgets, checked by
    e2e/test_soak_session.py (about 4.5 minutes alone here; not in `tests`: in the e2e
    suite it made a fresh-clone CI 1,154 s against 1,054 s without it)."""
    with stack_services(session) as env:
        ensure_netbox_template(session, env)
        session.run("pytest", SOAK_TEST, *session.posargs, env=env, external=True)


@session
def release(session: nox.Session) -> None:
    """Build every package (wheel + sdist), check the artifacts, and install each wheel
    into a clean virtualenv: the applications answer --version, NetBox loads the plugins."""
    import tempfile

    from proxbox_devstack import release as release_mod

    out = ROOT / "dist"
    if out.exists():
        shutil.rmtree(out)
    packages = release_mod.workspace_packages()
    release_mod.build(out)
    problems = release_mod.release_problems(out, packages)
    if problems:
        session.error("\n".join(problems))
    session.log(f"{len(packages)} packages built into {out}: {', '.join(p.name for p in packages)}")
    with tempfile.TemporaryDirectory(prefix="proxbox-release-") as work:
        release_mod.smoke_test(out, packages, Path(work), RELEASE_NETBOX, log=session.log)


@session
def template_dumps(session: nox.Session) -> None:
    """Rebuild the migrated-template dumps proxbox-devstack ships (when a migration or
    Django changes; a test says so): one from the environment's PostgreSQL (it must
    support ICU, as production servers do) and one from a private embedded server
    (no ICU), which a first `proxbox up` restores. Minutes: each migrates NetBox."""
    import tempfile

    if os.environ.get("PROXBOX_DATABASE_URL"):
        session.log("the environment's PostgreSQL")
        session.run("proxbox", "template", "build", "--ship", external=True)
    else:
        session.warn("PROXBOX_DATABASE_URL is unset: only the embedded server's dump is rebuilt")
    with tempfile.TemporaryDirectory(prefix="proxbox-dumps-") as home:
        session.log("a private embedded PostgreSQL")
        embedded = {"PROXBOX_HOME": home, "PROXBOX_DATABASE_URL": "", "PROXBOX_REDIS_URL": ""}
        session.run("proxbox", "template", "build", "--ship", env=embedded, external=True)


@session
def docs(session: nox.Session) -> None:
    """The READMEs and docs/ as one site (zensical, mkdocs.yml), built offline and
    strictly into .docs-build/site (not in the default sessions)."""
    from proxbox_devstack import docs_site

    result = docs_site.build()
    session.log(result.stdout + result.stderr)
    if result.returncode != 0:
        session.error("the documentation site did not build (see above)")
    session.log(f"site: {docs_site.site_dir() / 'index.html'}")
