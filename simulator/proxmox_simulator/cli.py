"""``proxmox-simulator``: contract, migrate, seed, serve, worker, token, cluster, faults."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from pathlib import Path

from proxmox_simulator.config import ConfigurationError, Settings
from proxmox_simulator.contracts.registry import UnknownContract

DEFAULT_ROOT_PASSWORD = "proxmox"


def _settings(args) -> Settings:
    return Settings.from_env(
        data_dir=Path(args.data_dir) if getattr(args, "data_dir", None) else None,
        contract=getattr(args, "contract", None),
        clock=getattr(args, "clock", None),
        task_workers=getattr(args, "workers", None),
        lease_seconds=getattr(args, "lease_seconds", None),
        profile=getattr(args, "compat_profile", None),
        apidoc_dir=Path(args.apidoc_dir) if getattr(args, "apidoc_dir", None) else None,
    )


def _print(value) -> None:
    print(json.dumps(value, indent=2, sort_keys=True, default=str))


# -- contract --------------------------------------------------------------------


def cmd_contract_import(args) -> int:
    from proxmox_simulator.contracts import sources
    from proxmox_simulator.contracts.parser import ContractParseError
    from proxmox_simulator.contracts.registry import ContractRegistry

    if args.fakepve:
        artifact = sources.read_fakepve()
        version = args.version or sources.FAKEPVE_SCHEMA_VERSION
    elif args.url:
        try:
            artifact = sources.fetch_url(args.url)
        except sources.SourceRefused as exc:
            print(f"proxmox-simulator: {exc}", file=sys.stderr)
            return 2
        version = args.version or sources.guess_version(args.url)
    elif args.path:
        artifact = sources.read_file(Path(args.path))
        version = args.version or sources.guess_version(Path(args.path).name)
    else:
        print("give a PATH, --url URL or --fakepve", file=sys.stderr)
        return 2
    if not version:
        print("cannot tell the PVE version from the name; pass --version", file=sys.stderr)
        return 2
    try:
        result = sources.parse_artifact(artifact, version)
    except (sources.SourceRefused, ContractParseError) as exc:
        print(f"proxmox-simulator: {exc}", file=sys.stderr)
        return 2
    manifest = ContractRegistry(_settings(args).data_dir).store(artifact, result)
    _print(manifest)
    return 0


def cmd_contract_list(args) -> int:
    from proxmox_simulator.contracts.registry import ContractRegistry

    for manifest in ContractRegistry(_settings(args).data_dir).versions():
        counts = manifest["counts"]
        print(
            f"{manifest['version']}\t{counts['paths']} paths\t{counts['methods']} methods\t"
            f"{manifest['source']['kind']}:{manifest['source']['filename']}"
        )
    return 0


def cmd_contract_show(args) -> int:
    from proxmox_simulator.contracts.registry import ContractRegistry, resolve_contract

    settings = _settings(args)
    if args.path:
        contract = resolve_contract(args.version, settings.data_dir)
        found = [
            e.to_dict()
            for e in contract.endpoints
            if e.path == args.path and (not args.method or e.method == args.method.upper())
        ]
        if not found:
            print(f"no such path {args.path!r} in {contract.version}", file=sys.stderr)
            return 1
        _print(found)
        return 0
    try:
        _print(ContractRegistry(settings.data_dir).manifest(args.version))
    except KeyError:
        contract = resolve_contract(args.version, settings.data_dir)
        _print(
            {
                "version": contract.version,
                "counts": contract.counts(),
                "normalized_sha256": contract.sha256(),
            }
        )
    return 0


def _snapshot(ref: str, data_dir: Path):
    """A declared snapshot, or ``observed:MAJOR[:ID]`` for a recorded observation set."""
    from proxmox_simulator.contracts.observations import ObservationStore
    from proxmox_simulator.contracts.registry import resolve_contract

    if not ref.startswith("observed:"):
        return resolve_contract(ref, data_dir)
    _, _, rest = ref.partition(":")
    major, _, ident = rest.partition(":")
    store = ObservationStore(data_dir)
    observed = store.load(int(major), ident) if ident else store.latest(int(major))
    if observed is None:
        raise ValueError(f"no observations of major {major} are recorded")
    return observed.as_contract()


def cmd_contract_diff(args) -> int:
    from proxmox_simulator.contracts.diff import diff_contracts

    settings = _settings(args)
    try:
        old = _snapshot(args.old, settings.data_dir)
        new = _snapshot(args.new, settings.data_dir)
    except (ValueError, KeyError) as exc:
        print(f"proxmox-simulator: {exc}", file=sys.stderr)
        return 2
    _print(diff_contracts(old, new).to_dict())
    return 0


def cmd_contract_report(args) -> int:
    """Declared, handled, observed and differing methods per major and profile."""
    from proxmox_simulator.api.compatibility import report_for
    from proxmox_simulator.contracts.selection import ContractUnavailable

    settings = _settings(args)
    profile = args.profile or settings.profile
    try:
        reports = [
            report_for(
                major,
                profile,
                settings.data_dir,
                with_lists=args.list,
                apidoc_dir=settings.apidoc_dir,
            )
            for major in args.major
        ]
    except ContractUnavailable as exc:
        print(f"proxmox-simulator: {exc}", file=sys.stderr)
        return 2
    _print(reports[0] if len(reports) == 1 else reports)
    return 0


def _tls_verify(args):
    """``--insecure``: no verification; ``--ca-cert F``: trust F; else the system store."""
    import ssl

    if args.insecure:
        return False
    if args.ca_cert:
        return ssl.create_default_context(cafile=args.ca_cert)
    return True


def cmd_contract_apply(args) -> int:
    """Hot-swap a running simulator's contract (its laboratory API must be enabled)."""
    import httpx

    verify = _tls_verify(args)
    data = {k: v for k, v in (("major", args.major), ("profile", args.profile)) if v}
    try:
        response = httpx.post(
            args.url.rstrip("/") + "/ui/api/contract/apply", data=data, verify=verify, timeout=60
        )
    except httpx.HTTPError as exc:
        print(f"proxmox-simulator: {args.url}: {exc}", file=sys.stderr)
        return 1
    if response.status_code != 200:
        detail = ""
        with contextlib.suppress(ValueError):
            detail = json.dumps(response.json().get("errors") or {})
        print(
            f"proxmox-simulator: HTTP {response.status_code} {response.reason_phrase} {detail}",
            file=sys.stderr,
        )
        return 1
    _print(response.json()["data"])
    return 0


