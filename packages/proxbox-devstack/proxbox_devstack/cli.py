"""The `proxbox` command: run the dev stack.

proxbox up [-d] [--port 8000] [--host 127.0.0.1] [--web-workers 2]
proxbox down
proxbox status [--json]
proxbox services up [-d] | down
proxbox template build [--ship]
proxbox --version
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from urllib.parse import urlsplit

MIN_PYTHON = (3, 12)


def check_python(version_info: tuple[int, ...]) -> str | None:
    if tuple(version_info[:2]) < MIN_PYTHON:
        found = ".".join(str(part) for part in version_info[:3])
        return f"Python {found} is too old: the stack needs Python 3.12 or newer (uv python install 3.12)"
    return None


EXIT_CODES = """\
exit codes:
  0    success (status: the stack runs)
  1    any other failure
  2    usage error (unknown command or option)
  3    a port the stack needs is in use
  4    PostgreSQL or Redis from the environment is unreachable
  5    the data directory (PROXBOX_HOME) is not writable
  6    Python is older than 3.12
  7    no stack is running, or one of its processes died (status)
  130  interrupted (Ctrl-C; one line on stderr, no traceback)
  141  stdout closed by its reader (`proxbox status --json | head -1`), quietly"""


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="proxbox",
        description="Run the Proxbox dev stack.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"proxbox {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    up = commands.add_parser("up", help="start the stack (foreground; -d to detach)")
    up.add_argument("-d", "--detach", action="store_true", help="run in the background")
    up.add_argument("--host", default="127.0.0.1", help="address NetBox binds (default 127.0.0.1)")
    up.add_argument("--port", type=int, default=8000, help="NetBox HTTP port (default 8000)")
    up.add_argument("--web-workers", type=int, default=2, help="gunicorn workers (default 2)")
    up.add_argument(
        "--no-demo",
        dest="demo",
        action="store_false",
        help="NetBox and its workers only: no simulated cluster, sync backend or first sync",
    )
    up.add_argument("--detached-child", action="store_true", help=argparse.SUPPRESS)

    commands.add_parser("down", help="stop a stack started with `up -d`, services included")
    status = commands.add_parser("status", help="show the stack's processes and URLs")
    status.add_argument("--json", action="store_true", help="print them as one JSON object")

    services = commands.add_parser("services", help="only PostgreSQL and Redis")
    services_commands = services.add_subparsers(dest="services_command", required=True)
    services_up = services_commands.add_parser("up", help="start them and print their URLs")
    services_up.add_argument("-d", "--detach", action="store_true", help="return once they run")
    services_commands.add_parser("down", help="stop the embedded services")

    template = commands.add_parser("template", help="the migrated NetBox template's dump")
    template_commands = template.add_subparsers(dest="template_command", required=True)
    template_build_parser = template_commands.add_parser(
        "build",
        help="write it to the template cache ($PROXBOX_TEMPLATE_CACHE, else ~/.cache/proxbox/"
        "templates); a first `up` restores it instead of migrating",
    )
    template_build_parser.add_argument(
        "--ship",
        action="store_true",
        help="also copy it among the dumps proxbox-devstack ships (its template_dumps/), "
        "replacing the old one for this PostgreSQL major and collation provider",
    )
    return parser


def _emit(line: str) -> None:
    print(line, flush=True)


def _services_up(data_dir, detach: bool) -> int:
    from proxbox_redaction import redact_url

    from . import services as services_mod

    result = services_mod.start_services(data_dir, log=_emit)
    # Embedded servers have no password; a server from the environment may.
    _emit(f"PROXBOX_DATABASE_URL={redact_url(result.database_url)}")
    _emit(f"PROXBOX_REDIS_URL={redact_url(result.redis_url)}")
    if detach:
        return 0
    _emit("press Ctrl-C to stop")
    stopping = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: stopping.set())
    stopping.wait()
    for name in services_mod.stop_services(data_dir, tuple(result.started)):
        _emit(f"stopped {name}")
    return 0


def run(argv: list[str]) -> int:
    from .context import UpOptions
    from .paths import data_dir as default_data_dir
    from .stack import down, status, template_build, up, up_detached

    args = build_parser().parse_args(argv)
    data_dir = default_data_dir()
    if args.command == "up":
        options = UpOptions(
            host=args.host, port=args.port, web_workers=args.web_workers, demo=args.demo
        )
        if args.detach:
            child_argv = [a for a in argv if a not in ("-d", "--detach")]
            return up_detached(data_dir, child_argv, options, log=_emit)
        return up(data_dir, options, log=_emit, detached_child=args.detached_child)
    if args.command == "down":
        return down(data_dir, log=_emit)
    if args.command == "status":
        return status(data_dir, log=_emit, as_json=args.json)
    if args.command == "template":
        return template_build(data_dir, log=_emit, ship=args.ship)
    if args.services_command == "up":
        return _services_up(data_dir, args.detach)
    from .services import stop_services

    stopped = stop_services(data_dir)
    _emit(f"stopped: {', '.join(stopped) or 'nothing was running'}")
    return 0


def main(argv: list[str] | None = None) -> int | None:
    problem = check_python(sys.version_info)
    if problem is not None:
        print(f"proxbox: {problem}", file=sys.stderr)
        return 6
    import proxbox_redaction

    from .errors import StackError
    from .state import DATABASE_URL_ENV, REDIS_URL_ENV

    # Tracebacks and log records of the launcher itself: the services' passwords masked.
    passwords = [
        urlsplit(os.environ.get(name, "")).password for name in (DATABASE_URL_ENV, REDIS_URL_ENV)
    ]
    proxbox_redaction.install(secrets=[p for p in passwords if p])

    def command() -> int:
        try:
            return run(sys.argv[1:] if argv is None else argv)
        except StackError as exc:
            print(f"proxbox: {exc}", file=sys.stderr, flush=True)
            return exc.exit_code

    return proxbox_redaction.run_console("proxbox", command)


if __name__ == "__main__":
    sys.exit(main())
