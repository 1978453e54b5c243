"""`proxbox-sync`: run one endpoint's sync (rich progress or --json), or serve the HTTP API."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys

from proxbox_backend.baselines import RedisBaselines
from proxbox_backend.config import API_TOKEN_ENV, ConfigurationError, Settings
from proxbox_backend.runs import (
    RedisRunStore,
    RunActive,
    RunStoreUnavailable,
    check_store,
    recorded,
)
from proxbox_backend.secrets import install_redaction
from proxbox_backend.service import RunReport, SyncService
from proxbox_backend.stages import STAGES
from proxbox_backend.stages.guests import DISAPPEARED_POLICIES

EXIT_OK, EXIT_FAILURES, EXIT_USAGE, EXIT_BUSY = 0, 1, 2, 3
EXIT_CODES = """\
exit codes:
  0  success (run: every object synced; run --dry-run: every object planned)
  1  run: the sync (or preview) finished with failed writes or Proxmox reads, or an error
     (the report lists them)
  2  usage or configuration error: a bad option, a missing NetBox URL or token, or a
     bad PROXBOX_* value (one line on stderr naming the variable), or an unreachable
     PROXBOX_BACKEND_REDIS_URL
  3  run: another process (a `run` or a `serve` replica sharing the Redis) is syncing
     the endpoint (one line on stderr naming its run)
  130  interrupted (Ctrl-C: `serve` shuts down gracefully first; one line, no traceback)
  141  stdout closed by its reader (`run --json | head -1`), quietly"""


def _settings(args) -> Settings:
    verify = None
    if getattr(args, "proxmox_insecure", False):
        verify = False
    return Settings.from_env(
        netbox_url=args.netbox_url,
        netbox_token=args.netbox_token,
        netbox_ca_bundle=args.netbox_ca_bundle,
        proxmox_url=getattr(args, "proxmox_url", None),
        proxmox_token_id=getattr(args, "proxmox_token_id", None),
        proxmox_token=getattr(args, "proxmox_token", None),
        proxmox_ca_bundle=getattr(args, "proxmox_ca_bundle", None),
        proxmox_verify_tls=verify,
        disappeared=getattr(args, "disappeared", None),
        redis_url=args.redis_url,
    )


def _install_redaction(settings: Settings):
    """Before anything logs: every secret this process holds, masked in all its output."""
    return install_redaction(*settings.secrets(), os.environ.get(API_TOKEN_ENV))


def render_summary(report: RunReport, console) -> None:
    from rich.table import Table

    cluster = report.cluster
    if cluster:
        console.print(
            f"Cluster [bold]{cluster['name']}[/] ({cluster['mode']}) → NetBox cluster "
            f"#{cluster['id']}: claim HTTP {cluster['claim_status']}, "
            f"created={str(cluster['created']).lower()}, changed={str(cluster['changed']).lower()}"
        )
    table = Table(title=f"Sync of endpoint {report.endpoint.get('name', '?')}")
    table.add_column("object type")
    for outcome in ("created", "updated", "unchanged", "deleted", "failed"):
        table.add_column(outcome, justify="right")
    for object_type, counters in report.tally.counters.items():
        row = counters.as_dict()
        table.add_row(
            object_type, *(str(row[k]) for k in row), style="red" if counters.failed else None
        )
    console.print(table)
    render_hygiene(report, console)
    for failure in report.tally.failures:
        console.print(f"[red]failed[/] {failure.object_type} {failure.label}: {failure.reason}")
    for failure in report.read_failures:
        console.print(f"[red]read failed[/] {failure}")
    for warning in report.warnings:
        console.print(f"[yellow]warning[/] {warning}")
    nb = report.netbox_requests
    console.print(
        f"NetBox requests: {nb.get('total', 0)} ({nb.get('writes', 0)} writes), "
        f"inventory writes: {report.tally.writes}, {report.duration_s:.2f}s"
    )
    if report.sync_state:
        console.print(f"Sync state: {report.sync_state}")
    if report.error:
        console.print(f"[bold red]error[/] {report.error}")


def _value(value) -> str:
    return "—" if value is None else json.dumps(value, sort_keys=True, ensure_ascii=False)


HYGIENE_COLOURS = {"error": "red", "warning": "yellow", "info": "cyan"}


def render_hygiene(report: RunReport, console) -> None:
    """The IPAM checks' findings (`domain.hygiene`), errors first, one line each."""
    from rich.markup import escape

    for finding in report.hygiene:
        colour = HYGIENE_COLOURS.get(finding["severity"], "white")
        other = f" [dim]({escape(finding['where'])})[/]" if finding["where"] else ""
        console.print(
            f"[{colour}]{finding['severity']}[/] {finding['rule']} {escape(finding['guest'])}: "
            f"{escape(finding['detail'])}{other}"
        )