def cmd_contract_record(args) -> int:
    """Record a real PVE endpoint's answers as a sanitized, checksummed observation set."""
    from proxmox_simulator.contracts.observations import ObservationStore
    from proxmox_simulator.contracts.recorder import Credentials, Limits, Recorder
    from proxmox_simulator.contracts.registry import resolve_contract
    from proxmox_simulator.contracts.selection import ContractUnavailable, declared_for_major
    from proxmox_simulator.contracts.sources import SourceRefused

    def fail(message: str) -> int:
        print(f"proxmox-simulator: {message}", file=sys.stderr)
        return 2

    if not args.allow_network:
        return fail("recording talks to a real server: pass --allow-network to allow it")
    credentials = Credentials()
    if args.token_env:
        credentials.token = os.environ.get(args.token_env)
        if not credentials.token:
            return fail(f"--token-env: variable {args.token_env} is empty")
    elif args.username and args.password_env:
        credentials.username = args.username
        credentials.password = os.environ.get(args.password_env)
        if not credentials.password:
            return fail(f"--password-env: variable {args.password_env} is empty")
    else:
        return fail("give --token-env VAR, or --username U and --password-env VAR")
    settings = _settings(args)
    try:
        contract = (
            resolve_contract(args.contract, settings.data_dir)
            if args.contract
            else declared_for_major(args.major, settings.data_dir)
        )
    except (ValueError, ContractUnavailable) as exc:
        return fail(str(exc))
    limits = Limits(
        max_requests=args.max_requests,
        max_bytes=args.max_bytes,
        max_total_bytes=args.max_total_bytes,
        timeout=args.timeout,
        time_budget=args.time_budget,
    )
    try:
        recorder = Recorder(
            args.url,
            contract,
            credentials,
            allowed_hosts=frozenset(h.lower() for h in args.allow_host),
            limits=limits,
            verify=_tls_verify(args),
            prefixes=tuple(args.only or ()),
        )
        observed = recorder.record()
    except SourceRefused as exc:
        return fail(str(exc))
    except OSError as exc:  # httpx transport errors are OSErrors underneath
        return fail(f"{args.url}: {exc}")
    except Exception as exc:
        import httpx

        if isinstance(exc, httpx.HTTPError):
            return fail(f"{args.url}: {exc}")
        raise
    if observed.major != contract.major:
        return fail(
            f"the server runs PVE {observed.version}, the declared contract is "
            f"{contract.version}; pass --major {observed.major}"
        )
    _print(ObservationStore(settings.data_dir).store(observed, recorder.provenance()))
    return 0


