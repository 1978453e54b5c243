"""Notifications: matchers route them, webhook targets receive them over HTTP.

A tiny HTTP server stands in for what a webhook points at; the simulator is configured
through its PVE API (base64 headers and body, write-only secrets), a backup and a failed
replication run send notifications, and the receiver sees the rendered requests.
"""

from __future__ import annotations

import base64
import json
import queue
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from simtest_support import expect_data, expect_error, make_vm

from proxmox_simulator.domain import notify

BASE = "/cluster/notifications"
BODY = (
    '{"title": "{{ escape title }}", "severity": "{{ severity }}", '
    '"timestamp": {{ timestamp }}, "fields": {{ json fields }}, "job": "{{ fields.job-id }}", '
    '"message": "{{ escape message }}"}'
)


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


class Receiver:
    """Records every request it gets; answers with `status`."""

    def __init__(self, status: int = 200):
        self.requests: queue.Queue = queue.Queue()
        received, answer = self.requests, status

        class Handler(BaseHTTPRequestHandler):
            def _record(self):
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length).decode()
                received.put((self.command, self.path, dict(self.headers), body))
                self.send_response(answer)
                self.send_header("content-length", "0")
                self.end_headers()

            do_POST = do_PUT = do_GET = _record

            def log_message(self, *_args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def next(self, timeout: float = 20):
        return self.requests.get(timeout=timeout)

    def nothing(self, wait: float = 1.5) -> bool:
        try:
            self.requests.get(timeout=wait)
        except queue.Empty:
            return True
        return False

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    receiver = Receiver()
    yield receiver
    receiver.close()


@pytest.fixture
def hook(root, receiver):
    """A webhook endpoint at the receiver with a secret header, and a matcher sending it
    the notifications of one backup job id (other tests' backups stay out)."""
    name, job = f"hook{uuid.uuid4().hex[:6]}", f"job-{uuid.uuid4().hex[:6]}"
    expect_data(
        root.post(
            f"{BASE}/endpoints/webhook",
            json={
                "name": name,
                "url": f"{receiver.url}/hook/{{{{ url-encode fields.hostname }}}}",
                "method": "post",
                "header": [
                    f"name=X-Secret,value={b64('{{ secrets.token }}')}",
                    f"name=Content-Type,value={b64('application/json')}",
                ],
                "secret": [f"name=token,value={b64('s3cr3t-value')}"],
                "body": b64(BODY),
            },
        )
    )
    expect_data(
        root.post(
            f"{BASE}/matchers",
            json={"name": f"m{name}", "target": [name], "match-field": [f"exact:job-id={job}"]},
        )
    )
    yield name, job
    expect_data(root.delete(f"{BASE}/matchers/m{name}"))
    expect_data(root.delete(f"{BASE}/endpoints/webhook/{name}"))


def backup(root, node: str, vmid: int, job: str, ok: bool = True) -> str:
    upid = expect_data(
        root.post(f"/nodes/{node}/vzdump", data={"vmid": vmid, "storage": "local", "job-id": job})
    )
    assert (root.wait(upid)["exitstatus"] == "OK") == ok
    return upid


def test_a_backup_notifies_the_matching_webhook_with_its_rendered_request(
    root, hook, receiver, unique_vmid
):
    name, job = hook
    vmid = make_vm(root, "pve2", unique_vmid, name="notified")
    backup(root, "pve2", vmid, job)
    method, path, headers, body = receiver.next()
    assert (method, path) == ("POST", "/hook/pve2")
    assert headers["X-Secret"] == "s3cr3t-value"
    sent = json.loads(body)
    assert sent["severity"] == "info"
    assert sent["fields"] == {"type": "vzdump", "hostname": "pve2", "job-id": job}
    assert sent["job"] == job
    assert sent["title"] == "vzdump backup status (pve2): backup successful"
    assert str(vmid) in sent["message"] and "notified" in sent["message"]
    assert isinstance(sent["timestamp"], int) and sent["timestamp"] > 1_600_000_000

    # Secrets read back by name only; a name-only entry keeps the stored value.
    entry = expect_data(
        root.get(f"{BASE}/endpoints/webhook/{name}"),
        "/cluster/notifications/endpoints/webhook/{name}",
    )
    assert entry["secret"] == ["name=token"]
    assert "s3cr3t" not in json.dumps(entry)
    assert entry["body"] == b64(BODY)
    expect_data(
        root.put(
            f"{BASE}/endpoints/webhook/{name}",
            json={"secret": ["name=token"], "digest": entry["digest"]},
        )
    )
    # Another guest: vzdump names archives to the second.
    backup(root, "pve2", make_vm(root, "pve2", unique_vmid + 1), job)
    assert receiver.next()[2]["X-Secret"] == "s3cr3t-value"


def test_a_failed_backup_notifies_with_severity_error(root, hook, receiver, unique_vmid):
    _name, job = hook
    # 400 GiB of disk does not fit the 100 GiB of storage 'local': the job fails.
    vmid = make_vm(root, "pve1", unique_vmid, scsi0="local-lvm:400")
    backup(root, "pve1", vmid, job, ok=False)
    failed = json.loads(receiver.next()[3])
    assert failed["severity"] == "error"
    assert failed["fields"] == {"type": "vzdump", "hostname": "pve1", "job-id": job}
    assert failed["title"] == "vzdump backup status (pve1): backup failed"
    assert "no space left on storage 'local'" in failed["message"]


def test_a_matcher_that_does_not_match_sends_nothing(root, hook, receiver, unique_vmid):
    name, job = hook
    matcher = expect_data(root.get(f"{BASE}/matchers/m{name}"))
    expect_data(
        root.put(
            f"{BASE}/matchers/m{name}",
            json={"match-severity": ["error"], "digest": matcher["digest"]},
        )
    )
    vmid = make_vm(root, "pve1", unique_vmid)
    backup(root, "pve1", vmid, job)  # succeeds: severity info, not error
    assert receiver.nothing()
    vmid = make_vm(root, "pve1", unique_vmid + 1)  # its own archive name: no collision
    matcher = expect_data(root.get(f"{BASE}/matchers/m{name}"))
    expect_data(
        root.put(
            f"{BASE}/matchers/m{name}",
            json={"mode": "any", "digest": matcher["digest"]},
        )
    )
    backup(root, "pve1", vmid, job)  # any: the job-id matches
    assert json.loads(receiver.next()[3])["severity"] == "info"
    # A disabled target, then a disabled matcher: nothing sent.
    target = expect_data(root.get(f"{BASE}/endpoints/webhook/{name}"))
    expect_data(
        root.put(
            f"{BASE}/endpoints/webhook/{name}", json={"disable": 1, "digest": target["digest"]}
        )
    )
    backup(root, "pve1", make_vm(root, "pve1", unique_vmid + 2), job)
    assert receiver.nothing()
    target = expect_data(root.get(f"{BASE}/endpoints/webhook/{name}"))
    expect_data(
        root.put(
            f"{BASE}/endpoints/webhook/{name}",
            json={"delete": "disable", "digest": target["digest"]},
        )
    )
    matcher = expect_data(root.get(f"{BASE}/matchers/m{name}"))
    expect_data(
        root.put(f"{BASE}/matchers/m{name}", json={"disable": 1, "digest": matcher["digest"]})
    )
    backup(root, "pve1", make_vm(root, "pve1", unique_vmid + 3), job)
    assert receiver.nothing()


def test_a_failed_replication_run_notifies_with_severity_error(root, receiver, unique_vmid):
    name = f"rep{uuid.uuid4().hex[:6]}"
    vmid = make_vm(root, "pve1", unique_vmid)
    job = f"{vmid}-0"
    expect_data(
        root.post(
            f"{BASE}/endpoints/webhook",
            json={"name": name, "url": f"{receiver.url}/r", "method": "post", "body": b64(BODY)},
        )
    )
    expect_data(
        root.post(
            f"{BASE}/matchers",
            json={
                "name": f"m{name}",
                "target": [name],
                "match-field": ["exact:type=replication", f"regex:job-id=^{vmid}-"],
                "match-severity": ["error"],
            },
        )
    )
    try:
        expect_data(
            root.post("/cluster/replication", data={"id": job, "target": "pve2", "type": "local"})
        )
        upid = expect_data(root.post(f"/nodes/pve1/replication/{job}/schedule_now"))
        assert root.wait(upid)["exitstatus"] != "OK"  # the seeded VM disk is on lvm
        sent = json.loads(receiver.next()[3])
        assert sent["severity"] == "error"
        assert sent["fields"] == {"type": "replication", "job-id": job, "hostname": "pve1"}
        assert "missing replicate feature" in sent["message"]
    finally:
        root.delete(f"/cluster/replication/{job}", params={"force": 1})
        expect_data(root.delete(f"{BASE}/matchers/m{name}"))
        expect_data(root.delete(f"{BASE}/endpoints/webhook/{name}"))


def test_testing_a_webhook_target_sends_at_once_and_reports_failures(root, receiver):
    name = f"t{uuid.uuid4().hex[:6]}"
    expect_data(
        root.post(
            f"{BASE}/endpoints/webhook",
            json={
                "name": name,
                "url": f"{receiver.url}/t",
                "method": "put",
                "body": b64("{{ title }}|{{ message }}"),
            },
        )
    )
    try:
        expect_data(root.post(f"{BASE}/targets/{name}/test"))
        method, _path, _headers, body = receiver.next(timeout=1)
        assert method == "PUT"
        assert body == f"Test notification|This is a test of the notification target '{name}'."
        entry = expect_data(root.get(f"{BASE}/endpoints/webhook/{name}"))
        expect_data(
            root.put(
                f"{BASE}/endpoints/webhook/{name}",
                json={"body": b64("{{ shout title }}"), "digest": entry["digest"]},
            )
        )
        expect_error(root.post(f"{BASE}/targets/{name}/test"), 500, "Helper not defined")
    finally:
        expect_data(root.delete(f"{BASE}/endpoints/webhook/{name}"))


def test_webhook_and_matcher_settings_pve_refuses(root):
    name = f"bad{uuid.uuid4().hex[:6]}"
    expect_error(
        root.post(
            f"{BASE}/endpoints/webhook",
            json={"name": name, "url": "http://x", "method": "post", "body": "%%"},
        ),
        400,
        "body",
    )
    expect_error(
        root.post(
            f"{BASE}/endpoints/webhook",
            json={
                "name": name,
                "url": "http://x",
                "method": "post",
                "header": ["name=X,value=!!"],
            },
        ),
        400,
        "header",
    )
    expect_error(
        root.post(
            f"{BASE}/matchers",
            json={"name": name, "target": ["mail-to-root"], "match-field": ["type=vzdump"]},
        ),
        400,
        "match-field",
    )
    expect_error(
        root.post(
            f"{BASE}/matchers",
            json={"name": name, "target": ["mail-to-root"], "match-field": ["regex:type=("]},
        ),
        400,
        "invalid regex",
    )


def test_vzdump_job_id_is_root_only(root, unique_vmid):
    vmid = make_vm(root, "pve1", unique_vmid)
    token = f"t{uuid.uuid4().hex[:6]}"
    user = f"backup{uuid.uuid4().hex[:6]}@pve"
    expect_data(root.post("/access/users", data={"userid": user, "password": "secret-pass-1"}))
    expect_data(
        root.put("/access/acl", data={"path": "/", "roles": "Administrator", "users": user})
    )
    answer = expect_data(root.post(f"/access/users/{user}/token/{token}", data={"privsep": 0}))
    headers = {"Authorization": f"PVEAPIToken={user}!{token}={answer['value']}"}
    refused = root.client.post(
        "/nodes/pve1/vzdump", data={"vmid": vmid, "job-id": "x"}, headers=headers
    )
    expect_error(refused, 403, "job-id")


# ---------------------------------------------------------------- the pure parts


NOTE = notify.Notification(
    severity="error",
    title='Backup "failed"',
    message="line1\nline2",
    timestamp=1_700_000_000,  # Tue 2023-11-14 22:13:20 UTC
    fields={"type": "vzdump", "hostname": "pve1", "job-id": "backup-a"},
)


@pytest.mark.parametrize(
    ("options", "matched"),
    [
        ({}, True),  # no directives: everything
        ({"match-field": ["exact:type=vzdump,replication"]}, True),
        ({"match-field": ["exact:type=fencing"]}, False),
        ({"match-field": ["regex:job-id=ckup"]}, True),  # unanchored
        ({"match-field": ["regex:missing=.*"]}, False),
        ({"match-severity": ["info,warning"]}, False),
        ({"match-severity": ["info"], "match-field": ["exact:type=vzdump"]}, False),
        ({"mode": "any", "match-severity": ["info"], "match-field": ["exact:type=vzdump"]}, True),
        ({"match-severity": ["info"], "invert-match": 1}, True),
        ({"match-calendar": ["tue 22-23"]}, True),
        ({"match-calendar": ["mon..fri 8-17"]}, False),
    ],
)
def test_matchers_pick_targets_as_proxmox_notify(options, matched):
    assert notify.matched_targets({**options, "target": ["t"]}, NOTE) == (["t"] if matched else [])


def test_templates_render_pves_variables_and_helpers():
    options = {
        "url": "http://h/{{ url-encode title }}",
        "secret": [f"name=k,value={b64('sv')}"],
        "header": [f"name=A,value={b64('Bearer {{ secrets.k }}')}"],
        "body": b64(
            "{{ escape message }}|{{ json fields.hostname }}|{{ severity }}|{{ timestamp }}"
            "|{{ fields.job-id }}|{{ nothing.here }}|{{ json fields }}"
        ),
    }
    request = notify.webhook_request(options, NOTE)
    # PVE's url-encode set: controls, reserved characters, space and %; not '"'.
    assert request.url == 'http://h/Backup%20"failed"'
    assert notify.render("{{ url-encode x }}", {"x": "a/b c%é"}) == "a%2Fb%20c%25%C3%A9"
    assert request.headers == [("A", "Bearer sv")]
    assert request.body == (
        'line1\\nline2|"pve1"|error|1700000000|backup-a||'
        '{"type":"vzdump","hostname":"pve1","job-id":"backup-a"}'
    )
    # A brace after a helper's `}}` is the template's own (a JSON object's end).
    assert notify.render('{"f": {{ json fields }}}', {"fields": {"a": "b"}}) == '{"f": {"a":"b"}}'
    assert notify.render("{{{ title }}}", {"title": "<t>"}) == "<t>"
    with pytest.raises(notify.NotifyError, match="Helper not defined"):
        notify.webhook_request({**options, "body": b64("{{ upper title }}")}, NOTE)
    with pytest.raises(notify.NotifyError, match="escape: missing text parameter"):
        notify.webhook_request({**options, "body": b64("{{ escape fields }}")}, NOTE)
    assert notify.mask("GET http://h/sv failed", options) == "GET http://h/<masked> failed"


def test_only_majors_with_the_notification_system_notify():
    from proxmox_simulator.domain.version_adapters import adapter_for

    assert [adapter_for(major).notification_system for major in (6, 7, 8, 9)] == [
        False,
        False,
        True,
        True,
    ]
