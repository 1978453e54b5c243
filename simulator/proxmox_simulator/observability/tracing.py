"""Optional OpenTelemetry tracing: a server span per HTTP request, a span per task.

Tracing is on only when the standard OpenTelemetry environment configures an
exporter (see :func:`from_env`); otherwise :func:`from_env` answers ``None`` and
the app and the workers skip every tracing call after one ``is None`` check.

The simulator keeps its own tracer provider (not the process-global one), so
several apps in one process (tests) never fight over it, and shuts it down with
the app, which flushes the spans still queued.

Span attributes carry route templates, methods, status codes, request IDs and
task identities only: never a raw path, a query string, a header, a body, a
ticket or a token. Everything is passed through the log redactor as well, as a
second line of defence.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from proxmox_simulator.config import ConfigurationError

log = logging.getLogger("proxmox_simulator.tracing")

SERVICE_NAME = "proxmox-simulator"
EXPORTERS = ("otlp", "console")
_OTLP_ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
_PROTOCOLS = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")


def configured_exporters(environ: Mapping[str, str]) -> tuple[str, ...]:
    """The exporters the environment asks for; empty when tracing is off.

    - ``OTEL_SDK_DISABLED=true`` switches tracing off whatever else is set.
    - ``OTEL_TRACES_EXPORTER`` (comma-separated ``otlp``, ``console``, ``none``)
      names them explicitly.
    - Without it, an OTLP endpoint (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or
      ``OTEL_EXPORTER_OTLP_ENDPOINT``) means ``otlp``. Unlike the SDK's own
      default, nothing is exported when neither is set.
    """
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return ()
    raw = environ.get("OTEL_TRACES_EXPORTER", "").strip()
    if not raw:
        endpoint = any(environ.get(name, "").strip() for name in _OTLP_ENDPOINTS)
        names: tuple[str, ...] = ("otlp",) if endpoint else ()
    else:
        names = tuple(dict.fromkeys(n.strip().lower() for n in raw.split(",") if n.strip()))
        unknown = [n for n in names if n not in (*EXPORTERS, "none")]
        if unknown:
            raise ConfigurationError(
                f"OTEL_TRACES_EXPORTER: unsupported exporter '{unknown[0]}' "
                f"(supported: {', '.join(EXPORTERS)}, none)"
            )
        if "none" in names:
            return ()
    if "otlp" in names:
        # The signal-specific variable wins over the general one.
        for name in _PROTOCOLS:
            protocol = environ.get(name, "").strip()
            if protocol:
                if protocol != "http/protobuf":
                    raise ConfigurationError(
                        f"{name}: unsupported protocol '{protocol}' (supported: http/protobuf)"
                    )
                break
    return names


class Tracing:
    """The simulator's tracer and the provider that exports its spans."""

    def __init__(self, provider, exporters: tuple[str, ...]) -> None:
        from opentelemetry import trace
        from opentelemetry.propagators.textmap import DefaultGetter
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.provider = provider
        self.exporters = exporters
        self.tracer = provider.get_tracer("proxmox_simulator")
        self._trace = trace
        self._propagator = TraceContextTextMapPropagator()
        self._getter = DefaultGetter()

    # -- HTTP ---------------------------------------------------------------

    def server_span(self, method: str, headers: Mapping[str, str]):
        """A SERVER span continuing the caller's W3C ``traceparent``, if any."""
        carrier = {k: v for k, v in headers.items() if k in ("traceparent", "tracestate")}
        context = self._propagator.extract(carrier, getter=self._getter) if carrier else None
        return self.tracer.start_as_current_span(
            method,
            context=context,
            kind=self._trace.SpanKind.SERVER,
            attributes={"http.request.method": method},
            record_exception=False,
            set_status_on_exception=True,
        )

    def annotate_request(
        self, route: str | None, request_id: str | None, upid: str | None = None
    ) -> None:
        """Name the current server span after its route template; add the request ID
        and, when the request started a task, its UPID (the task's span carries it too)."""
        span = self._trace.get_current_span()
        if not span.is_recording():
            return
        if route:
            span.set_attribute("http.route", route)
        if request_id:
            span.set_attribute("pvesim.request_id", request_id)
        if upid:
            from proxmox_simulator.api.logging import redact

            span.set_attribute("pvesim.task.upid", redact(upid))

    def finish_request(self, span, method: str, route: str | None, status: int | None) -> None:
        from opentelemetry.trace import Status, StatusCode

        if route:
            span.update_name(f"{method} {route}")
            span.set_attribute("http.route", route)
        if status is not None:
            span.set_attribute("http.response.status_code", status)
            if status >= 500:
                span.set_status(Status(StatusCode.ERROR))

    # -- tasks --------------------------------------------------------------

    def task_span(self, task_type: str, node: str, upid: str, attempt: int, worker: str):
        from proxmox_simulator.api.logging import redact

        return self.tracer.start_as_current_span(
            f"task {task_type}",
            kind=self._trace.SpanKind.CONSUMER,
            attributes={
                "pvesim.task.type": task_type,
                "pvesim.task.node": node,
                "pvesim.task.upid": redact(upid),
                "pvesim.task.attempt": attempt,
                "pvesim.task.worker": worker,
            },
            record_exception=False,
        )

    def finish_task(self, span, exitstatus: str | None) -> None:
        from opentelemetry.trace import Status, StatusCode

        from proxmox_simulator.api.logging import redact

        if exitstatus is None:
            return
        # An executor's failure message may quote parameters: redact it like a log line.
        span.set_attribute("pvesim.task.exitstatus", redact(exitstatus)[:200])
        if exitstatus != "OK" and not exitstatus.startswith("WARNINGS"):
            span.set_status(Status(StatusCode.ERROR))

    def shutdown(self) -> None:
        """Flush queued spans and stop the exporters."""
        try:
            self.provider.shutdown()
        except Exception:  # an unreachable collector must not fail the shutdown
            log.warning("tracing shutdown failed", exc_info=True)


