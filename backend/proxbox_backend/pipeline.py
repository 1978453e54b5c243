"""The run's stage graph and the one scheduler that runs it.

Each stage module declares a `Stage`: what it takes from earlier stages (`starts_with`,
the named outputs it needs to start: to decide whether this run leaves it out, and for
its current-state read; `takes`, the ones it needs to plan),
what it gives, which NetBox object types it reads and writes (and with which
operations), and which rows NetBox's own signal handlers change when it writes
(`effects`; `unreached` names a signal effect that cannot occur for its writes, and why).
`stages.GRAPH` registers them in planned order.

The scheduler decides the overlaps from those declarations alone:

- a stage's read starts once the outputs it reads by are given and every stage planned
  before it that may change the object types it reads has settled;
- its writes go to NetBox once its inputs are given and every stage planned before it
  whose writes conflict with the ones its plan holds has settled: two writes conflict
  when they change rows of the same object type and one of them saves such rows whole
  (a PATCH saves the row it read, losing what changed in between; a counter or total
  NetBox sets in place loses nothing to another such column write);
- a stage left out (incremental, targeted, or its policy switch off) gives the outputs
  its `left_out` provides and reports an empty start and finish;
- the first failure cancels every stage still running and is raised as itself.

A preview runs the same graph: only the gateway records instead of writing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from proxbox_backend.background import abandon
from proxbox_backend.domain.plan import Plan

CREATE, UPDATE, DELETE = "create", "update", "delete"
EVERY = frozenset({CREATE, UPDATE, DELETE})
SAVES = frozenset({UPDATE})  # an API update saves the row whole; a create or delete does not


@dataclass(frozen=True)
class Effect:
    """A write NetBox makes itself when a stage writes `of` with one of `on`: its signal
    handlers change rows of `touches`, whole (`whole_row`: read, changed, saved) or one
    column in place (a counter, a total)."""

    of: str
    on: frozenset[str]
    touches: str
    whole_row: bool
    why: str


@dataclass(frozen=True)
class Unreached:
    """A signal effect of a type the stage writes that its writes never trigger."""

    of: str
    on: frozenset[str]
    touches: str
    why: str


@dataclass(frozen=True)
class Stage:
    name: str
    run: Callable[[Any, Gate], Awaitable[dict | None]]
    read: Callable[[Any, Gate], Awaitable[Any]] | None = None
    starts_with: tuple[str, ...] = ()
    takes: tuple[str, ...] = ()
    gives: tuple[str, ...] = ()
    reads: frozenset[str] = frozenset()
    writes: Mapping[str, frozenset[str]] = field(default_factory=dict)
    effects: tuple[Effect, ...] = ()
    unreached: tuple[Unreached, ...] = ()
    # The object type whose policy mode `off` leaves the whole stage out; None: the policy
    # restricts its plans operation by operation instead (`stages.apply.restricted`).
    policy: str | None = None
    # The outputs of the stage when this run leaves it out (asked once `starts_with` is
    # given); None: it runs.
    left_out: Callable[[Any], dict | None] = lambda _run: None
    # Outputs known before the stage runs (given at once).
    known: Callable[[Any], dict] = lambda _run: {}
    # The stage name its progress events carry; None: it has no events of its own.
    events: str | None = None

    def touches(self, writes: Mapping[str, Iterable[str]] | None = None) -> dict[str, bool]:
        """Object type → whether it is saved whole, of every row `writes` (by default all
        the stage may write) and NetBox's signals on them change."""
        writes = self.writes if writes is None else writes
        touched: dict[str, bool] = {}
        for object_type, ops in writes.items():
            ops = frozenset(ops)
            if ops:
                touched[object_type] = touched.get(object_type, False) or bool(ops & SAVES)
            for effect in self.effects:
                if effect.of == object_type and ops & effect.on:
                    whole = touched.get(effect.touches, False) or effect.whole_row
                    touched[effect.touches] = whole
        return touched


def conflict(one: Mapping[str, bool], other: Mapping[str, bool]) -> bool:
    return any(one[t] or other[t] for t in one.keys() & other.keys())


def plan_writes(*plans: Plan) -> dict[str, set[str]]:
    """Object type → operations the plans hold."""
    writes: dict[str, set[str]] = {}
    for the_plan in plans:
        ops = writes.setdefault(the_plan.object_type, set())
        for op, items in ((CREATE, the_plan.creates), (UPDATE, the_plan.updates)):
            if items:
                ops.add(op)
        if the_plan.deletes:
            ops.add(DELETE)
    return writes