def render_plan(report: RunReport, console) -> None:
    """A preview's plan, per object type: + create, ~ update (field: old → new), - delete."""
    from rich.markup import escape

    plan = report.plan.as_dict() if report.plan is not None else {"object_types": {}}
    console.print(
        f"[bold]Preview[/] of endpoint {report.endpoint.get('name', '?')}: nothing was written"
    )
    if not plan["object_types"] and report.error is None:
        console.print("Nothing to change: NetBox matches Proxmox.")
    for object_type, types in plan["object_types"].items():
        console.print(
            f"[bold]{object_type}[/]: {types['create']} to create, {types['update']} to update, "
            f"{types['delete']} to delete"
        )
        for create in types["creates"]:
            because = f" [cyan]by {escape(create['because'])}[/]" if "because" in create else ""
            console.print(
                f"  [green]+[/] {escape(create['label'])} (new #{create['placeholder']}){because}"
            )
        for update in types["updates"]:
            because = f" [cyan]by {escape(update['because'])}[/]" if "because" in update else ""
            console.print(f"  [yellow]~[/] {escape(update['label'])} (#{update['id']}){because}")
            for name, change in update["changes"].items():
                old, new = _value(change["old"]), _value(change["new"])
                console.print(f"      {escape(name)}: {escape(old)} → {escape(new)}")
        for delete in types["deletes"]:
            console.print(f"  [red]-[/] {escape(delete['label'])} (#{delete['id']})")
    for note in plan.get("notes", []):
        console.print(f"[cyan]note[/] {escape(note)}")
    if plan.get("placeholders"):
        console.print("Negative ids (new #-n) stand for objects the run would create.")
    render_hygiene(report, console)
    for failure in report.tally.failures:
        console.print(f"[red]failed[/] {failure.object_type} {failure.label}: {failure.reason}")
    for failure in report.read_failures:
        console.print(f"[red]read failed[/] {escape(failure)}")
    for warning in report.warnings:
        console.print(f"[yellow]warning[/] {warning}")
    if report.error:
        console.print(f"[bold red]error[/] {report.error}")


