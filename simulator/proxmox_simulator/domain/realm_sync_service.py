"""Realm synchronisation: ``POST /access/domains/{realm}/sync``, the realm-sync jobs
of ``jobs.cfg`` (``/cluster/jobs/realm-sync``) and ``/cluster/jobs/schedule-analyze``.

A sync reads users and groups from the realm's LDAP/AD server.  The simulator
models no directory server: a realm stores its ``server1``/``base_dn`` settings
and nothing answers there.  So a sync passes PVE's checks (the realm exists, is
``ldap``/``ad``, every sync option comes from the request, the realm's
``sync-defaults-options`` or its default) and starts PVE's ``auth-realm-sync``
(``auth-realm-sync-test`` for a dry run) task, which fails where PVE would
connect to the server, changing no user or group.

Realm-sync jobs are sections of ``jobs.cfg`` (type ``realm-sync``); job IDs are
shared with the backup jobs PVE keeps in the same file.  The simulator has no
job scheduler, so a job never ran: its ``next-run`` follows from the current
time and its calendar event.
"""

from __future__ import annotations

import time

from proxmox_simulator.domain import backup_service, calendar_event
from proxmox_simulator.domain import config_sections as sections
from proxmox_simulator.domain.access import Principal
from proxmox_simulator.domain.corosync_service import local_node
from proxmox_simulator.domain.errors import ParameterError, PveError
from proxmox_simulator.repositories import access as access_repo
from proxmox_simulator.repositories import backups as backup_repo
from proxmox_simulator.repositories import inventory
from proxmox_simulator.repositories import node_system as node_repo
from proxmox_simulator.repositories import section_configs as section_repo
from proxmox_simulator.tasks.service import enqueue

JOBS_FILE = backup_service.JOBS_FILE
JOB_TYPE = "realm-sync"
SYNC_TASK, DRY_RUN_TASK = "auth-realm-sync", "auth-realm-sync-test"
SYNCABLE_TYPES = frozenset({"ldap", "ad"})
# The realm-sync-options format; full/purge are the deprecated pair remove-vanished
# replaced (a major that declares remove-vanished no longer requires them).
SYNC_OPTIONS = ("enable-new", "full", "purge", "remove-vanished", "scope")
_DEPRECATED = frozenset({"full", "purge"})
_NOT_SET = "Not passed as parameter and not defined in realm default sync options."


def _defaults_of(realm_config: dict) -> dict[str, str]:
    """The realm's ``sync-defaults-options`` property string as a mapping."""
    text = str(realm_config.get("sync-defaults-options") or "")
    pairs = (part.partition("=") for part in text.split(",") if part.strip())
    return {key.strip(): value.strip() for key, _, value in pairs}


def sync_options(declared: dict, params: dict, realm_config: dict) -> dict:
    """Each declared sync option from the request, else the realm's default, else the
    schema's default; one no source sets is PVE's parameter error."""
    defaults = _defaults_of(realm_config)
    skip_deprecated = "remove-vanished" in declared
    options = {}
    for name in SYNC_OPTIONS:
        if name not in declared or (skip_deprecated and name in _DEPRECATED):
            continue
        value = params.get(name)
        if value is None:
            value = defaults.get(name)
        if value is None:
            value = declared[name]
        if value is None:
            raise ParameterError({name: _NOT_SET})
        options[name] = value
    return options


async def _local_node(conn) -> str:
    return local_node(await inventory.nodes(conn))


async def sync(rt, principal: Principal, declared: dict, params: dict) -> str:
    realm = params["realm"]
    async with rt.pool.acquire() as conn, conn.transaction():
        row = await access_repo.realm(conn, realm)
        if row is None:
            raise ParameterError({"realm": "Realm does not exist."})
        if row["type"] not in SYNCABLE_TYPES:
            raise PveError(
                f"Cannot sync realm type '{row['type']}'! Only LDAP/AD realms can be synced."
            )
        config = dict(row["config"])
        options = sync_options(declared, params, config)
        dry_run = bool(int(params.get("dry-run") or 0))
        return await enqueue(
            conn,
            rt.clock,
            node=await _local_node(conn),
            task_type=DRY_RUN_TASK if dry_run else SYNC_TASK,
            task_id=realm,
            principal=principal,
            payload={
                "realm": realm,
                "dry_run": dry_run,
                "server": config.get("server1", ""),
                "port": config.get("port"),
                "mode": config.get("mode") or ("ldaps" if config.get("secure") else "ldap"),
                "options": options,
            },
        )


def sync_lines(payload: dict) -> tuple[list[str], str]:
    """What the sync worker prints, and the error it ends with: no server answers."""
    prefix = "(dry test run) " if payload["dry_run"] else ""
    server = payload["server"] or "(no server configured)"
    return (
        [f"{prefix}starting sync for realm {payload['realm']}"],
        f"{payload['mode']} connection to '{server}' failed: "
        "the simulator models no LDAP/AD directory server",
    )


