"""Second factors over HTTP: TOTP and recovery entries never echo their secrets, and a
user with one logs in in two steps (``NeedTFA`` + half ticket), as proxmoxer does it."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import struct
import time
import uuid
from urllib.parse import unquote

import httpx
import pytest
from proxmoxer import ProxmoxAPI
from proxmoxer.backends.https import AuthenticationError

ENTRY_FIELDS = {"type", "id", "description", "created", "enable"}


def _totp(secret: str) -> str:
    """An authenticator app's current code (RFC 6238: HMAC-SHA1, 30 s, 6 digits)."""
    key = base64.b32decode(secret)
    digest = hmac.new(key, struct.pack(">Q", int(time.time()) // 30), hashlib.sha1).digest()
    offset = digest[-1] & 0x0F
    return f"{(struct.unpack('>I', digest[offset : offset + 4])[0] & 0x7FFFFFFF) % 10**6:06d}"


@pytest.fixture
def tfa_user(root):
    userid = f"simfid{uuid.uuid4().hex[:8]}@pve"
    root.post(
        "/access/users", data={"userid": userid, "password": "tfa-pass-123"}
    ).raise_for_status()
    root.put("/access/acl", data={"path": "/", "users": userid, "roles": "PVEAuditor"})
    return userid


def _login(server, data: dict) -> httpx.Response:
    with httpx.Client(base_url=server.base_url + "/api2/json", verify=False, timeout=30) as c:
        return c.post("/access/ticket", data=data)


def _add_totp(root, userid: str) -> tuple[str, str]:
    secret = base64.b32encode(secrets.token_bytes(20)).decode()
    uri = f"otpauth://totp/PVE:{userid}?secret={secret}&issuer=PVE"
    added = root.post(
        f"/access/tfa/{userid}",
        data={"type": "totp", "totp": uri, "value": _totp(secret), "description": "phone"},
    )
    assert added.status_code == 200, added.text
    return secret, added.json()["data"]["id"]


def test_totp_entries_never_show_their_secret(server, root, tfa_user):
    secret = base64.b32encode(secrets.token_bytes(20)).decode()
    uri = f"otpauth://totp/PVE:{tfa_user}?secret={secret}&issuer=PVE"
    wrong = root.post(
        f"/access/tfa/{tfa_user}", data={"type": "totp", "totp": uri, "value": "000000"}
    )
    if _totp(secret) != "000000":
        assert (wrong.status_code, wrong.reason_phrase) == (400, "failed to verify TOTP challenge")
    added = root.post(
        f"/access/tfa/{tfa_user}",
        data={"type": "totp", "totp": uri, "value": _totp(secret), "description": "phone"},
    )
    assert added.status_code == 200, added.text
    assert set(added.json()["data"]) == {"id"}
    entry_id = added.json()["data"]["id"]

    listed = root.get(f"/access/tfa/{tfa_user}")
    one = root.get(f"/access/tfa/{tfa_user}/{entry_id}")
    everyone = root.get("/access/tfa")
    for answer in (added, listed, one, everyone):
        assert secret not in answer.text and "otpauth" not in answer.text
    (entry,) = listed.json()["data"]
    assert set(entry) == ENTRY_FIELDS
    assert (entry["type"], entry["id"], entry["description"], entry["enable"]) == (
        "totp",
        entry_id,
        "phone",
        1,
    )
    assert one.json()["data"] == entry
    mine = [u for u in everyone.json()["data"] if u["userid"] == tfa_user]
    assert mine == [{"userid": tfa_user, "entries": [entry]}]

    root.put(f"/access/tfa/{tfa_user}/{entry_id}", data={"description": "old phone"})
    assert root.get(f"/access/tfa/{tfa_user}/{entry_id}").json()["data"]["description"] == (
        "old phone"
    )
    assert root.delete(f"/access/tfa/{tfa_user}/{entry_id}").status_code == 200
    assert root.get(f"/access/tfa/{tfa_user}").json()["data"] == []
    assert root.get(f"/access/tfa/{tfa_user}/{entry_id}").status_code == 404


def test_a_user_with_totp_gets_a_half_ticket_first(server, root, tfa_user):
    secret, entry_id = _add_totp(root, tfa_user)
    first = _login(server, {"username": tfa_user, "password": "tfa-pass-123"})
    assert first.status_code == 200, first.text
    half = first.json()["data"]
    assert half["NeedTFA"] == 1 and half["username"] == tfa_user
    assert half["ticket"].startswith("PVE:!tfa!") and tfa_user not in half["ticket"]
    assert "cap" not in half
    # The half ticket opens nothing.
    with httpx.Client(base_url=server.base_url + "/api2/json", verify=False) as c:
        c.cookies.set("PVEAuthCookie", half["ticket"])
        assert c.get("/version").status_code == 401

    wrong_code = f"{(int(_totp(secret)) + 500000) % 10**6:06d}"
    refused = _login(
        server,
        {"username": tfa_user, "tfa-challenge": half["ticket"], "password": f"totp:{wrong_code}"},
    )
    assert refused.status_code == 401
    # The half ticket is bound to its user: another user cannot complete it.
    stolen = _login(
        server,
        {
            "username": "root@pam",
            "tfa-challenge": half["ticket"],
            "password": f"totp:{_totp(secret)}",
        },
    )
    assert stolen.status_code == 401

    second = _login(
        server,
        {
            "username": tfa_user,
            "tfa-challenge": half["ticket"],
            "password": f"totp:{_totp(secret)}",
        },
    )
    assert second.status_code == 200, second.text
    full = second.json()["data"]
    assert full["ticket"].startswith(f"PVE:{tfa_user}:") and "NeedTFA" not in full
    with httpx.Client(base_url=server.base_url + "/api2/json", verify=False) as c:
        c.cookies.set("PVEAuthCookie", full["ticket"])
        assert c.get("/version").status_code == 200

    # Renewing the full ticket asks for no second factor again.
    renewed = _login(server, {"username": tfa_user, "password": full["ticket"]})
    assert renewed.status_code == 200 and "NeedTFA" not in renewed.json()["data"]

    # A disabled entry no longer asks for a second factor.
    root.put(f"/access/tfa/{tfa_user}/{entry_id}", data={"enable": 0})
    plain = _login(server, {"username": tfa_user, "password": "tfa-pass-123"}).json()["data"]
    assert "NeedTFA" not in plain and plain["ticket"].startswith(f"PVE:{tfa_user}:")


def test_proxmoxer_logs_in_with_an_otp(server, root, tfa_user):
    secret, _entry = _add_totp(root, tfa_user)
    cert = server.settings.data_dir / "tls" / "pve-ssl.pem"
    prox = ProxmoxAPI(
        "127.0.0.1",
        port=server.port,
        verify_ssl=str(cert),
        user=tfa_user,
        password="tfa-pass-123",
        otp=_totp(secret),
    )
    assert "version" in prox.version.get()
    with pytest.raises(AuthenticationError, match="Two Factor"):
        ProxmoxAPI(
            "127.0.0.1",
            port=server.port,
            verify_ssl=str(cert),
            user=tfa_user,
            password="tfa-pass-123",
            otp="not-a-code",
        ).version.get()


def test_recovery_keys_are_shown_once_and_each_works_once(server, root, tfa_user):
    created = root.post(f"/access/tfa/{tfa_user}", data={"type": "recovery"})
    assert created.status_code == 200, created.text
    keys = created.json()["data"]["recovery"]
    assert created.json()["data"]["id"] == "recovery" and len(keys) == 10
    listed = root.get(f"/access/tfa/{tfa_user}")
    assert all(key not in listed.text for key in keys)
    assert [set(e) for e in listed.json()["data"]] == [ENTRY_FIELDS]
    again = root.post(f"/access/tfa/{tfa_user}", data={"type": "recovery"})
    assert again.status_code != 200

    def login_with(key: str) -> httpx.Response:
        half = _login(server, {"username": tfa_user, "password": "tfa-pass-123"}).json()["data"]
        challenge = json.loads(unquote(half["ticket"].split(":")[1].removeprefix("!tfa!")))
        assert challenge["recovery"]["available"] >= 1
        return _login(
            server,
            {"username": tfa_user, "tfa-challenge": half["ticket"], "password": f"recovery:{key}"},
        )

    assert login_with(keys[3]).status_code == 200
    assert login_with(keys[3]).status_code == 401  # spent
    assert login_with(keys[4]).status_code == 200


def test_pve7_old_format_half_ticket_opens_only_the_old_second_step(settings, root, tfa_user):
    """7.4 without ``new-format`` answers ``PVE:tfa!<userid>``, completed by POST /access/tfa."""
    from simtest_support import official_apidoc

    from proxmox_simulator.config import Settings
    from proxmox_simulator.server import SimulatorServer

    secret, _entry = _add_totp(root, tfa_user)
    legacy = Settings(
        database_url=settings.database_url,
        data_dir=settings.data_dir,
        contract=str(official_apidoc("7.4-16")),
        clock="instant",
        task_workers=1,
        pool_max_size=3,
    )
    with (
        SimulatorServer(legacy) as server,
        httpx.Client(base_url=server.base_url + "/api2/json", timeout=30) as client,
    ):
        credentials = {"username": tfa_user, "password": "tfa-pass-123"}
        half = client.post("/access/ticket", data=credentials).json()["data"]
        assert half["NeedTFA"] == 1
        assert half["ticket"].startswith(f"PVE:tfa!{tfa_user}:")
        newer = client.post("/access/ticket", data={**credentials, "new-format": 1}).json()
        assert newer["data"]["ticket"].startswith("PVE:!tfa!")

        headers = {
            "Cookie": f"PVEAuthCookie={half['ticket']}",
            "CSRFPreventionToken": half["CSRFPreventionToken"],
        }
        assert client.get("/version", headers=headers).status_code == 401
        wrong_code = f"{(int(_totp(secret)) + 500000) % 10**6:06d}"
        refused = client.post("/access/tfa", data={"response": wrong_code}, headers=headers)
        assert refused.status_code == 401
        done = client.post("/access/tfa", data={"response": _totp(secret)}, headers=headers)
        assert done.status_code == 200, done.text
        full = done.json()["data"]["ticket"]
        assert full.startswith(f"PVE:{tfa_user}:")
        assert client.get("/version", headers={"Cookie": f"PVEAuthCookie={full}"}).status_code == (
            200
        )

        # The password and the code together log in at once.
        at_once = client.post("/access/ticket", data={**credentials, "otp": _totp(secret)})
        assert at_once.json()["data"]["ticket"].startswith(f"PVE:{tfa_user}:")
        assert client.post(
            "/access/ticket", data={**credentials, "otp": wrong_code}
        ).status_code == (401)


def test_users_confirm_changes_to_their_own_factors_with_their_password(server, root, tfa_user):
    with httpx.Client(base_url=server.base_url + "/api2/json", verify=False, timeout=30) as c:
        from simtest_support import Session

        user = Session(c, tfa_user, "tfa-pass-123")
        bare = user.post(f"/access/tfa/{tfa_user}", data={"type": "recovery"})
        assert bare.status_code == 400
        assert bare.json()["errors"] == {"password": "password is required to modify TFA data"}
        wrong = user.post(
            f"/access/tfa/{tfa_user}", data={"type": "recovery", "password": "nope-nope"}
        )
        assert wrong.status_code == 401
        ok = user.post(
            f"/access/tfa/{tfa_user}", data={"type": "recovery", "password": "tfa-pass-123"}
        )
        assert ok.status_code == 200, ok.text
        # A user lists only their own entries; root lists everyone's.
        _add_totp(root, f"{tfa_user}")  # root needs no password
        mine = user.get("/access/tfa").json()["data"]
        assert [u["userid"] for u in mine] == [tfa_user]
        assert tfa_user in {u["userid"] for u in root.get("/access/tfa").json()["data"]}
