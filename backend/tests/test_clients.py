"""HTTP clients against httpx.MockTransport: auth, retries and backoff, bulk isolation,
pagination, and secrets that never show up in reprs or logs."""

import asyncio
import http.server
import io
import json
import logging
import threading

import httpx
import pytest

from proxbox_backend.clients.http import (
    KEEPALIVE_EXPIRY,
    ResilientTransport,
    RetryPolicy,
    TransportError,
)
from proxbox_backend.clients.netbox import NetBoxClient
from proxbox_backend.clients.proxmox import ProxmoxClient, ProxmoxCredentials, ProxmoxError
from proxbox_backend.secrets import Secret, install_redaction, redact

NETBOX_TOKEN = "0123456789abcdef0123456789abcdef01234567"
PVE_SECRET = "5d7c9a1e-1111-2222-3333-444455556666"


class Recorder:
    """A scripted server: answers in order, remembers every request."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer(request) if callable(answer) else answer


class Sleeps(list):
    async def __call__(self, seconds: float) -> None:
        self.append(seconds)


def netbox(server, token=NETBOX_TOKEN, **kw) -> tuple[NetBoxClient, Sleeps]:
    sleeps = Sleeps()
    client = NetBoxClient(
        "http://netbox.test",
        Secret(token),
        transport=httpx.MockTransport(server),
        sleep=sleeps,
        retry=RetryPolicy(attempts=3, backoff=0.5, jitter=0),
        **kw,
    )
    return client, sleeps


def proxmox(server, credentials=None) -> tuple[ProxmoxClient, Sleeps]:
    sleeps = Sleeps()
    credentials = credentials or ProxmoxCredentials("sync@pve!proxbox", Secret(PVE_SECRET))
    client = ProxmoxClient(
        "https://pve.test:8006",
        credentials,
        transport=httpx.MockTransport(server),
        sleep=sleeps,
        retry=RetryPolicy(attempts=3, backoff=0.5, jitter=0),
    )
    return client, sleeps


@pytest.mark.parametrize(
    ("token", "header"),
    [
        (NETBOX_TOKEN, f"Token {NETBOX_TOKEN}"),
        ("nbt_abc123.secretpart", "Bearer nbt_abc123.secretpart"),
    ],
)
@pytest.mark.asyncio
async def test_netbox_token_versions(token, header):
    server = Recorder(httpx.Response(200, json={"results": [], "next": None}))
    client, _ = netbox(server, token)
    await client.list("/dcim/sites/")
    assert server.requests[0].headers["Authorization"] == header
    assert server.requests[0].url.path == "/api/dcim/sites/"


@pytest.mark.parametrize("status", [429, 500, 502, 503, 409])
@pytest.mark.asyncio
async def test_idempotent_reads_retry_with_growing_backoff(status):
    server = Recorder(
        httpx.Response(status),
        httpx.Response(status),
        httpx.Response(200, json={"results": [{"id": 1}], "next": None}),
    )
    client, sleeps = netbox(server)
    assert await client.list("/dcim/sites/") == [{"id": 1}]
    assert len(server.requests) == 3 and sleeps == [0.5, 1.0]
    assert client.stats.retries == 2


@pytest.mark.asyncio
async def test_retries_are_bounded():
    server = Recorder(httpx.Response(503))
    client, sleeps = netbox(server)
    response = await client.request("GET", "/dcim/sites/")
    assert response.status_code == 503 and len(server.requests) == 3 and len(sleeps) == 2


@pytest.mark.parametrize("status", [501, 505])
@pytest.mark.asyncio
async def test_a_method_or_version_the_server_does_not_implement_is_not_retried(status):
    server = Recorder(httpx.Response(status), httpx.Response(200))
    client, sleeps = netbox(server)
    response = await client.request("GET", "/cluster/options")
    assert response.status_code == status and len(server.requests) == 1 and sleeps == []


@pytest.mark.asyncio
async def test_retry_after_is_honoured():
    server = Recorder(httpx.Response(429, headers={"Retry-After": "3"}), httpx.Response(200))
    client, sleeps = netbox(server)
    await client.request("GET", "/x/")
    assert sleeps == [3.0]


@pytest.mark.asyncio
async def test_post_is_not_repeated_after_a_server_error():
    # The server may have created the objects before failing: a retry could double them.
    server = Recorder(httpx.Response(500, json={"error": "boom"}))
    client, _ = netbox(server)
    result = await client.bulk_create("/dcim/sites/", [{"name": "a"}])
    assert len(server.requests) == 1 and "HTTP 500" in result.failed[0]


@pytest.mark.asyncio
async def test_post_is_retried_when_it_never_reached_the_server():
    server = Recorder(httpx.ConnectError("refused"), httpx.Response(201, json=[{"id": 9}]))
    client, sleeps = netbox(server)
    result = await client.bulk_create("/dcim/sites/", [{"name": "a"}])
    assert result.succeeded == {0: {"id": 9}} and sleeps == [0.5]


class _ConnectionCounter(http.server.BaseHTTPRequestHandler):
    """HTTP/1.1 with keep-alive, as gunicorn and pveproxy serve: one handler per connection."""

    protocol_version = "HTTP/1.1"
    connections = 0

    def setup(self):
        type(self).connections += 1
        super().setup()

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = b'{"id": 1}'
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args):
        pass


@pytest.mark.asyncio
async def test_a_connection_idle_past_the_keepalive_expiry_is_not_reused():
    """gunicorn (NetBox's server) drops a keep-alive connection after 2 s without a request;
    a POST written as it does so is lost and cannot be retried (a sync failed with
    "ReadError" after its read phase). Requests in a burst share a connection; after a
    pause longer than KEEPALIVE_EXPIRY the next one opens a new connection."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ConnectionCounter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _ConnectionCounter.connections = 0
    client = NetBoxClient(f"http://127.0.0.1:{server.server_port}", Secret(NETBOX_TOKEN))
    try:
        for _ in range(3):
            await client.request("POST", "/dcim/sites/", json={"name": "a"})
        assert _ConnectionCounter.connections == 1
        await asyncio.sleep(KEEPALIVE_EXPIRY + 0.3)
        await client.request("POST", "/dcim/sites/", json={"name": "b"})
        assert _ConnectionCounter.connections == 2
        assert KEEPALIVE_EXPIRY < 2, "below gunicorn's default keep-alive"
    finally:
        await client.aclose()
        server.shutdown()
        server.server_close()


@pytest.mark.asyncio
async def test_connection_errors_give_up_with_a_transport_error():
    server = Recorder(httpx.ConnectError("refused"))
    client, _ = netbox(server)
    with pytest.raises(TransportError, match="3 attempt"):
        await client.get("/status/")


@pytest.mark.asyncio
async def test_pagination_follows_next():
    def page(request):
        offset = int(request.url.params["offset"])
        items = [{"id": i} for i in range(offset, min(offset + 1000, 2500))]
        more = offset + 1000 < 2500
        return httpx.Response(200, json={"results": items, "next": "x" if more else None})

    client, _ = netbox(Recorder(page))
    assert len(await client.list("/virtualization/virtual-machines/", {"cluster_id": 1})) == 2500


@pytest.mark.asyncio
async def test_bulk_create_isolates_failing_entries_and_resends_the_rest():
    def answer(request):
        body = json.loads(request.content)
        if any(item["name"] == "bad" for item in body):
            index = next(i for i, item in enumerate(body) if item["name"] == "bad")
            return httpx.Response(
                400,
                json={
                    "detail": "1 of 3 objects could not be created.",
                    "errors": [{"index": index, "errors": {"name": ["taken"]}}],
                },
            )
        return httpx.Response(201, json=[{"id": 100 + i, **item} for i, item in enumerate(body)])

    server = Recorder(answer)
    client, _ = netbox(server)
    result = await client.bulk_create("/x/", [{"name": "a"}, {"name": "bad"}, {"name": "c"}])
    assert sorted(result.succeeded) == [0, 2] and result.succeeded[2]["name"] == "c"
    assert result.failed == {1: "HTTP 400: name: taken"}
    assert len(server.requests) == 2


@pytest.mark.asyncio
async def test_bulk_update_errors_are_correlated_by_id():
    server = Recorder(
        httpx.Response(
            400, json={"detail": "x", "errors": [{"id": 5, "errors": {"status": ["no"]}}]}
        ),
        httpx.Response(200, json=[{"id": 6}]),
    )
    client, _ = netbox(server)
    result = await client.bulk_update("/x/", [{"id": 5, "status": "?"}, {"id": 6, "status": "a"}])
    assert result.failed == {0: "HTTP 400: status: no"} and list(result.succeeded) == [1]


@pytest.mark.asyncio
async def test_bulk_failure_without_entries_fails_the_whole_batch():
    server = Recorder(httpx.Response(403, json={"detail": "You do not have permission."}))
    client, _ = netbox(server)
    result = await client.bulk_delete("/x/", [1, 2])
    assert result.succeeded == {} and set(result.failed) == {0, 1}
    assert "permission" in result.failed[0]


@pytest.mark.asyncio
async def test_bulk_delete_counts_on_204():
    server = Recorder(httpx.Response(204))
    client, _ = netbox(server)
    result = await client.bulk_delete("/x/", [1, 2])
    assert result.succeeded == {0: 1, 1: 2}
    assert json.loads(server.requests[0].content) == [{"id": 1}, {"id": 2}]


@pytest.mark.asyncio
async def test_proxmox_token_header_and_envelope():
    server = Recorder(httpx.Response(200, json={"data": [{"type": "cluster", "name": "x"}]}))
    client, _ = proxmox(server)
    assert await client.cluster_status() == [{"type": "cluster", "name": "x"}]
    request = server.requests[0]
    assert request.headers["Authorization"] == f"PVEAPIToken=sync@pve!proxbox={PVE_SECRET}"
    assert request.url.path == "/api2/json/cluster/status"


@pytest.mark.asyncio
async def test_proxmox_ticket_login_sends_cookie_and_csrf_on_writes():
    server = Recorder(
        httpx.Response(
            200, json={"data": {"ticket": "PVE:root@pam:TICKET", "CSRFPreventionToken": "CSRF123"}}
        ),
        httpx.Response(200, json={"data": None}),
        httpx.Response(200, json={"data": "UPID:..."}),
    )
    credentials = ProxmoxCredentials(username="root@pam", password=Secret("hunter2"))
    client, _ = proxmox(server, credentials)
    await client.login()
    await client.get("/version")
    await client.request("POST", "/nodes/pve/qemu/100/status/start")
    login, read, write = server.requests
    assert b"password=hunter2" in login.content
    assert "PVEAuthCookie=PVE:root@pam:TICKET" in read.headers["cookie"]
    assert "CSRFPreventionToken" not in read.headers
    assert write.headers["CSRFPreventionToken"] == "CSRF123"


@pytest.mark.asyncio
async def test_proxmox_error_carries_pve_reason():
    server = Recorder(
        httpx.Response(
            403, extensions={"reason_phrase": b"Permission check failed"}, json={"data": None}
        )
    )
    client, _ = proxmox(server)
    with pytest.raises(ProxmoxError) as error:
        await client.get("/nodes")
    assert error.value.status == 403 and error.value.reason == "Permission check failed"


def test_credentials_need_a_complete_pair():
    with pytest.raises(ValueError):
        ProxmoxCredentials(token_id="sync@pve!x")
    with pytest.raises(ValueError, match="user@realm!tokenid"):
        ProxmoxCredentials(token_id="noexclamation", token_secret=Secret("s"))


def test_secrets_stay_out_of_reprs():
    credentials = ProxmoxCredentials("sync@pve!proxbox", Secret(PVE_SECRET))
    client, _ = proxmox(Recorder(httpx.Response(200)), credentials)
    for text in (
        repr(credentials),
        str(credentials),
        repr(client),
        repr(netbox(Recorder(httpx.Response(200)))[0]),
    ):
        assert PVE_SECRET not in text and NETBOX_TOKEN not in text


@pytest.mark.parametrize(
    "line",
    [
        f"Authorization: Token {NETBOX_TOKEN}",
        "Authorization: Bearer nbt_abc123def456ghi789.jkl",
        f"PVEAPIToken=sync@pve!proxbox={PVE_SECRET}",
        "Cookie: PVEAuthCookie=PVE:root@pam:65A1B2C3::sig",
        '{"token_secret": "s3cr3t-value"}',
        "CSRFPreventionToken: 65A1B2C3:abcdef",
    ],
)
def test_redact_patterns(line):
    cleaned = redact(line)
    assert "***" in cleaned
    for secret in (NETBOX_TOKEN, PVE_SECRET, "s3cr3t-value", "abcdef", "jkl", "::sig"):
        assert secret not in cleaned


def test_secrets_never_reach_handlers_configured_later():
    """A handler of its own, added after installation (as uvicorn's log_config does), on
    a parent of the logger that logs: no test-runner capture handler is involved."""
    install_redaction(Secret(PVE_SECRET))
    stream = io.StringIO()
    parent = logging.getLogger("proxbox_backend")
    handler = logging.StreamHandler(stream)
    saved = parent.handlers[:], parent.propagate
    parent.handlers[:], parent.propagate = [handler], False
    try:
        logging.getLogger("proxbox_backend.http").warning("calling with %s", PVE_SECRET)
        logging.getLogger("proxbox_backend.sync").warning(
            "header Authorization: Token %s", NETBOX_TOKEN
        )
    finally:
        parent.handlers[:], parent.propagate = saved
    assert PVE_SECRET not in stream.getvalue() and NETBOX_TOKEN not in stream.getvalue()
    assert stream.getvalue().count("***") == 2


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("answers", "requests", "status"),
    [
        # an ownership verdict is final: one request, reported at once
        (
            [httpx.Response(409, json={"detail": "owned", "code": "owned_by_another_endpoint"})],
            1,
            409,
        ),
        # a race ("retry later") is repeated
        (
            [
                httpx.Response(409, json={"detail": "busy", "code": "retry"}),
                httpx.Response(
                    200,
                    json={
                        "cluster": {"id": 4},
                        "proxmox_cluster": 2,
                        "created": False,
                        "changed": False,
                    },
                ),
            ],
            2,
            200,
        ),
    ],
)
async def test_claim_retries_races_but_not_verdicts(answers, requests, status):
    from proxbox_backend.domain.endpoint import Endpoint
    from proxbox_backend.gateways.netbox import ClaimRefused, NetBoxGateway

    server = Recorder(*answers)
    client, _ = netbox(server)
    endpoint = Endpoint(3, "pve", "h", 8006, True, True, "cluster", None, None, None, None)
    gateway = NetBoxGateway(client)
    if status == 409:
        with pytest.raises(ClaimRefused, match="owned"):
            await gateway.claim(endpoint, {"name": "x"})
    else:
        assert (await gateway.claim(endpoint, {"name": "x"})).cluster_id == 4
    assert len(server.requests) == requests
    assert server.requests[0].url.path == "/api/plugins/proxbox/endpoints/proxmox/3/sync-cluster/"


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (
            httpx.Response(200, json={"token_id": "sync@pve!nb", "token_secret": PVE_SECRET}),
            "sync@pve!nb",
        ),
        (httpx.Response(404, json={"detail": "Not found."}), None),
    ],
)
async def test_credentials_api_or_fallback(answer, expected):
    from proxbox_backend.domain.endpoint import Endpoint
    from proxbox_backend.gateways.netbox import NetBoxGateway

    server = Recorder(answer)
    client, _ = netbox(server)
    endpoint = Endpoint(3, "pve", "h", 8006, True, True, "cluster", None, None, None, None)
    credentials = await NetBoxGateway(client).credentials(endpoint)
    assert server.requests[0].url.path == "/api/plugins/proxbox/endpoints/proxmox/3/credentials/"
    assert (credentials.token_id if credentials else None) == expected
    if credentials:
        assert credentials.token_secret.reveal() == PVE_SECRET and PVE_SECRET not in repr(
            credentials
        )