Settle = Callable[..., Awaitable[None]]


async def nothing_to_settle(*_plans: Plan) -> None:
    """Outside a scheduled run (a stage called on its own): no other stage writes."""


class Abandoned(Exception):
    """A stage that waited for another stage which failed."""


class GraphError(ValueError):
    """The declarations do not make a graph: an input nobody gives, or given twice."""


def check(graph: tuple[Stage, ...]) -> None:
    given: dict[str, str] = {}
    for stage in graph:
        for needed in (*stage.starts_with, *stage.takes):
            if needed not in given:
                raise GraphError(f"{stage.name} takes {needed!r}, which no earlier stage gives")
        for output in stage.gives:
            if output in given:
                raise GraphError(f"{output!r} is given by {given[output]} and {stage.name}")
            given[output] = stage.name


def waits_for(graph: tuple[Stage, ...], stage: Stage) -> dict[str, list[str]]:
    """The rules the scheduler derives for `stage`: the earlier stages its read waits
    for, and those its writes may wait for (when its plan holds such writes)."""
    earlier = graph[: graph.index(stage)]
    return {
        "read": [e.name for e in earlier if stage.reads & e.touches().keys()],
        "write": [e.name for e in earlier if conflict(stage.touches(), e.touches())],
    }


class Gate:
    """What a running stage asks of the scheduler."""

    def __init__(self, scheduler: Scheduler, stage: Stage):
        self._scheduler, self.stage = scheduler, stage
        self._in_flight: list[asyncio.Future] = []
        self.current: Any = None

    def take(self, name: str) -> Any:
        if name not in self.stage.takes and name not in self.stage.starts_with:
            raise GraphError(f"{self.stage.name} takes {name!r} without declaring it")
        return self._scheduler.outputs[name].result()

    def give(self, name: str, value: Any) -> None:
        if name not in self.stage.gives:
            raise GraphError(f"{self.stage.name} gives {name!r} without declaring it")
        self._scheduler.give(name, value)

    async def settle(self, *plans: Plan) -> None:
        """Wait until no earlier stage's writes conflict with the ones `plans` hold."""
        writes = plan_writes(*plans)
        for object_type, ops in writes.items():
            if undeclared := ops - self.stage.writes.get(object_type, frozenset()):
                raise GraphError(
                    f"{self.stage.name} writes {object_type} ({', '.join(sorted(undeclared))}) "
                    "without declaring it"
                )
        await self._scheduler.settled_before(self.stage, self.stage.touches(writes))

    def in_flight(self, writes: Awaitable) -> None:
        """Writes the stage leaves in flight: the stage settles when they are done."""
        self._in_flight.append(asyncio.ensure_future(writes))

    def started(self, total: int) -> None:
        self._scheduler.event(self.stage, "started", total=total)

    def finished(self, done: int) -> None:
        self._scheduler.event(self.stage, "finished", done=done)

    def skipped(self) -> None:
        self.started(0)
        self.finished(0)


