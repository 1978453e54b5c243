"""The active fault scenario in PostgreSQL, so every replica injects the same one.

Writers ``NOTIFY pvesim_faults``; each process reloads its engine on notice.
"""

from __future__ import annotations

import asyncpg

FAULT_CHANNEL = "pvesim_faults"

_GET = "SELECT name, seed, rules, generation FROM fault_scenario"
_ENABLE = """
INSERT INTO fault_scenario (singleton, name, seed, rules, generation)
VALUES (true, $1, $2, $3, nextval('fault_generation_seq'))
ON CONFLICT (singleton) DO UPDATE
   SET name = EXCLUDED.name, seed = EXCLUDED.seed, rules = EXCLUDED.rules,
       generation = EXCLUDED.generation, enabled_at = now()
RETURNING name, seed, rules, generation
"""
_SET_RULE = """
UPDATE fault_scenario
   SET rules = jsonb_set(rules, ARRAY[$1::int::text, 'enabled'], to_jsonb($2::boolean))
 WHERE $1::int < jsonb_array_length(rules)
RETURNING name, seed, rules, generation
"""
_DISABLE = "DELETE FROM fault_scenario"


async def active(conn: asyncpg.Connection):
    return await conn.fetchrow(_GET)


async def enable(conn: asyncpg.Connection, name: str, seed: int, rules: list[dict]):
    async with conn.transaction():
        row = await conn.fetchrow(_ENABLE, name, seed, rules)
        await conn.execute(f"NOTIFY {FAULT_CHANNEL}")
    return row


async def set_rule_enabled(conn: asyncpg.Connection, index: int, enabled: bool):
    """Toggle one rule of the active scenario; None if there is no such rule."""
    async with conn.transaction():
        row = await conn.fetchrow(_SET_RULE, index, enabled)
        if row is not None:
            await conn.execute(f"NOTIFY {FAULT_CHANNEL}")
    return row


async def disable(conn: asyncpg.Connection) -> None:
    async with conn.transaction():
        await conn.execute(_DISABLE)
        await conn.execute(f"NOTIFY {FAULT_CHANNEL}")