def from_env(environ: Mapping[str, str]) -> Tracing | None:
    """A :class:`Tracing` when the environment configures an exporter, else ``None``.

    Raises :class:`ConfigurationError` for an exporter or protocol the simulator
    does not ship, or when the OpenTelemetry SDK is not installed."""
    exporters = configured_exporters(environ)
    if not exporters:
        return None
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError as exc:  # pragma: no cover - the SDK is a dependency; keep a clear error
        raise ConfigurationError(
            f"OTEL_TRACES_EXPORTER: tracing needs the OpenTelemetry SDK ({exc})"
        ) from None
    # OTEL_SERVICE_NAME or service.name in OTEL_RESOURCE_ATTRIBUTES overrides the default.
    named = environ.get("OTEL_SERVICE_NAME") or "service.name=" in environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    )
    resource = Resource.create({} if named else {"service.name": SERVICE_NAME})
    provider = TracerProvider(resource=resource)
    for name in exporters:
        if name == "otlp":
            try:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            except ImportError as exc:  # pragma: no cover
                raise ConfigurationError(
                    f"OTEL_TRACES_EXPORTER: the OTLP exporter is not installed ({exc})"
                ) from None
            exporter = OTLPSpanExporter()  # endpoint, headers, timeout: OTEL_EXPORTER_OTLP_*
        else:
            exporter = ConsoleSpanExporter()
        provider.add_span_processor(BatchSpanProcessor(exporter))
    log.info("tracing on: exporters %s", ", ".join(exporters))
    return Tracing(provider, exporters)


class TracingMiddleware:
    """ASGI middleware: one SERVER span around every HTTP request.

    The span is named ``METHOD route-template``: the template the API dispatcher
    matched (it annotates the span through :meth:`Tracing.annotate_request`), or
    the FastAPI route of an operator endpoint. ``x-request-id`` of the response
    becomes ``pvesim.request_id``."""

    def __init__(self, app, tracing: Tracing) -> None:
        self.app = app
        self.tracing = tracing

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {
            key.decode("latin-1"): value.decode("latin-1")
            for key, value in scope.get("headers", ())
            if key in (b"traceparent", b"tracestate")
        }
        method = scope.get("method", "GET")
        status: int | None = None

        async def send_traced(message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        with self.tracing.server_span(method, headers) as span:
            try:
                await self.app(scope, receive, send_traced)
            finally:
                annotated = getattr(span, "attributes", None) or {}
                route = annotated.get("http.route")
                if not route:
                    matched = scope.get("route")
                    route = getattr(matched, "path", None) or "(unmatched)"
                self.tracing.finish_request(span, method, route, status)