def cmd_contract_import_observed(args) -> int:
    from proxmox_simulator.contracts.observations import ObservationError, ObservationStore

    try:
        manifest = ObservationStore(_settings(args).data_dir).import_dir(Path(args.path))
    except (ObservationError, OSError, KeyError, ValueError) as exc:
        print(f"proxmox-simulator: {exc}", file=sys.stderr)
        return 2
    _print(manifest)
    return 0


def cmd_contract_observations(args) -> int:
    from proxmox_simulator.contracts.observations import ObservationStore

    for manifest in ObservationStore(_settings(args).data_dir).manifests(args.major):
        counts = manifest["counts"]
        print(
            f"{manifest['major']}\t{manifest['id']}\tPVE {manifest['version']}\t"
            f"{counts['observations']} observed\t{counts['absent']} absent\t"
            f"{counts['undeclared']} undeclared"
        )
    return 0


def cmd_contract_coverage(args) -> int:
    """Handled / declared methods per major, by kind, and every method answering 501."""
    from proxmox_simulator.contracts.registry import resolve_contract

    data_dir = _settings(args).data_dir
    reports = [
        coverage_report(resolve_contract(version, data_dir), with_lists=args.list)
        for version in args.version
    ]
    if args.table:
        print("major\tversion\tmethods\tspecific\tgeneric\tunhandled")
        for report in reports:
            answered = report["answered_by"]
            print(
                f"{report['major']}\t{report['version']}\t{report['methods']}\t"
                f"{answered['specific']}\t{answered['generic']}\t{len(report['unhandled_501'])}"
            )
        return 0
    _print(reports[0] if len(reports) == 1 else reports)
    return 0


def coverage_report(contract, *, with_lists: bool = False) -> dict:
    from proxmox_simulator.api.handlers.dispatch import RESOURCE_STORE as GENERIC_KIND
    from proxmox_simulator.api.handlers.dispatch import handling

    by_kind: dict[str, list[str]] = {}
    missing: list[str] = []
    for endpoint in sorted(contract.endpoints, key=lambda e: (e.path, e.method)):
        label = f"{endpoint.method} {endpoint.path}"
        kind = handling(contract, endpoint)
        if kind is None:
            missing.append(label)
        else:
            by_kind.setdefault(kind, []).append(label)
    total = len(contract.endpoints)
    handled = total - len(missing)
    generic = len(by_kind.get(GENERIC_KIND, []))
    report = {
        "version": contract.version,
        "major": contract.major,
        "methods": total,
        "handled": handled,
        # The fidelity measure: "generic" methods are answered by the contract-driven
        # resource store (stored parameters echoed back), "specific" ones by a handler
        # that keeps PVE's semantics (a bespoke handler, or the directory index PVE
        # itself computes from its method tree).
        "answered_by": {"specific": handled - generic, "generic": generic},
        "by_kind": {kind: len(labels) for kind, labels in sorted(by_kind.items())},
        "unhandled_501": missing,
        "coverage_percent": round(100 * handled / total, 1) if total else 100.0,
    }
    if with_lists:
        report["handled_methods"] = {kind: labels for kind, labels in sorted(by_kind.items())}
    return report


