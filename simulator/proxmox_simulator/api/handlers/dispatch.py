"""Which semantic handler answers a declared method, in order of precedence:

1. a bespoke handler registered for the (path, method);
2. a directory index computed from the contract's tree;
3. the contract-driven resource store.

``None`` means the method is genuinely unhandled and the request plane answers
501 (``CONTRACT_FALLBACK=error``).
"""

from __future__ import annotations

from proxmox_simulator.api.handlers import REGISTRY
from proxmox_simulator.api.handlers.index import directory_index, is_directory_index
from proxmox_simulator.api.handlers.registry import Handler
from proxmox_simulator.api.handlers.store import resource_store_handler
from proxmox_simulator.contracts.model import Contract, Endpoint
from proxmox_simulator.domain import resource_store

BESPOKE, DIRECTORY_INDEX, RESOURCE_STORE = "bespoke", "directory-index", "resource-store"


def _is_bespoke(path: str, method: str) -> bool:
    return REGISTRY.get(path, method) is not None


def handling(contract: Contract, endpoint: Endpoint) -> str | None:
    if _is_bespoke(endpoint.path, endpoint.method):
        return BESPOKE
    if is_directory_index(contract, endpoint):
        return DIRECTORY_INDEX
    if resource_store.handles(contract, endpoint, _is_bespoke):
        return RESOURCE_STORE
    return None


def semantic_handler(contract: Contract, endpoint: Endpoint) -> Handler | None:
    kind = handling(contract, endpoint)
    if kind == BESPOKE:
        return REGISTRY.get(endpoint.path, endpoint.method)
    if kind == DIRECTORY_INDEX:
        return directory_index
    if kind == RESOURCE_STORE:
        return resource_store_handler
    return None