@pytest.mark.asyncio
async def test_withheld_credentials_name_the_permission_to_grant():
    from proxbox_backend.domain.endpoint import Endpoint
    from proxbox_backend.gateways.netbox import CredentialsWithheld, NetBoxGateway

    detail = "Reading this endpoint's credentials requires the 'reveal_credentials' action on it."
    server = Recorder(httpx.Response(403, json={"detail": detail, "code": "permission_denied"}))
    client, _ = netbox(server)
    endpoint = Endpoint(3, "pve", "h", 8006, True, True, "cluster", None, None, None, None)
    with pytest.raises(CredentialsWithheld, match="custom action 'reveal_credentials'") as exc:
        await NetBoxGateway(client).credentials(endpoint)
    assert detail in str(exc.value) and "'pve'" in str(exc.value)


NETBOX_500_PAGE = """<!DOCTYPE html>
<html lang="en"><head><title>Server Error</title><link rel="stylesheet" href="/static/netbox.css"></head>
<body><div class="card-body"><p>There was a problem with your request.</p><hr />
<pre class="block"><strong>&lt;class 'django.db.utils.OperationalError'&gt;</strong><br />
connection to server failed

Python version: 3.12.1
NetBox version: 4.7.3
</pre></div></body></html>"""


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (
            httpx.Response(500, text=NETBOX_500_PAGE, headers={"Content-Type": "text/html"}),
            f"HTTP 500: an HTML page of {len(NETBOX_500_PAGE)} bytes: Server Error — "
            "<class 'django.db.utils.OperationalError'> connection to server failed",
        ),
        (
            httpx.Response(502, text="<html><body><h1>502 Bad Gateway</h1></body></html>"),
            "HTTP 502: an HTML page of 50 bytes: 502 Bad Gateway",
        ),
        (
            httpx.Response(
                500,
                json={
                    "error": "duplicate key value violates unique constraint",
                    "exception": "IntegrityError",
                    "netbox_version": "4.7.3",
                    "python_version": "3.12.1",
                },
            ),
            "HTTP 500: IntegrityError: duplicate key value violates unique constraint",
        ),
    ],
)
@pytest.mark.asyncio
async def test_server_error_reasons_name_the_exception_not_the_markup(answer, reason):
    client, _ = netbox(Recorder(answer))
    result = await client.bulk_create("/dcim/sites/", [{"name": "a"}])
    assert result.failed[0] == reason


@pytest.mark.parametrize(
    "path",
    [
        "/cluster/status",
        "nodes/pve1/network",
        "/nodes/pve%201/qemu/100/config",
        "/cluster/resources?type=vm",
        "/plugins/proxbox/endpoints/proxmox/1/",
    ],
)
@pytest.mark.parametrize(
    "base", ["https://pve.test:8006/api2/json", "http://netbox.test/api/", "http://netbox.test"]
)
def test_paths_join_the_base_url_as_httpx_joins_them(base, path):
    client = httpx.AsyncClient(base_url=base)
    transport = ResilientTransport(client)
    assert httpx.URL(transport._absolute(path)) == client._merge_url(path)
    assert transport._absolute("https://elsewhere.test/x") == "https://elsewhere.test/x"