# -- database ----------------------------------------------------------------------


async def migrate_database(settings: Settings) -> list:
    from proxmox_simulator.domain.access_service import bootstrap
    from proxmox_simulator.repositories import db
    from proxmox_simulator.repositories.migrations import migrate

    conn = await db.connect(settings.database_url)
    try:
        applied = await migrate(conn)
        async with conn.transaction():
            await bootstrap(conn, os.environ.get("PROXMOX_SIMULATOR_ROOT_PASSWORD"))
        return applied
    finally:
        await conn.close()


def cmd_migrate(args) -> int:
    applied = asyncio.run(migrate_database(_settings(args)))
    for migration in applied:
        print(f"applied {migration.version:04d}_{migration.name}")
    if not applied:
        print("database is up to date")
    return 0


def cmd_ready(args) -> int:
    from proxmox_simulator.repositories import db
    from proxmox_simulator.repositories.migrations import is_ready

    async def check():
        conn = await db.connect(_settings(args).database_url)
        try:
            return await is_ready(conn)
        finally:
            await conn.close()

    ready, current, latest = asyncio.run(check())
    print(f"migration {current}/{latest}: {'ready' if ready else 'NOT ready'}")
    return 0 if ready else 1


async def seed_database(
    settings: Settings, profile_name: str, seed: int, root_password: str | None
) -> dict:
    from proxmox_simulator.contracts.registry import resolve_contract
    from proxmox_simulator.domain.access_service import bootstrap
    from proxmox_simulator.repositories import db
    from proxmox_simulator.simulation.seeds import PROFILES, apply

    profile = PROFILES[profile_name]
    version = resolve_contract(settings.contract, settings.data_dir).version
    conn = await db.connect(settings.database_url)
    try:
        summary = await apply(conn, profile, seed, version)
        async with conn.transaction():
            await bootstrap(conn, root_password)
        return summary
    finally:
        await conn.close()


def cmd_seed(args) -> int:
    password = (
        args.root_password
        or os.environ.get("PROXMOX_SIMULATOR_ROOT_PASSWORD")
        or DEFAULT_ROOT_PASSWORD
    )
    settings = _settings(args)
    if args.if_empty and asyncio.run(_has_inventory(settings)):
        # A deployment's seed job runs on every start; it must not wipe the lab.
        print("inventory present: not seeding (--if-empty)")
        return 0
    _print(asyncio.run(seed_database(settings, args.profile, args.seed, password)))
    return 0


async def _has_inventory(settings: Settings) -> bool:
    from proxmox_simulator.repositories import db, inventory

    conn = await db.connect(settings.database_url)
    try:
        return bool(await inventory.nodes(conn))
    finally:
        await conn.close()


# -- serving -------------------------------------------------------------------------


def cmd_serve(args) -> int:
    from proxmox_simulator.server import serve

    serve(_settings(args), host=args.host, port=args.port, tls=args.tls, log_level=args.log_level)
    return 0


