"""The NetBox configuration the dev stack and the test suites run with.

NetBox imports the module named by NETBOX_CONFIGURATION; ours
(`proxbox_devstack.netbox_configuration`) calls `build_configuration()` so that
the database, Redis and the secrets generated into the data directory are
resolved when NetBox starts, for every process of the stack and for pytest.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from psycopg.conninfo import conninfo_to_dict

import proxbox_redaction

from .paths import data_dir as default_data_dir
from .redis_databases import from_env as redis_databases_from_env
from .secrets import load_or_create_secrets
from .state import service_urls

NETBOX_DATABASE_ENV = "PROXBOX_NETBOX_DATABASE"
DEFAULT_NETBOX_DATABASE = "netbox"
PLUGINS = ["netbox_proxbox", "netbox_script_projects"]
# Where NetBox's "Sync now" reaches the sync backend; `proxbox up` sets it to the
# port it started the backend on.
BACKEND_URL_ENV = "PROXBOX_BACKEND_URL"
DEFAULT_BACKEND_URL = "http://127.0.0.1:8800"


def django_database(server_url: str, name: str) -> dict[str, Any]:
    """Django's DATABASES entry for database `name` on the server at `server_url`."""
    params = conninfo_to_dict(server_url)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name,
        "USER": params.get("user", "postgres"),
        "PASSWORD": params.get("password", ""),
        "HOST": params.get("host", ""),
        "PORT": str(params.get("port", "")),
        "CONN_MAX_AGE": 300,
        # A kept connection is checked before a request reuses it: after a PostgreSQL
        # restart each gunicorn thread would otherwise answer its next request with a 500.
        "CONN_HEALTH_CHECKS": True,
        "TEST": {"NAME": os.environ.get("PROXBOX_TEST_DATABASE", f"proxbox_test_{os.getpid()}")},
    }


def redis_section(redis_url: str, database: int) -> dict[str, Any]:
    base = redis_url.rstrip("/")
    # A URL that already names a database keeps its own; otherwise pick ours.
    has_db = base.rsplit("/", 1)[-1].isdigit() and base.count("/") > 2
    return {"URL": base if has_db else f"{base}/{database}", "SSL": False}


def tasks_redis_url(environ) -> str:
    """The stack's tasks database (its RQ queues): the backend keeps its runs there too,
    under its own key prefix, so stacks sharing a Redis server keep their runs apart."""
    from .state import REDIS_URL_ENV

    return redis_section(environ[REDIS_URL_ENV], redis_databases_from_env(environ).tasks)["URL"]


def build_configuration(data_dir: Path | None = None) -> dict[str, Any]:
    data_dir = data_dir or default_data_dir()
    database_url, redis_url = service_urls(data_dir)
    secrets = load_or_create_secrets(data_dir)
    netbox_root = data_dir / "netbox"
    for sub in ("media", "scripts", "reports", "script-projects"):
        (netbox_root / sub).mkdir(parents=True, exist_ok=True)
    database_name = os.environ.get(NETBOX_DATABASE_ENV, DEFAULT_NETBOX_DATABASE)
    # The pair `proxbox up` leased for this stack; (0, 1) outside a stack.
    redis_databases = redis_databases_from_env()
    return {
        "ALLOWED_HOSTS": ["*"],
        "DATABASES": {"default": django_database(database_url, database_name)},
        "REDIS": {
            "tasks": redis_section(redis_url, redis_databases.tasks),
            "caching": redis_section(redis_url, redis_databases.caching),
        },
        "SECRET_KEY": secrets["netbox_secret_key"],
        "API_TOKEN_PEPPERS": {1: secrets["netbox_api_token_pepper"]},
        "PLUGINS": list(PLUGINS),
        "PLUGINS_CONFIG": {
            "netbox_proxbox": {
                "encryption_key": secrets["proxbox_encryption_key"],
                "backend_url": os.environ.get(BACKEND_URL_ENV, DEFAULT_BACKEND_URL),
                "backend_token": secrets["backend_api_token"],
            },
        },
        "STORAGES": {
            "script_projects": {
                "BACKEND": "django.core.files.storage.FileSystemStorage",
                "OPTIONS": {"location": str(netbox_root / "script-projects")},
            },
        },
        "MEDIA_ROOT": str(netbox_root / "media"),
        "SCRIPTS_ROOT": str(netbox_root / "scripts"),
        "REPORTS_ROOT": str(netbox_root / "reports"),
        "CENSUS_REPORTING_ENABLED": False,
        "DEBUG": os.environ.get("PROXBOX_DEBUG", "") in ("1", "true", "yes"),
        "DEVELOPER": os.environ.get("PROXBOX_DEVELOPER", "") in ("1", "true", "yes"),
        "TIME_ZONE": "UTC",
    }


def install_redaction(configuration: dict[str, Any]) -> None:
    """Mask the configuration's secrets in every log record and traceback of the process."""
    plugin = configuration["PLUGINS_CONFIG"]["netbox_proxbox"]
    # One key, or a list of keys newest first (key rotation): each key is a secret.
    keys = plugin["encryption_key"]
    encryption_keys = [keys] if isinstance(keys, str) else list(keys)
    redis_passwords = [
        urlsplit(section["URL"]).password for section in configuration["REDIS"].values()
    ]
    proxbox_redaction.install(
        secrets=[
            configuration["SECRET_KEY"],
            *configuration["API_TOKEN_PEPPERS"].values(),
            *encryption_keys,
            plugin["backend_token"],
            configuration["DATABASES"]["default"]["PASSWORD"],
            *(password for password in redis_passwords if password),
        ]
    )
