"""PVE notification webhooks against a real NetBox, the simulator and `proxbox-sync
serve`: the simulator is given a webhook target pointing at the backend and a matcher
for backups through its PVE API, as an operator would; a backup then shows in NetBox
long before the watch's next poll (600 s after the first), in a run whose trigger is the webhook.
"""

from __future__ import annotations

import base64

import httpx
import pytest
from chaos_support import watching_backend
from proxbox_processes import WaitTimeout, wait_until
from sync_fixtures import Simulator, create_watched_endpoint, list_all

POLL = 600  # the watch's interval: only the webhook explains a run before the next poll
DEADLINE = 45  # seconds from the backup's end to its record in NetBox
SECRET = "e2e-webhook-secret-0123456789"
# The body template docs/operator-guide.md gives operators.
BODY = (
    '{"timestamp": {{ timestamp }}, "severity": "{{ severity }}", '
    '"title": "{{ escape title }}", "fields": {{ json fields }}}'
)


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.fixture(scope="module")
def simulator(sync_workdir):
    simulator = Simulator("hook", "small", 17, sync_workdir)
    try:
        simulator.start().renumber("10.101.0")
        yield simulator
    finally:
        simulator.stop()


@pytest.fixture(scope="module")
def endpoint(netbox_server, simulator):
    return create_watched_endpoint(netbox_server, "hook", simulator, watch_interval=POLL)


@pytest.fixture(scope="module")
def backend(netbox_server, simulator, endpoint, sync_workdir):
    secrets = f"{endpoint['id']}={SECRET}"
    with watching_backend(
        netbox_server, simulator, sync_workdir, "hook", PROXBOX_WEBHOOK_SECRETS=secrets
    ) as server:
        yield server


def jobs_of(netbox_server, endpoint) -> list[dict]:
    return list_all(netbox_server, "/core/jobs/", object_id=endpoint["id"], name="Proxbox sync")


def backups_of(netbox_server, cluster_id: int) -> set[str]:
    records = list_all(netbox_server, "/plugins/proxbox/inventory/backups/", cluster_id=cluster_id)
    return {record["volume"] for record in records}


def test_a_backup_reaches_netbox_through_the_webhook_before_the_next_poll(
    netbox_server, simulator, endpoint, backend
):
    def caught_up():
        jobs = jobs_of(netbox_server, endpoint)
        done = [j for j in jobs if j["status"]["value"] in ("completed", "errored", "failed")]
        return done

    # The watch's catch-up run first (nobody watched before).
    (first,) = wait_until(caught_up, 300, "the watch's catch-up run")
    assert first["data"]["trigger"]["watch"]["reasons"] == ["watch started"]
    with netbox_server.api() as api:
        record = api.get(f"/plugins/proxbox/endpoints/proxmox/{endpoint['id']}/").json()
    cluster_id = record["netbox_cluster"]["id"]
    before = backups_of(netbox_server, cluster_id)

    guest = next(iter(simulator.inventory()["guests"].values()))["resource"]
    node, vmid = guest["node"], guest["vmid"]
    with simulator.api() as pve:
        # The operator's configuration, through PVE's API.
        answer = pve.post(
            "/cluster/notifications/endpoints/webhook",
            json={
                "name": "proxbox",
                "url": f"{backend.url}/webhooks/proxmox/{endpoint['id']}",
                "method": "post",
                "header": [
                    f"name=X-Proxbox-Webhook-Secret,value={b64('{{ secrets.proxbox }}')}",
                    f"name=Content-Type,value={b64('application/json')}",
                ],
                "secret": [f"name=proxbox,value={b64(SECRET)}"],
                "body": b64(BODY),
            },
        )
        assert answer.status_code == 200, answer.text
        answer = pve.post(
            "/cluster/notifications/matchers",
            json={
                "name": "to-proxbox",
                "target": ["proxbox"],
                "match-field": ["exact:type=vzdump"],
            },
        )
        assert answer.status_code == 200, answer.text
        answer = pve.post(f"/nodes/{node}/vzdump", data={"vmid": vmid, "storage": "local"})
        assert answer.status_code == 200, answer.text
        simulator.wait_task(answer.json()["data"])
        volumes = {
            v["volid"]
            for v in pve.get(
                f"/nodes/{node}/storage/local/content", params={"content": "backup"}
            ).json()["data"]
        }
    (new,) = volumes - before
    try:
        wait_until(
            lambda: new in backups_of(netbox_server, cluster_id),
            DEADLINE,
            "the backup's record in NetBox",
            interval=0.5,
        )
    except WaitTimeout:
        backend_log = (backend.workdir / "backend.log").read_text()[-3000:]
        notified = [
            line
            for line in (simulator.workdir / "sim-hook.log").read_text().splitlines()
            if "proxmox_simulator.notify" in line
        ]
        raise AssertionError(f"notify: {notified}\nbackend: {backend_log}") from None

    # The run that synced it was the webhook's: its trigger names the notification, not
    # the vzdump task a poll would have found.
    # The run records its Job once it ends, after it wrote the backup's record.
    def recorded_reasons() -> list[list[str]]:
        jobs = jobs_of(netbox_server, endpoint)
        return [j["data"]["trigger"]["watch"]["reasons"] for j in jobs if j["data"]]

    def webhook_runs(reasons: list[list[str]]) -> list[list[str]]:
        return [r for r in reasons if any(reason.startswith("webhook ") for reason in r)]

    wait_until(
        lambda: webhook_runs(recorded_reasons()), DEADLINE, "the webhook's run to be recorded"
    )
    triggers = recorded_reasons()
    webhook = webhook_runs(triggers)
    assert webhook == [[f"webhook vzdump info on {node}"]], triggers
    assert not any(reason.startswith("vzdump ") for r in triggers for reason in r), triggers

    metrics = httpx.get(
        f"{backend.url}/metrics",
        headers={"Authorization": f"Bearer {backend.api_token}"},
        timeout=30,
    ).text
    assert (
        f'proxbox_webhooks_total{{endpoint="{endpoint["id"]}",outcome="accepted"}} 1.0' in metrics
    )