def cmd_worker(args) -> int:
    """A task worker without the HTTP server (scale-out, crash tests)."""
    from proxmox_simulator.api.logging import install_redaction
    from proxmox_simulator.observability import tracing
    from proxmox_simulator.repositories import db
    from proxmox_simulator.runtime import follow_faults
    from proxmox_simulator.simulation.clock import clock_from_spec
    from proxmox_simulator.simulation.faults import FaultEngine
    from proxmox_simulator.tasks.executors import executors
    from proxmox_simulator.tasks.worker import TaskWorker

    settings = _settings(args)
    install_redaction(settings.database_url)
    # Spans of executed tasks, when the OpenTelemetry environment configures an exporter.
    tracer = tracing.from_env(os.environ)

    async def run():
        pool = await db.create_pool(
            settings.database_url, min_size=1, max_size=settings.task_workers + 1
        )
        # The same fault scenario as the API replicas (tasks fail or warn here too).
        faults = FaultEngine()
        fault_listener = await db.connect(settings.database_url)
        await follow_faults(fault_listener, pool, faults)
        worker = TaskWorker(
            pool,
            settings.database_url,
            clock_from_spec(settings.clock),
            executors(),
            lease_seconds=settings.lease_seconds,
            concurrency=settings.task_workers,
            worker_id=args.worker_id,
            faults=faults,
            tracing=tracer,
        )
        await worker.start()
        print(f"worker {worker.worker_id} running", flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            await worker.stop()
            await fault_listener.close()
            await pool.close()
            if tracer is not None:
                tracer.shutdown()

    # Ctrl-C cancels run(), which stops the workers, then reaches main: exit 130.
    asyncio.run(run())
    return 0


# -- administration ------------------------------------------------------------------


async def create_token(settings: Settings, full_id: str, privsep: bool, comment: str) -> dict:
    import uuid

    from proxmox_simulator.domain.auth import hash_secret
    from proxmox_simulator.repositories import access as access_repo
    from proxmox_simulator.repositories import db

    userid, sep, tokenid = full_id.partition("!")
    if not sep or not tokenid:
        raise SystemExit("token id must look like user@realm!tokenid")
    secret = str(uuid.uuid4())
    conn = await db.connect(settings.database_url)
    try:
        async with conn.transaction():
            await access_repo.insert_token(
                conn,
                userid=userid,
                tokenid=tokenid,
                secret_hash=hash_secret(secret),
                privsep=privsep,
                expire=0,
                comment=comment,
            )
    finally:
        await conn.close()
    return {"full-tokenid": full_id, "value": secret, "privsep": int(privsep)}


def cmd_token_create(args) -> int:
    result = asyncio.run(
        create_token(_settings(args), args.tokenid, bool(args.privsep), args.comment or "")
    )
    if args.json:
        _print(result)
    else:
        print(result["value"])
    return 0


def cmd_cluster_rename(args) -> int:
    from proxmox_simulator.repositories import db, inventory

    async def rename():
        conn = await db.connect(_settings(args).database_url)
        try:
            async with conn.transaction():
                return await inventory.set_cluster_name(
                    conn, None if args.standalone else args.name
                )
        finally:
            await conn.close()

    row = asyncio.run(rename())
    print(row["name"] or "(standalone)")
    return 0


# -- fault scenarios -----------------------------------------------------------------


def _faults(settings: Settings, operation) -> int:
    """Run ``operation(pool)`` against the database; a refusal is one line, exit 2."""
    from proxmox_simulator.domain.errors import PveError
    from proxmox_simulator.repositories import db

    async def run():
        pool = await db.create_pool(settings.database_url, min_size=1, max_size=2)
        try:
            return await operation(pool)
        finally:
            await pool.close()

    try:
        _print(asyncio.run(run()))
    except PveError as exc:
        fields = "; ".join(f"{k}: {v}" for k, v in (exc.errors or {}).items())
        print(
            f"proxmox-simulator faults: {exc.message}{' ' + fields if fields else ''}",
            file=sys.stderr,
        )
        return 2
    return 0


def cmd_faults_list(args) -> int:
    from proxmox_simulator.domain import fault_service

    _print(fault_service.scenario_list())
    return 0


def cmd_faults_status(args) -> int:
    from proxmox_simulator.repositories import faults as fault_repo
    from proxmox_simulator.simulation.faults import scenario_from_row

    async def status(pool):
        async with pool.acquire() as conn:
            scenario = scenario_from_row(await fault_repo.active(conn))
        return {"active": scenario.to_dict() if scenario else None}

    return _faults(_settings(args), status)


def cmd_faults_enable(args) -> int:
    from proxmox_simulator.domain import fault_service
    from proxmox_simulator.domain.errors import ParameterError

    rules = None
    if args.rules:
        try:
            rules = json.loads(Path(args.rules).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            print(f"proxmox-simulator faults: --rules {args.rules}: {exc}", file=sys.stderr)
            return 2

    async def enable(pool):
        if rules is None and not args.name:
            raise ParameterError({"name": "a scenario name or --rules FILE is required"})
        return await fault_service.enable(
            pool,
            None,
            name=args.name or "custom",
            seed=args.seed,
            rules=rules,
            node=args.node,
            storage=args.storage,
        )

    return _faults(_settings(args), enable)


def cmd_faults_disable(args) -> int:
    from proxmox_simulator.domain import fault_service

    return _faults(_settings(args), lambda pool: fault_service.disable(pool, None))


def cmd_faults_rule(args) -> int:
    from proxmox_simulator.domain import fault_service

    enabled = args.state == "on"
    return _faults(
        _settings(args),
        lambda pool: fault_service.set_rule_enabled(pool, None, args.index, enabled),
    )


EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
EXIT_CODES = """\
exit codes:
  0  success (ready: the latest migration is applied)
  1  failure (ready: not migrated; contract show: no such path)
  2  usage or configuration error: a bad option, or a bad PROXMOX_SIMULATOR_* value
     (one line on stderr naming the variable)
  130  interrupted (Ctrl-C: `serve` and `worker` stop cleanly; one line, no traceback)
  141  stdout closed by its reader (`… | head -1`), quietly"""


def build_parser() -> argparse.ArgumentParser:
    from proxmox_simulator import __version__
    from proxmox_simulator.contracts.selection import PROFILES
    from proxmox_simulator.simulation.seeds import PROFILES as SEED_PROFILES

    parser = argparse.ArgumentParser(
        prog="proxmox-simulator",
        description="Proxmox VE API simulator",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"proxmox-simulator {__version__}")
    parser.add_argument("--data-dir", help="data directory (env PROXMOX_SIMULATOR_DATA_DIR)")
    sub = parser.add_subparsers(dest="command", required=True)

    contract = sub.add_parser("contract", help="import and inspect API contract snapshots")
    csub = contract.add_subparsers(dest="contract_command", required=True)
    imp = csub.add_parser("import", help="import an apidoc.js / schema into the registry")
    imp.add_argument("path", nargs="?")
    imp.add_argument("--url", help="https URL on the official host allowlist")
    imp.add_argument(
        "--fakepve", action="store_true", help="the major-9 schema of the fakepve package"
    )
    imp.add_argument("--version", help="PVE version label (default: from the file name)")
    imp.set_defaults(func=cmd_contract_import)
    lst = csub.add_parser("list", help="list imported snapshots")
    lst.set_defaults(func=cmd_contract_list)
    show = csub.add_parser("show", help="show a snapshot's manifest or one path")
    show.add_argument("version")
    show.add_argument("--path")
    show.add_argument("--method")
    show.set_defaults(func=cmd_contract_show)
    diff = csub.add_parser("diff", help="semantic diff between two snapshots")
    diff.add_argument("old")
    diff.add_argument("new")
    diff.set_defaults(func=cmd_contract_diff)
    coverage = csub.add_parser("coverage", help="declared methods with and without handlers")
    coverage.add_argument("version", nargs="+", help="one or more versions (a report each)")
    coverage.add_argument("--list", action="store_true", help="list the methods")
    coverage.add_argument(
        "--table",
        action="store_true",
        help="one line per major: methods answered by a specific handler vs the generic store",
    )
    coverage.set_defaults(func=cmd_contract_coverage)

    report = csub.add_parser(
        "report", help="compatibility: declared, handled, observed, differing per major"
    )
    report.add_argument("--major", type=int, nargs="+", required=True, choices=(6, 7, 8, 9))
    report.add_argument("--profile", choices=PROFILES, help="default: PROXMOX_SIMULATOR_PROFILE")
    report.add_argument("--list", action="store_true", help="the differing return shapes in full")
    report.set_defaults(func=cmd_contract_report)
    apply = csub.add_parser("apply", help="hot-swap a running simulator's major / profile")
    apply.add_argument("--url", required=True, help="the simulator, e.g. https://127.0.0.1:8006")
    apply.add_argument("--major", type=int, choices=(6, 7, 8, 9))
    apply.add_argument("--profile", choices=PROFILES)
    apply.add_argument("--ca-cert", help="CA / certificate file to verify the simulator with")
    apply.add_argument("--insecure", action="store_true", help="do not verify TLS")
    apply.set_defaults(func=cmd_contract_apply)
    record = csub.add_parser(
        "record", help="record a real PVE endpoint's answers (sanitized observations)"
    )
    record.add_argument("--url", required=True, help="https://host:8006 of the PVE node")
    record.add_argument(
        "--allow-network", action="store_true", help="required: this contacts a real server"
    )
    record.add_argument(
        "--allow-host", action="append", default=[], help="host allowlist (repeatable, required)"
    )
    record.add_argument("--token-env", help="variable holding user@realm!id=secret")
    record.add_argument("--username")
    record.add_argument("--password-env", help="variable holding the password")
    record.add_argument("--major", type=int, default=9, choices=(6, 7, 8, 9))
    record.add_argument("--contract", help="declared snapshot to walk (default: of --major)")
    record.add_argument(
        "--only", action="append", help="record this path template only; 'P*' for P and below"
    )
    record.add_argument("--ca-cert")
    record.add_argument("--insecure", action="store_true")
    record.add_argument("--max-requests", type=int, default=300)
    record.add_argument("--max-bytes", type=int, default=1024 * 1024, help="per answer")
    record.add_argument("--max-total-bytes", type=int, default=32 * 1024 * 1024)
    record.add_argument("--timeout", type=float, default=10.0, help="seconds per request")
    record.add_argument("--time-budget", type=float, default=120.0, help="seconds in total")
    record.set_defaults(func=cmd_contract_record)
    imp_obs = csub.add_parser("import-observed", help="import an observation set directory")
    imp_obs.add_argument("path")
    imp_obs.set_defaults(func=cmd_contract_import_observed)
    obs = csub.add_parser("observations", help="list recorded observation sets")
    obs.add_argument("--major", type=int)
    obs.set_defaults(func=cmd_contract_observations)

    sub.add_parser("migrate", help="apply SQL migrations").set_defaults(func=cmd_migrate)
    sub.add_parser("ready", help="exit 0 when the latest migration is applied").set_defaults(
        func=cmd_ready
    )

    seed = sub.add_parser("seed", help="replace the inventory with a deterministic profile")
    seed.add_argument("--profile", choices=sorted(SEED_PROFILES), default="small")
    seed.add_argument("--seed", type=int, default=1)
    seed.add_argument(
        "--root-password", help=f"root@pam password (default {DEFAULT_ROOT_PASSWORD!r})"
    )
    seed.add_argument("--contract", help="PVE version the nodes report")
    seed.add_argument(
        "--if-empty", action="store_true", help="do nothing when an inventory already exists"
    )
    seed.set_defaults(func=cmd_seed)

    serve = sub.add_parser("serve", help="run the API server")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8006)
    serve.add_argument("--tls", action="store_true", help="HTTPS with a self-signed certificate")
    serve.add_argument("--contract", help="fakepve | imported version | apidoc file")
    serve.add_argument(
        "--apidoc-dir",
        help="official pve-<version>-apidoc.js files a hot-swap imports when its major is missing",
    )
    serve.add_argument("--clock", help="real | instant | manual | accelerated:N")
    serve.add_argument(
        "--profile", dest="compat_profile", choices=PROFILES, help="compatibility profile"
    )
    serve.add_argument("--workers", type=int, help="task worker coroutines (0 = none)")
    serve.add_argument("--lease-seconds", type=float)
    serve.add_argument(
        "--log-level",
        default="info",
        choices=("debug", "info", "warning", "error"),
        help="info logs one redacted JSON line per request",
    )
    serve.set_defaults(func=cmd_serve)

    worker = sub.add_parser("worker", help="run task workers without the HTTP server")
    worker.add_argument("--clock")
    worker.add_argument("--workers", type=int)
    worker.add_argument("--lease-seconds", type=float)
    worker.add_argument("--worker-id")
    worker.set_defaults(func=cmd_worker)

    token = sub.add_parser("token", help="API tokens")
    tsub = token.add_subparsers(dest="token_command", required=True)
    tcreate = tsub.add_parser("create", help="create a token and print its secret")
    tcreate.add_argument("tokenid", help="user@realm!tokenid")
    tcreate.add_argument("--privsep", type=int, choices=(0, 1), default=1)
    tcreate.add_argument("--comment")
    tcreate.add_argument("--json", action="store_true")
    tcreate.set_defaults(func=cmd_token_create)

    cluster = sub.add_parser("cluster", help="simulator-only cluster administration")
    clsub = cluster.add_subparsers(dest="cluster_command", required=True)
    rename = clsub.add_parser("rename", help="rename the cluster (PVE has no API for this)")
    rename.add_argument("name", nargs="?")
    rename.add_argument(
        "--standalone", action="store_true", help="drop the cluster: standalone node"
    )
    rename.set_defaults(func=cmd_cluster_rename)

    faults = sub.add_parser("faults", help="seeded fault scenarios (shared by every replica)")
    fsub = faults.add_subparsers(dest="faults_command", required=True)
    fsub.add_parser("list", help="the named scenarios and their rules").set_defaults(
        func=cmd_faults_list
    )
    fsub.add_parser("status", help="the active scenario").set_defaults(func=cmd_faults_status)
    fenable = fsub.add_parser("enable", help="enable a named scenario or --rules FILE")
    fenable.add_argument("name", nargs="?")
    fenable.add_argument("--seed", type=int, default=0)
    fenable.add_argument("--node", help="the node node-offline takes down (default pve2)")
    fenable.add_argument("--storage", help="the storage storage-full fills (default local-lvm)")
    fenable.add_argument("--rules", help="JSON file with a list of rules (a custom scenario)")
    fenable.set_defaults(func=cmd_faults_enable)
    fsub.add_parser("disable", help="no faults").set_defaults(func=cmd_faults_disable)
    frule = fsub.add_parser("rule", help="switch one rule of the active scenario on or off")
    frule.add_argument("index", type=int)
    frule.add_argument("state", choices=("on", "off"))
    frule.set_defaults(func=cmd_faults_rule)
    return parser


def main(argv: list[str] | None = None) -> int | None:
    from proxbox_processes import collect_garbage_less_often

    from proxbox_redaction import run_console

    collect_garbage_less_often()

    def command() -> int:
        args = build_parser().parse_args(argv)
        try:
            return args.func(args)
        except (ConfigurationError, UnknownContract) as exc:
            print(f"proxmox-simulator: {exc}", file=sys.stderr)
            return EXIT_USAGE

    return run_console("proxmox-simulator", command)


if __name__ == "__main__":
    sys.exit(main())
