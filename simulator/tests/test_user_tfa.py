"""A user's TFA through ``/access/users/{userid}``: the legacy type view, PVE 8's lockout
after failed second factors and the admin's ``unlock-tfa``, per major (hot-swapped)."""

from __future__ import annotations

import json
import uuid
from urllib.parse import unquote

import httpx
import pytest
from simtest_support import (
    Session,
    expect_data,
    expect_error,
    lab_simulator,
    swap_major,
)
from test_tfa import _add_totp, _login, _totp

PASSWORD = "tfa-pass-123"


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    with lab_simulator(tmp_path_factory.mktemp("usertfa"), "usertfa", "single", 3) as server:
        yield server


@pytest.fixture
def root(sim):
    swap_major(sim, 9)
    with httpx.Client(base_url=sim.base_url + "/api2/json", timeout=30) as client:
        yield Session(client)
    swap_major(sim, 9)


@pytest.fixture
def user(root):
    userid = f"locky{uuid.uuid4().hex[:8]}@pve"
    root.post("/access/users", data={"userid": userid, "password": PASSWORD}).raise_for_status()
    return userid


def _wrong_code(secret: str) -> str:
    return "000000" if _totp(secret) != "000000" else "111111"


def _listed(root, userid: str) -> dict:
    return next(u for u in root.get("/access/users").json()["data"] if u["userid"] == userid)


def test_user_tfa_types_follow_the_tfa_store(sim, root, user):
    path = f"/access/users/{user}/tfa"
    assert expect_data(root.get(path, params={"multiple": 1})) == {"user": []}
    assert expect_data(root.get(path), path.replace(user, "{userid}")) == {}
    _add_totp(root, user)
    root.post(f"/access/tfa/{user}", data={"type": "recovery"}).raise_for_status()
    assert expect_data(root.get(path, params={"multiple": 1})) == {"user": ["recovery", "totp"]}
    assert expect_data(root.get(path)) == {}  # 9.x keeps no single legacy type

    realm = f"tfa{uuid.uuid4().hex[:6]}"
    root.post(
        "/access/domains",
        data={
            "realm": realm,
            "type": "ldap",
            "server1": "ldap.example.test",
            "base_dn": "dc=example",
            "user_attr": "uid",
            "tfa": "type=oath",
        },
    ).raise_for_status()
    assert expect_data(root.get(f"/access/users/nobody@{realm}/tfa")) == {"realm": "oath"}
    expect_error(root.get("/access/users/nobody@nosuchrealm/tfa"), 500, "auth domain")

    swap_major(sim, 6)  # 6.x's tfa.cfg: one factor per user, a TOTP key is 'oath'
    with httpx.Client(base_url=sim.base_url + "/api2/json", timeout=30) as client:
        old = Session(client)
        assert expect_data(old.get(path)) == {"user": "oath"}


def test_failed_totp_codes_lock_the_user_out_until_unlocked(sim, root, user):
    secret, _entry = _add_totp(root, user)
    wrong = _wrong_code(secret)
    for _ in range(7):
        assert (
            _login(sim, {"username": user, "password": PASSWORD, "otp": wrong}).status_code == 401
        )
    assert _listed(root, user)["totp-locked"] == 0
    assert _login(sim, {"username": user, "password": PASSWORD, "otp": wrong}).status_code == 401
    assert _listed(root, user)["totp-locked"] == 1
    # Locked: even the right code is refused, and the challenge offers no TOTP.
    refused = _login(sim, {"username": user, "password": PASSWORD, "otp": _totp(secret)})
    assert refused.status_code == 401
    half = _login(sim, {"username": user, "password": PASSWORD}).json()["data"]
    challenge = json.loads(unquote(half["ticket"].split(":")[1].removeprefix("!tfa!")))
    assert half["NeedTFA"] == 1 and "totp" not in challenge

    unlock = f"/access/users/{user}/unlock-tfa"
    assert expect_data(root.put(unlock), "/access/users/{userid}/unlock-tfa", "PUT") == 1
    assert expect_data(root.put(unlock)) == 0  # nothing left to unlock
    assert _listed(root, user)["totp-locked"] == 0
    ok = _login(sim, {"username": user, "password": PASSWORD, "otp": _totp(secret)})
    assert ok.status_code == 200, ok.text


def test_a_recovery_key_lifts_the_totp_lock(sim, root, user):
    secret, _entry = _add_totp(root, user)
    keys = root.post(f"/access/tfa/{user}", data={"type": "recovery"}).json()["data"]["recovery"]
    for _ in range(8):
        _login(sim, {"username": user, "password": PASSWORD, "otp": _wrong_code(secret)})
    assert _listed(root, user)["totp-locked"] == 1
    ok = _login(sim, {"username": user, "password": PASSWORD, "otp": f"recovery:{keys[0]}"})
    assert ok.status_code == 200, ok.text
    assert _listed(root, user)["totp-locked"] == 0


def test_majors_before_8_count_no_failures(sim, root, user):
    secret, _entry = _add_totp(root, user)
    swap_major(sim, 7)
    for _ in range(9):
        _login(sim, {"username": user, "password": PASSWORD, "otp": _wrong_code(secret)})
    ok = _login(sim, {"username": user, "password": PASSWORD, "otp": _totp(secret)})
    assert ok.status_code == 200, ok.text
    assert "totp-locked" not in _listed(root, user)
    assert root.put(f"/access/users/{user}/unlock-tfa").status_code == 501  # not declared
