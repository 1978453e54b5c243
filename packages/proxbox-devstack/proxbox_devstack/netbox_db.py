"""Prepare the NetBox database of the dev stack and its first admin.

Run by `proxbox up` as `python -m proxbox_devstack.netbox_db` with the stack's
environment, so Django is loaded in a short-lived child rather than in the
long-running supervisor. On a first run the database is cloned from the
migrated template (seconds instead of minutes of migrations); `migrate` then
applies whatever the template lacks (normally nothing). The admin user and an
API token are created once and stored in `<data dir>/credentials.json` (0600).

Prints one JSON object: {"database": ..., "cloned": bool, "credentials_created": bool}.

`python -m proxbox_devstack.netbox_db template-build` (`proxbox template build`)
instead writes the migrated template's dump to the template cache and prints
{"dump": path, "bytes": size}; `... netbox_db template` only makes sure the migrated
template exists on the server (restored from a matching dump when it can be) and prints
{"template": name}: the test sessions run it once before their suites, so no suite
migrates NetBox while the others wait for its build lock. Progress goes to stderr
(`progress` protocol).
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from pathlib import Path

from .paths import data_dir as default_data_dir
from .progress import emit
from .secrets import write_private_file

CREDENTIALS_FILE = "credentials.json"
BACKEND_CREDENTIALS_FILE = "backend-credentials.json"
BACKEND_USERNAME = "proxbox-backend"
# Its ObjectPermissions are named "proxbox-backend: <actions>" (one per set of actions).
BACKEND_PERMISSION_PREFIX = "proxbox-backend: "
CLONE_STEP = "cloning the NetBox database"
ADMIN_USERNAME = "admin"
TOKEN_DESCRIPTION = "proxbox dev stack"


def credentials_path(data_dir: Path) -> Path:
    return data_dir / CREDENTIALS_FILE


def load_credentials(data_dir: Path) -> dict[str, str] | None:
    try:
        return json.loads(credentials_path(data_dir).read_text("utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _ensure_database(settings_dict: dict) -> bool:
    """Create the dev database from the migrated template when it does not exist yet."""
    from .testdb import (
        clone_database,
        database_exists,
        ensure_template,
        keep_dump,
        maintenance_connection,
    )

    name = settings_dict["NAME"]
    with maintenance_connection(settings_dict) as conn:
        if database_exists(conn, name):
            return False
    template = ensure_template(settings_dict, log=log_line, progress=report_progress)
    # A release's first migration leaves its dump behind, so the next empty data dir (a
    # new clone, a wiped .proxbox/) restores the template in seconds instead.
    keep_dump(settings_dict, template, log=log_line, progress=report_progress)
    emit(CLONE_STEP)
    with maintenance_connection(settings_dict) as conn:
        clone_database(conn, template, name)
    emit(CLONE_STEP, end=True)
    return True


def log_line(line: str) -> None:
    """A line for the launcher's log (stderr; stdout carries the JSON answer)."""
    print(line, file=sys.stderr)


def report_progress(event: dict) -> None:
    """Forward a template build's progress to the launcher (stderr, `progress` protocol)."""
    emit(event["label"], event.get("done"), event.get("total"), end=bool(event.get("end")))


def _ensure_admin(data_dir: Path) -> bool:
    """Create the admin user and its API token unless the stored ones are still valid."""
    from users.models import Token, User

    stored = load_credentials(data_dir)
    if stored is not None and stored.get("database") == _database_name():
        user = User.objects.filter(username=stored["username"]).first()
        key = stored.get("token", "").removeprefix("nbt_").split(".", 1)[0]
        if user is not None and Token.objects.filter(user=user, key=key).exists():
            return False
    password = secrets.token_urlsafe(18)
    user = User.objects.filter(username=ADMIN_USERNAME).first()
    if user is None:
        user = User.objects.create_superuser(ADMIN_USERNAME, password=password)
    else:
        user.set_password(password)
        user.is_superuser = True
        user.is_active = True
        user.save()
    token = Token(user=user, description=TOKEN_DESCRIPTION)
    token.save()
    credentials = {
        "database": _database_name(),
        "username": ADMIN_USERNAME,
        "password": password,
        # The full bearer value: `Authorization: Bearer <token>`.
        "token": f"nbt_{token.key}.{token.token}",
    }
    path = credentials_path(data_dir)
    path.unlink(missing_ok=True)
    write_private_file(path, json.dumps(credentials, indent=2) + "\n")
    return True


