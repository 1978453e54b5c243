"""Enabling, toggling and disabling fault scenarios (HTTP adapter and CLI alike).

The scenario is written to PostgreSQL; the calling process reloads its own
engine at once, the others on ``NOTIFY pvesim_faults``.
"""

from __future__ import annotations

from proxmox_simulator.domain.errors import ParameterError, PveError
from proxmox_simulator.repositories import faults as fault_repo
from proxmox_simulator.simulation.faults import (
    FaultEngine,
    build_scenario,
    catalogue,
    scenario_from_row,
)


def scenario_list() -> list[dict]:
    return [
        {"name": s.name, "description": s.description, "rules": [r.to_dict() for r in s.rules]}
        for s in catalogue().values()
    ]


async def enable(
    pool,
    engine: FaultEngine | None,
    *,
    name: str,
    seed,
    rules: list | None = None,
    node: str | None = None,
    storage: str | None = None,
) -> dict:
    if isinstance(seed, str):
        if not seed.lstrip("-").isdigit():
            raise ParameterError({"seed": "expected an integer"})
        seed = int(seed)
    if seed is None:
        seed = 0
    scenario = build_scenario(name, seed, rules=rules, node=node, storage=storage)
    async with pool.acquire() as conn:
        row = await fault_repo.enable(
            conn, scenario.name, scenario.seed, [r.to_dict() for r in scenario.rules]
        )
    return reload_from(engine, row)


async def set_rule_enabled(pool, engine: FaultEngine | None, index, enabled: bool) -> dict:
    if isinstance(index, str):
        if not index.isdigit():
            raise ParameterError({"index": "expected a non-negative integer"})
        index = int(index)
    async with pool.acquire() as conn:
        if await fault_repo.active(conn) is None:
            raise PveError("no fault scenario is enabled", status=400)
        row = await fault_repo.set_rule_enabled(conn, index, enabled)
    if row is None:
        raise ParameterError({"index": f"the active scenario has no rule {index}"})
    return reload_from(engine, row)


async def disable(pool, engine: FaultEngine | None) -> dict:
    async with pool.acquire() as conn:
        await fault_repo.disable(conn)
    return reload_from(engine, None)


async def reload(pool, engine: FaultEngine) -> None:
    async with pool.acquire() as conn:
        row = await fault_repo.active(conn)
    engine.load(scenario_from_row(row))


def reload_from(engine: FaultEngine | None, row) -> dict:
    scenario = scenario_from_row(row)
    if engine is not None:
        engine.load(scenario)
        return engine.snapshot()
    return {"active": scenario.to_dict() if scenario else None}
