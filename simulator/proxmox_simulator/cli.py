"""``proxmox-simulator``: contract, migrate, seed, serve, worker, token, cluster."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from pathlib import Path

from proxmox_simulator.config import ConfigurationError, Settings

DEFAULT_ROOT_PASSWORD = "proxmox"


def _settings(args) -> Settings:
    return Settings.from_env(
        data_dir=Path(args.data_dir) if getattr(args, "data_dir", None) else None,
        contract=getattr(args, "contract", None),
        clock=getattr(args, "clock", None),
        task_workers=getattr(args, "workers", None),
        lease_seconds=getattr(args, "lease_seconds", None),
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


def cmd_contract_diff(args) -> int:
    from proxmox_simulator.contracts.diff import diff_contracts
    from proxmox_simulator.contracts.registry import resolve_contract

    settings = _settings(args)
    old = resolve_contract(args.old, settings.data_dir)
    new = resolve_contract(args.new, settings.data_dir)
    _print(diff_contracts(old, new).to_dict())
    return 0


def cmd_contract_coverage(args) -> int:
    """Handled / declared methods per major, by kind, and every method answering 501."""
    from proxmox_simulator.contracts.registry import resolve_contract

    data_dir = _settings(args).data_dir
    reports = [
        coverage_report(resolve_contract(version, data_dir), with_lists=args.list)
        for version in args.version
    ]
    _print(reports[0] if len(reports) == 1 else reports)
    return 0


def coverage_report(contract, *, with_lists: bool = False) -> dict:
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
    report = {
        "version": contract.version,
        "major": contract.major,
        "methods": total,
        "handled": handled,
        "by_kind": {kind: len(labels) for kind, labels in sorted(by_kind.items())},
        "unhandled_501": missing,
        "coverage_percent": round(100 * handled / total, 1) if total else 100.0,
    }
    if with_lists:
        report["handled_methods"] = {kind: labels for kind, labels in sorted(by_kind.items())}
    return report


# -- database ----------------------------------------------------------------------


async def _migrate(settings: Settings) -> list:
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
    applied = asyncio.run(_migrate(_settings(args)))
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
    from proxmox_simulator.repositories import db
    from proxmox_simulator.simulation.clock import clock_from_spec
    from proxmox_simulator.tasks.executors import executors
    from proxmox_simulator.tasks.worker import TaskWorker

    settings = _settings(args)
    install_redaction(settings.database_url)

    async def run():
        pool = await db.create_pool(
            settings.database_url, min_size=1, max_size=settings.task_workers + 1
        )
        worker = TaskWorker(
            pool,
            settings.database_url,
            clock_from_spec(settings.clock),
            executors(),
            lease_seconds=settings.lease_seconds,
            concurrency=settings.task_workers,
            worker_id=args.worker_id,
        )
        await worker.start()
        print(f"worker {worker.worker_id} running", flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            await worker.stop()
            await pool.close()

    with contextlib.suppress(KeyboardInterrupt):
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


EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
EXIT_CODES = """\
exit codes:
  0  success (ready: the latest migration is applied)
  1  failure (ready: not migrated; contract show: no such path)
  2  usage or configuration error: a bad option, or a bad PROXMOX_SIMULATOR_* value
     (one line on stderr naming the variable)"""


def build_parser() -> argparse.ArgumentParser:
    from proxmox_simulator import __version__
    from proxmox_simulator.simulation.seeds import PROFILES

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
    coverage.set_defaults(func=cmd_contract_coverage)

    sub.add_parser("migrate", help="apply SQL migrations").set_defaults(func=cmd_migrate)
    sub.add_parser("ready", help="exit 0 when the latest migration is applied").set_defaults(
        func=cmd_ready
    )

    seed = sub.add_parser("seed", help="replace the inventory with a deterministic profile")
    seed.add_argument("--profile", choices=sorted(PROFILES), default="small")
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
    serve.add_argument("--clock", help="real | instant | manual | accelerated:N")
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
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ConfigurationError as exc:
        print(f"proxmox-simulator: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