def backend_credentials_path(data_dir: Path) -> Path:
    return data_dir / BACKEND_CREDENTIALS_FILE


def _grant(name: str, user, models: list, actions: list[str]) -> None:
    from django.contrib.contenttypes.models import ContentType
    from users.models import ObjectPermission

    permission, _ = ObjectPermission.objects.update_or_create(
        name=name, defaults={"actions": actions, "enabled": True}
    )
    permission.object_types.set(ContentType.objects.get_for_models(*models).values())
    permission.users.add(user)


def _ensure_backend_user(data_dir: Path) -> bool:
    """The sync backend's own NetBox user: not a superuser, only what a sync needs.

    Exactly the permissions `proxbox-sync permissions` lists (the backend derives them
    from what its runs read and write); `reveal_credentials` is never implied, not even
    for superusers, so the user holds it explicitly on the plugin's endpoints.
    """
    from django.apps import apps
    from users.models import ObjectPermission, Token, User

    from proxbox_backend.permissions import grouped_by_actions

    user, _ = User.objects.get_or_create(username=BACKEND_USERNAME)
    granted = []
    for actions, object_types in grouped_by_actions().items():
        name = BACKEND_PERMISSION_PREFIX + ", ".join(actions)
        _grant(name, user, [apps.get_model(label) for label in object_types], list(actions))
        granted.append(name)
    # Exactly these: an earlier stack's broader grants go.
    ObjectPermission.objects.filter(name__startswith=BACKEND_PERMISSION_PREFIX).exclude(
        name__in=granted
    ).delete()

    path = backend_credentials_path(data_dir)
    try:
        stored = json.loads(path.read_text("utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        stored = None
    if stored is not None and stored.get("database") == _database_name():
        key = stored.get("token", "").removeprefix("nbt_").split(".", 1)[0]
        if Token.objects.filter(user=user, key=key).exists():
            return False
    token = Token(user=user, description="proxbox sync backend")
    token.save()
    path.unlink(missing_ok=True)
    write_private_file(
        path,
        json.dumps(
            {
                "database": _database_name(),
                "username": BACKEND_USERNAME,
                "token": f"nbt_{token.key}.{token.token}",
            },
            indent=2,
        )
        + "\n",
    )
    return True


def _database_name() -> str:
    from django.conf import settings

    return settings.DATABASES["default"]["NAME"]


def main() -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "netbox.settings")
    os.environ.setdefault("NETBOX_CONFIGURATION", "proxbox_devstack.netbox_configuration")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connections

    if sys.argv[1:] == ["template"]:
        from .testdb import ensure_template

        template = ensure_template(
            connections["default"].settings_dict, log=log_line, progress=report_progress
        )
        print(json.dumps({"template": template}))
        return 0
    if sys.argv[1:] == ["template-build"]:
        from .testdb import build_dump

        path = build_dump(
            connections["default"].settings_dict,
            log=log_line,
            progress=report_progress,
        )
        print(json.dumps({"dump": str(path), "bytes": path.stat().st_size}))
        return 0
    data_dir = default_data_dir()
    cloned = _ensure_database(connections["default"].settings_dict)
    call_command("migrate", interactive=False, verbosity=0)
    created = _ensure_admin(data_dir)
    _ensure_backend_user(data_dir)
    print(
        json.dumps({"database": _database_name(), "cloned": cloned, "credentials_created": created})
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
