"""ACME accounts (``/cluster/acme/account*``, ``meta``, ``tos``) and a node's ACME
certificate order (``POST /nodes/{node}/certificates/acme/certificate``).

Every one of these talks to the CA's directory, which the simulator never contacts.
An account file (``/etc/pve/priv/acme/<name>``) only comes from a registration the CA
accepted, so none ever exists here: the list is empty, reading, updating or
deactivating one is PVE's "does not exist", a registration runs PVE's
``acmeregister`` task and fails where PVE would reach the CA, and an order passes
PVE's checks of the node config, then stops at the missing account as PVE's
``acmenewcert`` task does.
"""

from __future__ import annotations

from typing import NoReturn
from urllib.parse import urlsplit

from proxmox_simulator.domain import certificate_service
from proxmox_simulator.domain import guests as rules
from proxmox_simulator.domain.access import Principal
from proxmox_simulator.domain.acme_service import DIRECTORIES
from proxmox_simulator.domain.errors import ParameterError, PveError
from proxmox_simulator.domain.guest_service import require_node
from proxmox_simulator.repositories import inventory
from proxmox_simulator.repositories import node_system as node_repo
from proxmox_simulator.tasks.service import enqueue

DEFAULT_DIRECTORY = DIRECTORIES[0]["url"]


def unreachable(directory: str) -> str:
    return f"{urlsplit(directory).hostname}: the simulator never contacts an ACME CA"


def list_accounts() -> list[dict]:
    """No account file exists: only a registration the CA accepted writes one."""
    return []


def missing_account(name: str | None) -> ParameterError:
    account = name or "default"
    return ParameterError({"name": f"ACME account config file '{account}' does not exist."})


async def _local_node(conn) -> str:
    nodes = await inventory.nodes(conn)
    return min(nodes, key=lambda n: n["nodeid"])["node"]


async def register(rt, principal: Principal, params: dict) -> str:
    name = params.get("name") or "default"
    directory = params.get("directory") or DEFAULT_DIRECTORY
    async with rt.pool.acquire() as conn, conn.transaction():
        return await enqueue(
            conn,
            rt.clock,
            node=await _local_node(conn),
            task_type="acmeregister",
            task_id="",
            principal=principal,
            payload={"name": name, "directory": directory},
        )


def register_lines(payload: dict) -> tuple[list[str], str]:
    """What the ``acmeregister`` worker prints, and the error it ends with."""
    return (
        ["Generating ACME account key..", "Registering ACME account.."],
        f"Registration failed: {unreachable(payload['directory'])}",
    )


def directory_meta(params: dict) -> NoReturn:
    raise PveError(unreachable(params.get("directory") or DEFAULT_DIRECTORY))


def _acme_node_config(config: dict) -> tuple[str, list[str]]:
    """(account, domains) of a node config's ``acme`` and ``acmedomainN`` entries."""
    acme = rules.parse_property_string(config["acme"], "account") if config.get("acme") else {}
    domains = [d for d in (acme.get("domains") or "").split(";") if d]
    for key in sorted(k for k in config if k.startswith("acmedomain")):
        entry = rules.parse_property_string(str(config[key]), "domain")
        if entry.get("domain"):
            domains.append(entry["domain"])
    return acme.get("account") or "default", domains


_RENEW_WINDOW = 30 * 24 * 60 * 60


async def _acme_settings(conn, node: str) -> tuple[str, list[str]]:
    """Renewal and revocation need the node config's ``acme`` property itself."""
    row = await node_repo.setting(conn, node, "config", {})
    config = row["value"] or {}
    if not config.get("acme"):
        raise PveError("ACME settings in node configuration are missing!", status=400)
    account, domains = _acme_node_config(config)
    if not domains:
        raise PveError("ACME domain list in node configuration is missing!", status=400)
    return account, domains


async def renew_certificate(rt, principal: Principal, node: str, params: dict) -> str:
    async with rt.pool.acquire() as conn, conn.transaction():
        await require_node(conn, node)
        pem = await certificate_service.custom_certificate(conn, node)
        if pem is None:
            raise PveError("No current (custom) certificate found, please order a new certificate!")
        notafter = certificate_service.certificate_info("", pem)["notafter"]
        if notafter > rt.clock.now() + _RENEW_WINDOW and not params.get("force"):
            raise ParameterError(
                {
                    "force": "Certificate does not expire within the next 30 days, "
                    "and 'force' is not set."
                }
            )
        account, domains = await _acme_settings(conn, node)
        return await _enqueue_acme(conn, rt, principal, node, "acmerenew", account, domains)


async def _enqueue_acme(conn, rt, principal, node, task_type, account, domains) -> str:
    """The ACME task of one node, with the account and domains its worker reads."""
    return await enqueue(
        conn,
        rt.clock,
        node=node,
        task_type=task_type,
        task_id="",
        principal=principal,
        payload={"account": account, "domains": domains},
    )


async def revoke_certificate(rt, principal: Principal, node: str) -> str:
    async with rt.pool.acquire() as conn, conn.transaction():
        await require_node(conn, node)
        account, domains = await _acme_settings(conn, node)
        return await _enqueue_acme(conn, rt, principal, node, "acmerevoke", account, domains)


async def order_certificate(rt, principal: Principal, node: str) -> str:
    async with rt.pool.acquire() as conn, conn.transaction():
        await require_node(conn, node)
        row = await node_repo.setting(conn, node, "config", {})
        account, domains = _acme_node_config(row["value"] or {})
        if not domains:
            raise PveError("ACME domain list in node configuration is missing!", status=400)
        return await _enqueue_acme(conn, rt, principal, node, "acmenewcert", account, domains)


def order_error(payload: dict) -> str:
    return f"ACME account config file '{payload['account']}' does not exist."
