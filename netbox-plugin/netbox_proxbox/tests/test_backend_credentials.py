"""`proxbox-sync run` with an admin's NetBox token: the plugin withholds the endpoint's
secret from superusers too, and the CLI says which permission to grant instead of a
generic "no credentials"."""

from __future__ import annotations

import os
import subprocess
import sys

from users.models import Token, User

from .base import TOKEN_PREFIX


def test_an_admin_token_without_reveal_credentials_is_told_to_grant_it(
    live_netbox, committed_inventory, django_db_blocker
):
    with django_db_blocker.unblock():
        endpoint = committed_inventory.endpoint("pve-withheld")
        admin = User.objects.create_superuser(username=f"admin-{committed_inventory.tag}")
        committed_inventory.users.append(admin)
        token = Token.objects.create(user=admin, write_enabled=True)
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("PROXBOX_PROXMOX_")  # no fallback credentials
    }
    env |= {
        "PROXBOX_NETBOX_URL": live_netbox,
        "PROXBOX_NETBOX_TOKEN": f"{TOKEN_PREFIX}{token.key}.{token.token}",
    }
    run = subprocess.run(
        [sys.executable, "-m", "proxbox_backend.cli", "run", "--endpoint", str(endpoint.pk)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    output = " ".join((run.stdout + run.stderr).split())
    assert run.returncode != 0, output
    assert "no Proxmox credentials for endpoint" in output, output
    assert "'reveal_credentials'" in output and "superusers need it too" in output, output
    assert "live-secret" not in output
