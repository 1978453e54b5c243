"""The semantic handler registry: (path template, method) → handler.

Grep for a PVE path (e.g. ``"/nodes/{node}/qemu"``) to find its behaviour.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from proxmox_simulator.contracts.model import Endpoint
from proxmox_simulator.domain.access import AccessState, Principal
from proxmox_simulator.domain.errors import ParameterError


class RequestParams(dict):
    """Validated request parameters; a handler reading one the request lacks gets a 400.

    A major's schema may declare optional (or not at all) a parameter another
    major requires, so a handler's ``params["x"]`` is a missing-parameter error
    the client made, answered the way PVE's verification answers it.
    """

    def __missing__(self, name: str):
        raise ParameterError({name: "property is missing and it is not optional"})


@dataclass
class RequestContext:
    rt: Any
    endpoint: Endpoint
    params: dict
    principal: Principal
    state: AccessState
    headers: Any
    # Files of a multipart body by the temporary name PVE's proxy gives them
    # (``tmpfilename``): what ``POST …/upload`` imports.
    uploads: dict[str, bytes] | None = None

    @property
    def node(self) -> str:
        return self.params["node"]

    @property
    def vmid(self) -> int:
        return int(self.params["vmid"])


Handler = Callable[[RequestContext], Awaitable[Any]]


class HandlerRegistry:
    def __init__(self) -> None:
        self._handlers: dict[tuple[str, str], Handler] = {}

    def route(self, path: str, method: str) -> Callable[[Handler], Handler]:
        def register(fn: Handler) -> Handler:
            key = (path, method)
            if key in self._handlers:
                raise ValueError(f"handler for {method} {path} registered twice")
            self._handlers[key] = fn
            return fn

        return register

    def get(self, path: str, method: str) -> Handler | None:
        return self._handlers.get((path, method))

    def registered(self) -> set[tuple[str, str]]:
        return set(self._handlers)


REGISTRY = HandlerRegistry()
route = REGISTRY.route