class Scheduler:
    """One run of the graph."""

    def __init__(
        self,
        graph: tuple[Stage, ...],
        run: Any,
        emit: Callable[[dict], None],
        *,
        enter: Callable[[], Any] = lambda: None,
        switched_off: Callable[[str], bool] = lambda _object_type: False,
    ):
        """`enter`: called in each stage's task before it reads and runs (the run's sync
        policy is set there); `switched_off`: whether the policy leaves out an object type."""
        check(graph)
        self.graph, self.run, self.emit = graph, run, emit
        self.enter, self.switched_off = enter, switched_off
        loop = asyncio.get_running_loop()
        self.outputs = {name: loop.create_future() for s in graph for name in s.gives}
        self.settled = {s.name: loop.create_future() for s in graph}
        self.left_out: dict[str, dict] = {}

    def give(self, name: str, value: Any) -> None:
        if not self.outputs[name].done():
            self.outputs[name].set_result(value)

    def event(self, stage: Stage, state: str, **extra) -> None:
        if stage.events is not None:
            self.emit({"event": "stage", "stage": stage.events, "state": state, **extra})

    async def settled_before(self, stage: Stage, touched: Mapping[str, bool]) -> None:
        earlier = self.graph[: self.graph.index(stage)]
        waits = [
            asyncio.shield(self.settled[e.name])
            for e in earlier
            if e.name not in self.left_out and conflict(touched, e.touches())
        ]
        if waits:
            await asyncio.gather(*waits)

    async def execute(self) -> None:
        for stage in self.graph:
            for name, value in stage.known(self.run).items():
                self.give(name, value)
        tasks = [asyncio.ensure_future(self._stage(stage)) for stage in self.graph]
        try:
            pending = set(tasks)
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
                failed = [t.exception() for t in done if not t.cancelled() and t.exception()]
                if failed:
                    # The stage that failed first, not one that gave up waiting for it.
                    raise next((f for f in failed if not isinstance(f, Abandoned)), failed[0])
        finally:
            await abandon(*tasks)
            for settled in self.settled.values():
                if settled.done():
                    settled.exception()  # retrieved: a failure was raised once, above

    async def _stage(self, stage: Stage) -> None:
        settled = self.settled[stage.name]
        try:
            await self._given(stage.starts_with)
            if stage.policy is not None and self.switched_off(stage.policy):
                outputs = {name: None for name in stage.gives}
            else:
                outputs = stage.left_out(self.run)
            if outputs is None:
                await self._run(stage)
            else:
                self.left_out[stage.name] = outputs
                for name, value in outputs.items():
                    self.give(name, value)
                self.event(stage, "started", total=0)
                self.event(stage, "finished", done=0)
        except BaseException:
            settled.set_exception(Abandoned(stage.name))
            raise
        settled.set_result(None)

    async def _run(self, stage: Stage) -> None:
        gate = Gate(self, stage)
        self.enter()
        if stage.read is not None:
            earlier = self.graph[: self.graph.index(stage)]
            await asyncio.gather(
                *(
                    asyncio.shield(self.settled[e.name])
                    for e in earlier
                    if e.name not in self.left_out and stage.reads & e.touches().keys()
                )
            )
            gate.current = await stage.read(self.run, gate)
        await self._given(stage.takes)
        self.enter()
        try:
            for name, value in (await stage.run(self.run, gate) or {}).items():
                gate.give(name, value)
            if gate._in_flight:
                await asyncio.gather(*gate._in_flight)
        finally:
            await abandon(*gate._in_flight)
        missing = [name for name in stage.gives if not self.outputs[name].done()]
        if missing:
            raise GraphError(f"{stage.name} finished without giving {missing}")

    async def _given(self, names: tuple[str, ...]) -> None:
        if names:
            await asyncio.gather(*(asyncio.shield(self.outputs[n]) for n in names))


# -- the graph, drawn ----------------------------------------------------------------------

BEGIN = "<!-- stage graph: generated from the declarations (python -m proxbox_backend.pipeline) -->"
END = "<!-- end of stage graph -->"


def _node(name: str) -> str:
    return name.replace(" ", "_")


def describe(graph: tuple[Stage, ...]) -> str:
    """The graph as backend/README.md shows it: a Mermaid flowchart (solid: an output a
    stage takes; dotted: a wait the scheduler derives) and each stage's declaration."""
    givers = {output: stage.name for stage in graph for output in stage.gives}
    lines = [BEGIN, "", "```mermaid", "flowchart TD"]
    for stage in graph:
        for output in (*stage.starts_with, *stage.takes):
            lines.append(f"  {_node(givers[output])} -->|{output}| {_node(stage.name)}")
    for stage in graph:
        rules = waits_for(graph, stage)
        for kind in ("read", "write"):
            for earlier in rules[kind]:
                lines.append(f"  {_node(earlier)} -.->|{kind} waits| {_node(stage.name)}")
    lines += ["```", "", "| stage | takes | gives | reads | writes | NetBox also writes |"]
    lines.append("|---|---|---|---|---|---|")
    for stage in graph:
        writes = "; ".join(
            f"{object_type} ({', '.join(sorted(ops))})" for object_type, ops in stage.writes.items()
        )
        effects = "; ".join(
            f"{e.touches} on {'/'.join(sorted(e.on))} of {e.of} "
            f"({'whole row' if e.whole_row else 'in place'})"
            for e in stage.effects
        )
        cells = [
            f"`{stage.name}`" + (f" (off with `{stage.policy}`)" if stage.policy else ""),
            ", ".join(f"`{n}`" for n in (*stage.starts_with, *stage.takes)),
            ", ".join(f"`{n}`" for n in stage.gives),
            ", ".join(sorted(stage.reads)),
            writes,
            effects,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join([*lines, "", END])


if __name__ == "__main__":
    from proxbox_backend.stages import GRAPH

    print(describe(GRAPH))