# -- /cluster/jobs/realm-sync ---------------------------------------------------------

JOB_OPTIONS = frozenset(
    {"comment", "enable-new", "enabled", "realm", "remove-vanished", "schedule", "scope"}
)
_REQUIRED_ON_CREATE = ("realm", "schedule", "scope")


def _no_such_job(job_id: str) -> ParameterError:
    return ParameterError({"id": f"No such job '{job_id}'"})


async def _zone(conn) -> str:
    """The answering node's time zone: calendar events run in local time."""
    row = await node_repo.setting(conn, await _local_node(conn), "timezone", "UTC")
    return row["value"]


async def list_jobs(rt) -> list[dict]:
    now = int(rt.clock.now())
    async with rt.pool.acquire() as conn:
        rows = await section_repo.sections(conn, JOBS_FILE)
        zone = await _zone(conn)
    out = []
    for row in rows:
        if row["type"] != JOB_TYPE:
            continue
        entry = {"id": row["id"], "type": row["type"], **row["options"]}
        schedule = entry.get("schedule")
        if schedule:
            following = calendar_event.next_event(calendar_event.parse(schedule), now, zone)
            if following is not None:
                entry["next-run"] = following
        out.append(entry)
    return out


async def get_job(rt, job_id: str) -> dict:
    async with rt.pool.acquire() as conn:
        row = await section_repo.section(conn, JOBS_FILE, job_id)
    if row is None or row["type"] != JOB_TYPE:
        raise _no_such_job(job_id)
    return {"type": row["type"], **row["options"]}


async def _check_realm(conn, realm: str) -> None:
    row = await access_repo.realm(conn, realm)
    if row is None:
        raise ParameterError({"realm": f"No such realm '{realm}'"})
    if row["type"] not in SYNCABLE_TYPES:
        raise ParameterError({"realm": "Only LDAP/AD realms can be synced."})


async def create_job(rt, job_id: str, params: dict) -> None:
    missing = {k: "property is missing and it is not optional" for k in _REQUIRED_ON_CREATE}
    missing = {k: v for k, v in missing.items() if params.get(k) is None}
    if missing:
        raise ParameterError(missing)
    options = {k: v for k, v in params.items() if k in JOB_OPTIONS}
    async with rt.pool.acquire() as conn, conn.transaction():
        await section_repo.lock_file(conn, JOBS_FILE)
        taken = await section_repo.section(conn, JOBS_FILE, job_id)
        if taken is not None or await backup_repo.job(conn, job_id) is not None:
            raise PveError(f"Job '{job_id}' already exists")
        await _check_realm(conn, options["realm"])
        await section_repo.insert(conn, JOBS_FILE, job_id, JOB_TYPE, options)


async def update_job(rt, job_id: str, params: dict) -> None:
    settable = JOB_OPTIONS - {"realm"}  # the realm is fixed once the job exists
    if not any(k in params for k in settable):
        raise PveError("no job options specified")
    async with rt.pool.acquire() as conn, conn.transaction():
        await section_repo.lock_file(conn, JOBS_FILE)
        row = await section_repo.section(conn, JOBS_FILE, job_id, for_update=True)
        if row is None or row["type"] != JOB_TYPE:
            raise PveError("no such realm-sync job")
        for key in sections.split_list(params.get("delete")):
            if key in _REQUIRED_ON_CREATE:
                raise PveError(f"unable to delete required option '{key}'")
        options = sections.updated_options(row["options"], params, frozenset(settable))
        sections.require_saved(
            await section_repo.update(conn, JOBS_FILE, job_id, row["version"], options)
        )


async def delete_job(rt, job_id: str) -> None:
    async with rt.pool.acquire() as conn, conn.transaction():
        await section_repo.lock_file(conn, JOBS_FILE)
        row = await section_repo.section(conn, JOBS_FILE, job_id, for_update=True)
        if row is None or row["type"] != JOB_TYPE:
            raise _no_such_job(job_id)
        await section_repo.delete(conn, JOBS_FILE, job_id)


# -- /cluster/jobs/schedule-analyze ---------------------------------------------------


def _utc_text(epoch: int) -> str:
    """Perl's ``scalar(gmtime($t))``: ``Thu Jan  1 00:00:00 1970``."""
    return time.asctime(time.gmtime(epoch))


async def schedule_analyze(rt, params: dict) -> list[dict]:
    event = calendar_event.parse(str(params["schedule"]))
    start = params.get("starttime")
    start = int(rt.clock.now()) if start is None else int(start)
    count = int(params.get("iterations") or 10)
    async with rt.pool.acquire() as conn:
        zone = await _zone(conn)
    return [
        {"timestamp": t, "utc": _utc_text(t)}
        for t in calendar_event.upcoming(event, start, count, zone)
    ]
