"""Serving the app: uvicorn settings, self-signed TLS, PVE reason phrases,
and an in-process server for tests.
"""

from __future__ import annotations

import contextvars
import datetime
import ipaddress
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import uvicorn
from proxbox_processes import free_port, stop_process, wait_for_http
from uvicorn.protocols.http import httptools_impl

from proxmox_simulator.api.app import create_app
from proxmox_simulator.api.render import REASON_HEADER
from proxmox_simulator.config import Settings, settings_env

# -- PVE reason phrases ---------------------------------------------------------
# PVE puts its error message in the HTTP status line ("HTTP/1.1 403 Permission
# check failed (...)") and clients such as proxmoxer surface it.  ASGI has no
# field for a reason phrase, so the renderer passes it in a private header that
# is stripped here and spliced into the status line of the httptools protocol.
# That protocol's STATUS_LINE and RequestResponseCycle.send are uvicorn internals, so
# simulator/pyproject.toml keeps uvicorn below its next minor release; raising that
# bound means running the reason-phrase tests against the new release first.

_reason: contextvars.ContextVar[bytes | None] = contextvars.ContextVar("pve_reason", default=None)
_REASON_HEADER = REASON_HEADER.encode()


class _StatusLines(dict):
    def __getitem__(self, status: int) -> bytes:
        reason = _reason.get()
        if reason:
            return b"HTTP/1.1 %d %s\r\n" % (status, reason)
        return super().__getitem__(status)


def _install_reason_phrases() -> None:
    cycle = httptools_impl.RequestResponseCycle
    if getattr(cycle, "_pve_reason_installed", False):
        return
    httptools_impl.STATUS_LINE = _StatusLines(httptools_impl.STATUS_LINE)
    original_send = cycle.send

    async def send(self, message):
        if message.get("type") == "http.response.start":
            headers = list(message.get("headers", []))
            reason = next((v for k, v in headers if k.lower() == _REASON_HEADER), None)
            if reason is not None:
                message = {
                    **message,
                    "headers": [(k, v) for k, v in headers if k.lower() != _REASON_HEADER],
                }
                safe = bytes(b for b in reason if 32 <= b < 127) or None
                token = _reason.set(safe)
                try:
                    return await original_send(self, message)
                finally:
                    _reason.reset(token)
        return await original_send(self, message)

    cycle.send = send
    cycle._pve_reason_installed = True


# -- TLS ------------------------------------------------------------------------------


def ensure_certificate(
    data_dir: Path, hostnames: tuple[str, ...] = ("localhost",)
) -> tuple[Path, Path]:
    """Create ``tls/pve-ssl.{pem,key}`` once; later starts reuse them."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    folder = Path(data_dir) / "tls"
    cert_path, key_path = folder / "pve-ssl.pem", folder / "pve-ssl.key"
    if cert_path.exists() and key_path.exists():
        return cert_path, key_path
    folder.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "PVE Cluster Node (simulated)"),
            x509.NameAttribute(NameOID.COMMON_NAME, socket.gethostname()),
        ]
    )
    now = datetime.datetime.now(datetime.UTC)
    alt_names = [x509.DNSName(h) for h in {*hostnames, socket.gethostname()}]
    alt_names += [
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address("::1")),
    ]
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_path.chmod(0o600)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert_path, key_path


def uvicorn_config(
    app, settings: Settings, *, host: str, port: int, tls: bool, log_level: str = "warning"
) -> uvicorn.Config:
    _install_reason_phrases()
    kwargs = {}
    if tls:
        cert, key = ensure_certificate(settings.data_dir)
        kwargs = {"ssl_certfile": str(cert), "ssl_keyfile": str(key)}
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http="httptools",
        loop="uvloop",
        log_level=log_level,
        access_log=False,
        lifespan="on",
        server_header=False,  # the app sends PVE's own "Server: pve-api-daemon/3.0"
        **kwargs,
    )


def serve(
    settings: Settings,
    *,
    host: str = "127.0.0.1",
    port: int = 8006,
    tls: bool = False,
    log_level: str = "info",
) -> None:
    from proxmox_simulator.api.logging import configure_logging, install_redaction

    install_redaction(settings.database_url)
    configure_logging(log_level)
    app = create_app(settings)
    config = uvicorn_config(app, settings, host=host, port=port, tls=tls, log_level=log_level)
    uvicorn.Server(config).run()


class SimulatorServer:
    """Run the simulator in a background thread on a free loopback port.

    >>> with SimulatorServer(settings, tls=True) as server:
    ...     server.base_url  # "https://127.0.0.1:<port>"
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        host: str = "127.0.0.1",
        tls: bool = False,
        app=None,
    ):
        self.settings = settings or Settings.from_env()
        self.host = host
        self.tls = tls
        self.app = app or create_app(self.settings)
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, 0))
        self.port = self._sock.getsockname()[1]
        config = uvicorn_config(self.app, self.settings, host=host, port=self.port, tls=tls)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._run, name="proxmox-simulator", daemon=True)

    def _run(self) -> None:
        self._server.run(sockets=[self._sock])

    @property
    def base_url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> SimulatorServer:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("simulator server did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=15)

    def __enter__(self) -> SimulatorServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class SimulatorProcess:
    """Run ``proxmox-simulator serve`` as a child process on a free port.

    A separate process keeps the simulator's CPU work off the caller's GIL
    (end-to-end tests, benchmarks).  Output goes to a temporary log file.

    >>> with SimulatorProcess(settings, tls=True) as sim:
    ...     sim.base_url
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        tls: bool = False,
        log_level: str = "warning",
    ):
        self.settings = settings or Settings.from_env()
        self.host = host
        self.tls = tls
        self.log_level = log_level
        self.port = port or free_port(host)
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the process; closed in stop()
        self._proc: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    def start(self, timeout: float = 60.0) -> SimulatorProcess:
        cmd = [
            sys.executable,
            "-m",
            "proxmox_simulator",
            "serve",
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--log-level",
            self.log_level,
        ]
        if self.tls:
            cmd.append("--tls")
        env = {**os.environ, **settings_env(self.settings)}
        self._proc = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        try:
            # /readyz answers 503 until the database is reachable: only a 2xx means ready.
            wait_for_http(
                self.base_url + "/readyz",
                self._proc,
                timeout=timeout,
                interval=0.1,
                require_success=True,
                verify=False,
            )
        except RuntimeError as exc:
            output = self.output()
            self.stop()
            raise RuntimeError(f"simulator not ready: {exc}: {output}") from None
        return self

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def stop(self) -> None:
        if self._proc is not None:
            stop_process(self._proc, timeout=15)
        self.log.close()

    def __enter__(self) -> SimulatorProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
