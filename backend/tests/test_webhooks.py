"""PVE notification webhooks: the secret, the window and the replay memory of
`POST /webhooks/proxmox/{id}`, its parsing, and the nudge reaching the watch (through
Redis, whichever replica holds it) that starts a run before the next poll."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from fastapi.testclient import TestClient

from proxbox_backend import api
from proxbox_backend.config import ConfigurationError, Settings, parse_webhook_secrets
from proxbox_backend.domain.watch import Changes
from proxbox_backend.domain.webhook import Notification, WebhookInvalid
from proxbox_backend.metrics import METRICS
from proxbox_backend.runs import MemoryRunStore, RedisRunStore, RedisWatchLeases
from proxbox_backend.secrets import Secret
from proxbox_backend.watch import Watcher, WatchSupervisor
from proxbox_backend.webhooks import HEADER, MemoryWebhooks, RedisWebhooks

TOKEN = "backend-token-0123456789abcdef"
SECRET = "webhook-secret-of-endpoint-3"
SHARED = "webhook-secret-shared-by-all"


def body(**overrides) -> bytes:
    note = {
        "timestamp": int(time.time()),
        "severity": "info",
        "title": "vzdump backup status (pve1): backup successful",
        "fields": {"type": "vzdump", "hostname": "pve1", "job-id": "backup-1"},
    }
    note.update(overrides)
    return json.dumps(note).encode()


# ---------------------------------------------------------------- parsing, settings


def test_a_notification_parses_and_names_what_it_is_for():
    note = Notification.parse(body())
    assert note.severity == "info" and note.fields["job-id"] == "backup-1"
    assert note.changes() == Changes(reasons=("webhook vzdump info on pve1 job backup-1",))
    fenced = Notification.parse(body(fields={"type": "fencing", "hostname": "pve2"}))
    assert fenced.changes().nodes == {"pve2"}


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b"not json", "body"),
        (b"[1]", "body"),
        (body(timestamp="1700000000"), "timestamp"),
        (body(timestamp=True), "timestamp"),
        (body(severity="loud"), "severity"),
        (body(title=3), "title"),
        (body(fields={"type": 1}), "fields"),
        (body(fields={"hostname": "pve1"}), "fields.type"),
    ],
)
def test_a_body_off_the_template_names_its_field(raw, field):
    with pytest.raises(WebhookInvalid) as refused:
        Notification.parse(raw)
    assert refused.value.field == field


def test_webhook_secrets_per_endpoint_with_a_shared_fallback():
    secrets = parse_webhook_secrets(f" 3={SECRET}, *={SHARED} ")
    settings = Settings(netbox_url="http://nb", netbox_token=Secret("x"), webhook_secrets=secrets)
    assert settings.webhook_secret(3).reveal() == SECRET
    assert settings.webhook_secret(4).reveal() == SHARED
    assert Secret(SECRET) in settings.secrets()  # scrubbed from logs like the others
    for bad in ("3", f"x={SECRET}", "3=", "3=short"):
        with pytest.raises(ConfigurationError, match="PROXBOX_WEBHOOK_SECRETS"):
            parse_webhook_secrets(bad)


# ---------------------------------------------------------------- the receiver


class IdleService:
    async def endpoint_exists(self, endpoint_id):
        return True

    async def run(self, endpoint, emit=None, target=None):
        return None


def app_for(redis_url: str | None, window: float = 300.0):
    settings = Settings(
        netbox_url="http://127.0.0.1:9",
        netbox_token=Secret("x" * 40),
        redis_url=redis_url,
        webhook_secrets={"3": Secret(SECRET)},
        webhook_window=window,
    )
    return api.create_app(settings, service=IdleService(), api_token=TOKEN)


def post(client, raw: bytes, secret: str | None = SECRET, endpoint: int = 3):
    headers = {HEADER: secret} if secret is not None else {}
    return client.post(f"/webhooks/proxmox/{endpoint}", content=raw, headers=headers)


def counted(endpoint: str, outcome: str) -> float:
    return METRICS.webhooks[(endpoint, outcome)]


def test_the_secret_is_required_and_compared_whole():
    before = counted("", "unauthorized")
    with TestClient(app_for(None)) as client:
        for secret in (None, "", SECRET[:-1] + "X", SECRET + "X", TOKEN):
            answer = post(client, body(), secret)
            assert answer.status_code == 401, (secret, answer.text)
            assert HEADER in answer.json()["detail"]
        # An endpoint without a secret (and no shared one) takes no webhook at all.
        assert post(client, body(), SECRET, endpoint=4).status_code == 401
        # The bearer token of the API is no way in either.
        answer = client.post(
            "/webhooks/proxmox/3", content=body(), headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert answer.status_code == 401
    assert counted("", "unauthorized") == before + 7


def test_malformed_stale_and_replayed_notifications_are_refused_naming_why():
    with TestClient(app_for(None, window=60)) as client:
        answer = post(client, body(severity="loud"))
        assert answer.status_code == 422
        assert answer.json()["detail"][0]["loc"] == ["body", "severity"]
        answer = post(client, body(fields={"hostname": "x"}))
        assert answer.json()["detail"][0]["loc"] == ["body", "fields", "type"]
        for skew in (-120, 120):  # too old, and too far ahead
            answer = post(client, body(timestamp=int(time.time()) + skew))
            assert answer.status_code == 409 and "stale" in answer.json()["detail"]
            assert "60 s window" in answer.json()["detail"]
        raw = body()
        first = post(client, raw)
        assert first.status_code == 202
        assert first.json() == {
            "watched": False,
            "detail": "endpoint 3 is not watched by any replica (set its watch interval): "
            "nothing starts",
        }
        again = post(client, raw)
        assert again.status_code == 409 and again.json()["detail"].startswith("replayed")
        # Another notification (another body) is new.
        assert post(client, body(title="other")).status_code == 202
        metrics = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).text
    assert 'proxbox_webhooks_total{endpoint="3",outcome="replayed"}' in metrics
    assert 'proxbox_webhooks_total{endpoint="3",outcome="stale"}' in metrics


def test_a_notification_nudges_the_watch_held_by_another_replica(redis_url):
    """Replica B receives the webhook; the watch is replica A's (its lease in Redis):
    the nudge waits in Redis for A, and a replay within the window is refused by B and
    by a third replica alike."""
    with TestClient(app_for(redis_url)) as b, TestClient(app_for(redis_url)) as c:

        async def hold():
            store = RedisRunStore(redis_url)
            try:
                assert await RedisWatchLeases(store).acquire("3", "replica-a", 30)
            finally:
                await store.close()

        asyncio.run(hold())
        raw = body()
        answer = post(b, raw)
        assert answer.status_code == 202 and answer.json()["watched"] is True
        assert post(c, raw).status_code == 409  # the replay memory is Redis's

        async def take():
            store = RedisRunStore(redis_url)
            try:
                webhooks = RedisWebhooks(store)
                first = await webhooks.wait("3", 1.0)
                nothing = await webhooks.wait("3", 0.2)
                return first, nothing
            finally:
                await store.close()

        nudged, nothing = asyncio.run(take())
        assert nudged.reasons == ("webhook vzdump info on pve1 job backup-1",)
        assert nothing is None


# ---------------------------------------------------------------- the watcher


class WatchSettings:
    watch_lease = 1.0
    watch_refresh = 60.0


def test_a_nudge_starts_a_run_before_the_next_poll_and_coalesces():
    async def scenario():
        webhooks = MemoryWebhooks()
        supervisor = WatchSupervisor(
            WatchSettings(), IdleService(), MemoryRunStore(), webhooks=webhooks
        )
        started: list[Changes] = []
        running = asyncio.get_running_loop().create_future()

        async def launch(changes, found_at):
            started.append(changes)
            return running

        watcher = Watcher(3, 60.0, launch)
        begun = time.monotonic()
        waiting = asyncio.create_task(supervisor.between_polls(3, watcher, begun + 60))
        first = Changes(reasons=("webhook vzdump info on pve1",))
        await webhooks.nudge("3", first, 60)
        await asyncio.sleep(0.05)
        assert started == [first]  # now, not after the 60 s poll interval
        # Two more while that run goes: one run after it, with both reasons.
        await webhooks.nudge("3", Changes(reasons=("a",)), 60)
        await webhooks.nudge("3", Changes(reasons=("b",)), 60)
        await asyncio.sleep(0.05)
        assert len(started) == 1
        running.set_result(None)
        await asyncio.sleep(1.2)  # looked at again within a second
        assert [c.reasons for c in started[1:]] == [("a", "b")]
        assert time.monotonic() - begun < 5
        waiting.cancel()

    asyncio.run(scenario())
