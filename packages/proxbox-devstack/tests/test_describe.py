"""What `proxbox up` prints once the stack is ready: secrets only to a terminal."""

from __future__ import annotations

import json
import sys

import pytest

from proxbox_devstack.netbox_db import credentials_path
from proxbox_devstack.stack import describe
from proxbox_devstack.state import StackState

CREDENTIALS = {"username": "admin", "password": "pw-7f3a9c", "token": "tok-51d0e2"}


@pytest.fixture
def data_dir(tmp_path):
    StackState(
        database_url="postgresql://postgres:dbsecret@127.0.0.1:5432/postgres",
        redis_url="redis://:redissecret@127.0.0.1:6379",
        urls={"netbox": "http://127.0.0.1:8000/"},
    ).save(tmp_path)
    credentials_path(tmp_path).write_text(json.dumps(CREDENTIALS), "utf-8")
    return tmp_path


@pytest.mark.parametrize("terminal", [True, False])
def test_secrets_are_shown_once_and_only_to_a_terminal(data_dir, monkeypatch, terminal):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: terminal)
    shown = "\n".join(describe(data_dir, show_secrets=True))
    assert (CREDENTIALS["token"] in shown) is terminal
    assert (CREDENTIALS["password"] in shown) is terminal
    assert f"credentials: {credentials_path(data_dir)} (mode 0600)" in shown
    # Service passwords never, terminal or not.
    assert "dbsecret" not in shown and "redissecret" not in shown


def test_later_descriptions_show_no_secrets_even_to_a_terminal(data_dir, monkeypatch):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    shown = "\n".join(describe(data_dir))
    assert CREDENTIALS["token"] not in shown and CREDENTIALS["password"] not in shown