async def _run_with_progress(
    service: SyncService, endpoint: str, redactor, dry_run: bool = False, record=None
) -> RunReport:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    progress = Progress(
        TextColumn("{task.description:<12}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    )
    tasks = {name: progress.add_task(name, total=None, start=False) for name in STAGES}

    def on_event(event: dict) -> None:
        if record is not None:
            record(event)
        stage = event.get("stage")
        if stage not in tasks:
            return
        task = tasks[stage]
        if event["event"] == "progress":
            progress.start_task(task)
            progress.update(
                task,
                total=event["total"],
                completed=event["done"],
                description=f"{stage} ({event.get('phase', '')})"[:30],
            )
        elif event.get("state") == "started":
            progress.start_task(task)
            progress.update(
                task, total=max(event.get("total", 0), 1), completed=0, description=stage
            )
        elif event.get("state") == "finished":
            total = progress.tasks[task].total or 1
            progress.update(task, completed=total)

    with progress:
        report = await service.run(endpoint, on_event, dry_run=dry_run)
    # Failure reasons quote NetBox's and Proxmox's answers: scrubbed like log records.
    summary = Console()
    with summary.capture() as captured:
        (render_plan if dry_run else render_summary)(report, summary)
    sys.stdout.write(redactor(captured.get()))
    return report


def cmd_run(args) -> int:
    try:
        settings = _settings(args)
    except ConfigurationError as exc:
        print(f"proxbox-sync: {exc}", file=sys.stderr)
        return EXIT_USAGE
    redactor = _install_redaction(settings)
    # Without Redis nothing outlives the process: every `run` is a full one.
    baselines = RedisBaselines(settings.redis_url) if settings.redis_url else None
    service = SyncService(settings, baselines=baselines)

    async def execute(record=None) -> RunReport:
        if not args.json:
            return await _run_with_progress(service, args.endpoint, redactor, args.dry_run, record)
        if record is None:  # no run store: the service's own default takes the events
            return await service.run(args.endpoint, dry_run=args.dry_run)
        return await service.run(args.endpoint, record, dry_run=args.dry_run)

    # A preview writes nothing: it needs no lease, like POST /sync/{id}/preview.
    leased = settings.redis_url and not args.dry_run
    try:
        report = asyncio.run(
            _leased(settings, service, args.endpoint, execute) if leased else execute()
        )
    except RunActive as active:
        print(
            f"proxbox-sync: endpoint {args.endpoint} is already being synced by run "
            f"{active.run_id} (another `run` or a `serve` replica); try again when it finishes",
            file=sys.stderr,
        )
        return EXIT_BUSY
    except RunStoreUnavailable as exc:
        print(f"proxbox-sync: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(json.dumps(redactor.data(report.as_dict()), indent=2, sort_keys=True))
    return EXIT_OK if report.ok else EXIT_FAILURES


async def endpoint_key(service: SyncService, ref: str) -> str:
    """The endpoint's NetBox id for a `--endpoint` id or name; a name NetBox does not
    resolve keys itself (the run then fails, leased, with the lookup's error)."""
    if ref.isdigit():
        return str(int(ref))
    from proxbox_backend.clients.http import TransportError
    from proxbox_backend.clients.netbox import NetBoxError
    from proxbox_backend.gateways.netbox import EndpointNotFound, NetBoxGateway

    client = service.netbox_client()
    try:
        return str((await NetBoxGateway(client).endpoint(ref)).id)
    except (EndpointNotFound, NetBoxError, TransportError):
        return ref
    finally:
        await client.aclose()


async def _leased(settings: Settings, service: SyncService, ref: str, execute) -> RunReport:
    """The run under the endpoint's lease in Redis, recorded like the HTTP service's runs,
    so a `serve` replica refuses a second run and answers GET /runs/{id} for this one."""
    store = RedisRunStore(settings.redis_url, lease_ttl=settings.lease_ttl)
    try:
        # The lease is keyed by the endpoint's id, as POST /sync/{id} keys it.
        key = await endpoint_key(service, ref)
        return await recorded(await store.start(key), key, execute)
    finally:
        await store.close()


def cmd_serve(args) -> int:
    import uvicorn

    from proxbox_backend.api import create_app

    try:
        settings = _settings(args)
    except ConfigurationError as exc:
        print(f"proxbox-sync: {exc}", file=sys.stderr)
        return EXIT_USAGE
    _install_redaction(settings)
    try:
        app = create_app(settings, watch=settings.watch)
        if settings.redis_url:
            asyncio.run(check_store(settings.redis_url))
    except (ConfigurationError, RunStoreUnavailable) as exc:
        print(f"proxbox-sync: {exc}", file=sys.stderr)
        return EXIT_USAGE
    # uvicorn.run() would swallow the Ctrl-C that Server.run() raises again after a
    # graceful shutdown; main() turns it into one line and exit 130.
    uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port, log_level="info")).run()
    return EXIT_OK


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--netbox-url", help="NetBox base URL (env PROXBOX_NETBOX_URL)")
    parser.add_argument("--netbox-token", help="NetBox API token (env PROXBOX_NETBOX_TOKEN)")
    parser.add_argument("--netbox-ca-bundle", help="CA bundle for NetBox's TLS certificate")
    parser.add_argument(
        "--proxmox-url", help="override the endpoint's URL (env PROXBOX_PROXMOX_URL)"
    )
    parser.add_argument(
        "--proxmox-token-id",
        help="user@realm!tokenid when the credentials API is unavailable "
        "(env PROXBOX_PROXMOX_TOKEN_ID; default: the endpoint's token id)",
    )
    parser.add_argument(
        "--proxmox-token", help="the token secret; prefer env PROXBOX_PROXMOX_TOKEN"
    )
    parser.add_argument("--proxmox-ca-bundle", help="CA bundle for Proxmox's TLS certificate")
    parser.add_argument(
        "--proxmox-insecure", action="store_true", help="do not verify Proxmox's TLS certificate"
    )
    parser.add_argument(
        "--disappeared",
        choices=DISAPPEARED_POLICIES,
        help="guests gone from Proxmox: mark offline (default), delete or keep "
        "(env PROXBOX_DISAPPEARED_GUESTS)",
    )
    parser.add_argument(
        "--redis-url",
        help="Redis for runs, their events and the per-endpoint lease, shared by every "
        "`serve` replica and `run` (env PROXBOX_BACKEND_REDIS_URL; default: none, runs stay "
        "in this process)",
    )


def cmd_permissions(args) -> int:
    """The NetBox permissions the backend's user needs (no NetBox is asked)."""
    from proxbox_backend.permissions import grouped_by_actions, required_permissions

    if args.json:
        print(json.dumps(required_permissions(), indent=2))
        return EXIT_OK
    print("| Object types | Actions |\n|---|---|")
    for actions, object_types in sorted(grouped_by_actions().items(), key=lambda g: g[1][0]):
        types = ", ".join(f"`{t}`" for t in object_types)
        print(f"| {types} | {', '.join(actions)} |")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    from proxbox_backend import __version__

    parser = argparse.ArgumentParser(
        prog="proxbox-sync",
        description="Sync Proxmox VE inventory into NetBox",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"proxbox-sync {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="sync one endpoint now")
    run.add_argument("--endpoint", required=True, help="the endpoint's NetBox id or name")
    run.add_argument("--json", action="store_true", help="print the report as JSON")
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="preview: plan the sync against NetBox's current state and print what it would "
        "create, update (field: old → new) and delete, writing nothing",
    )
    _common(run)
    run.set_defaults(func=cmd_run)
    serve = sub.add_parser("serve", help="run the HTTP service")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8800)
    _common(serve)
    serve.set_defaults(func=cmd_serve)
    permissions = sub.add_parser(
        "permissions",
        help="print the NetBox permissions the backend's user needs (one ObjectPermission "
        "per row: its object types and actions)",
    )
    permissions.add_argument("--json", action="store_true", help="object type → actions, as JSON")
    permissions.set_defaults(func=cmd_permissions)
    return parser


def main(argv: list[str] | None = None) -> int | None:
    from proxbox_processes import collect_garbage_less_often

    from proxbox_redaction import run_console

    collect_garbage_less_often()

    def command() -> int:
        args = build_parser().parse_args(argv)
        return args.func(args)

    return run_console("proxbox-sync", command)


if __name__ == "__main__":
    sys.exit(main())
