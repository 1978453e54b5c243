"""Seeded fault rules and the named scenarios that group them.

A scenario is a seed plus an ordered list of rules.  Each rule owns a random
stream derived from ``(seed, rule position)`` and draws from it only when an
event matches it, so the same seed and the same sequence of requests and
tasks inject the same faults in the same order — whatever the wall time.

The engine is pure (no I/O, no FastAPI); the HTTP adapter asks it about each
request before the handler runs and the task worker asks it about each task
before the executor runs.  Where a scenario lives (PostgreSQL, so every
replica and the CLI see one) is ``repositories/faults.py``.
"""

from __future__ import annotations

import fnmatch
import random
import re
import threading
from collections import Counter, deque
from dataclasses import asdict, dataclass, field, fields

from proxmox_simulator.domain.errors import ParameterError, PveError
from proxmox_simulator.observability import metrics

# The messages PVE itself answers with for these conditions.
PVEPROXY_DOWN = "Can't connect to 127.0.0.1:85 (Connection refused)"
NO_QUORUM = "cluster not ready - no quorum?"
NODE_UNREACHABLE = "No route to host"

REQUEST_KINDS = (
    "latency",
    "http_error",
    "node_offline",
    "quorum_loss",
    "storage_full",
    "lock_timeout",
    "slow_agent",
)
TASK_KINDS = ("task_failure", "task_warnings")
KINDS = REQUEST_KINDS + TASK_KINDS
_WRITES = ("POST", "PUT", "DELETE")
_GUEST_PATH = re.compile(r"^/nodes/[^/]+/(qemu|lxc)/(\d+)(/|$)")
_NODE_PATH = re.compile(r"^/nodes/([^/]+)(/|$)")
_AGENT_PATH = re.compile(r"^/nodes/[^/]+/qemu/(\d+)/agent(?:/([^/]+))?$")


@dataclass(frozen=True)
class FaultRule:
    """One fault: what it matches, how often it fires, what it does.

    ``path`` is a shell-style pattern over the request path (``/nodes/*/qemu``);
    ``burst`` makes a firing rule also hit the next ``burst - 1`` matching events.
    """

    kind: str
    name: str = ""
    probability: float = 1.0
    methods: tuple[str, ...] = ()
    path: str = ""
    node: str = ""
    storage: str = ""
    task_types: tuple[str, ...] = ()
    delay_ms: int = 0
    status: int = 0
    message: str = ""
    burst: int = 1
    warnings: int = 1
    enabled: bool = True

    @classmethod
    def from_dict(cls, raw: dict, index: int = 0) -> FaultRule:
        """Build a rule from JSON; bad input names the field (``rules[2].kind``)."""
        if not isinstance(raw, dict):
            raise ParameterError({f"rules[{index}]": "expected an object"})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ParameterError({f"rules[{index}].{unknown[0]}": "property is not defined"})
        values = dict(raw)
        kind = values.get("kind")
        if kind not in KINDS:
            raise ParameterError(
                {f"rules[{index}].kind": f"value must be one of {', '.join(KINDS)}"}
            )
        for key in ("methods", "task_types"):
            value = values.get(key, ())
            if isinstance(value, str):
                value = [v for v in value.split(",") if v]
            if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
                raise ParameterError({f"rules[{index}].{key}": "expected a list of strings"})
            values[key] = tuple(v.upper() if key == "methods" else v for v in value)
        checks = {
            "probability": (float, lambda v: 0.0 <= v <= 1.0, "a number from 0 to 1"),
            "delay_ms": (int, lambda v: 0 <= v <= 600_000, "an integer from 0 to 600000"),
            "status": (int, lambda v: v == 0 or 400 <= v <= 599, "0 or an HTTP error status"),
            "burst": (int, lambda v: 1 <= v <= 1000, "an integer from 1 to 1000"),
            "warnings": (int, lambda v: 1 <= v <= 1000, "an integer from 1 to 1000"),
        }
        for key, (kind_type, ok, text) in checks.items():
            if key not in values:
                continue
            value = values[key]
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ParameterError({f"rules[{index}].{key}": f"expected {text}"})
            value = kind_type(value)
            if not ok(value) or (kind_type is int and value != values[key]):
                raise ParameterError({f"rules[{index}].{key}": f"expected {text}"})
            values[key] = value
        for key in ("name", "path", "node", "storage", "message"):
            if not isinstance(values.get(key, ""), str):
                raise ParameterError({f"rules[{index}].{key}": "expected a string"})
        if not isinstance(values.get("enabled", True), bool):
            raise ParameterError({f"rules[{index}].enabled": "expected a boolean"})
        if kind == "storage_full" and not values.get("storage"):
            raise ParameterError({f"rules[{index}].storage": "storage_full needs a storage"})
        if kind == "node_offline" and not values.get("node"):
            raise ParameterError({f"rules[{index}].node": "node_offline needs a node"})
        rule = cls(**values)
        return rule if rule.name else _replace(rule, name=f"{kind}-{index}")

    def to_dict(self) -> dict:
        out = asdict(self)
        out["methods"] = list(self.methods)
        out["task_types"] = list(self.task_types)
        return out


def _replace(rule: FaultRule, **changes) -> FaultRule:
    return FaultRule(**{**asdict(rule), **changes})


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    rules: tuple[FaultRule, ...]


def _scenario(name: str, description: str, *rules: dict) -> Scenario:
    return Scenario(
        name, description, tuple(FaultRule.from_dict(r, i) for i, r in enumerate(rules))
    )


def catalogue(node: str = "pve2", storage: str = "local-lvm") -> dict[str, Scenario]:
    """The named scenarios; ``node`` / ``storage`` say which ones the
    node- and storage-bound scenarios hit."""
    scenarios = [
        _scenario(
            "flaky-api",
            "pveproxy loses its backend now and then: short bursts of HTTP 500 on reads",
            {"kind": "http_error", "methods": ["GET"], "probability": 0.05, "burst": 3},
        ),
        _scenario(
            "slow-api",
            "every other request takes 200 ms longer",
            {"kind": "latency", "probability": 0.5, "delay_ms": 200},
        ),
        _scenario(
            "task-failures",
            "a quarter of the tasks fail, another quarter ends with WARNINGS: 2",
            {"kind": "task_failure", "probability": 0.25},
            {"kind": "task_warnings", "probability": 1 / 3, "warnings": 2},
        ),
        _scenario(
            "node-offline",
            f"node {node} is unreachable: its API answers 595, the cluster shows it offline",
            {"kind": "node_offline", "node": node},
        ),
        _scenario(
            "quorum-loss",
            "the cluster lost quorum: every write is refused, reads still work",
            {"kind": "quorum_loss"},
        ),
        _scenario(
            "storage-full",
            f"storage {storage} is full: allocations on it are refused",
            {"kind": "storage_full", "storage": storage},
        ),
        _scenario(
            "lock-contention",
            "half the guest writes time out waiting for the guest's config lock",
            {"kind": "lock_timeout", "probability": 0.5},
        ),
        _scenario(
            "slow-agent",
            "the QEMU guest agent answers after 1.5 s, and one call in five times out",
            {"kind": "slow_agent", "delay_ms": 1500},
            {"kind": "slow_agent", "probability": 0.2, "status": 500},
        ),
        _scenario(
            "sync-chaos",
            "what a sync meets on a bad day: 5xx bursts and latency on reads, failing tasks",
            {"kind": "http_error", "methods": ["GET"], "probability": 0.08, "burst": 2},
            {"kind": "latency", "methods": ["GET"], "probability": 0.3, "delay_ms": 20},
            {"kind": "task_failure", "probability": 0.3},
        ),
    ]
    return {s.name: s for s in scenarios}


@dataclass
class RequestFault:
    """What the adapter does to one request: wait, then maybe answer an error."""

    delay: float = 0.0
    error: PveError | None = None
    injected: list[str] = field(default_factory=list)


@dataclass
class TaskFault:
    failure: str | None = None
    warnings: int = 0
    injected: list[str] = field(default_factory=list)


@dataclass
class _Stream:
    rng: random.Random
    burst_left: int = 0


@dataclass(frozen=True)
class ActiveScenario:
    name: str
    seed: int
    rules: tuple[FaultRule, ...]
    generation: int = 0

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "seed": self.seed,
            "generation": self.generation,
            "rules": [r.to_dict() for r in self.rules],
        }


def record_fault(counts: Counter, kind: str) -> None:
    """The one place an injection is counted: the scenario's own tally and /metrics."""
    counts[kind] += 1
    metrics.record_fault(kind)


class FaultEngine:
    """Decides, deterministically, which events a scenario disturbs."""

    def __init__(self, history: int = 200) -> None:
        self._lock = threading.Lock()
        self.active: ActiveScenario | None = None
        self._streams: list[_Stream] = []
        self.counts: Counter = Counter()
        self.recent: deque[dict] = deque(maxlen=history)
        self.sequence = 0

    def load(self, scenario: ActiveScenario | None) -> None:
        """Install a scenario; a new generation restarts every rule's stream."""
        with self._lock:
            same_run = (
                scenario is not None
                and self.active is not None
                and scenario.generation == self.active.generation
            )
            if same_run:
                self.active = scenario  # e.g. a rule toggled: keep the streams
                return
            self.active = scenario
            self._streams = []
            if scenario is not None:
                self._streams = [
                    _Stream(random.Random(f"{scenario.seed}/{i}/{rule.kind}"))
                    for i, rule in enumerate(scenario.rules)
                ]
            self.counts = Counter()
            self.recent.clear()
            self.sequence = 0

    @property
    def enabled(self) -> bool:
        return self.active is not None

    def _fires(self, index: int, rule: FaultRule) -> bool:
        stream = self._streams[index]
        if stream.burst_left > 0:
            stream.burst_left -= 1
            return True
        if stream.rng.random() < rule.probability:
            stream.burst_left = rule.burst - 1
            return True
        return False

    def _note(self, kind: str, rule: FaultRule, target: str) -> None:
        self.sequence += 1
        record_fault(self.counts, kind)
        self.recent.append({"n": self.sequence, "kind": kind, "rule": rule.name, "at": target})

    # -- request path ---------------------------------------------------------

    def on_request(self, method: str, path: str, params: dict) -> RequestFault | None:
        active = self.active
        if active is None:
            return None
        out = RequestFault()
        with self._lock:
            if self.active is not active:
                return None
            for index, rule in enumerate(active.rules):
                if not rule.enabled or rule.kind not in REQUEST_KINDS:
                    continue
                if not _matches_request(rule, method, path, params):
                    continue
                if not self._fires(index, rule):
                    continue
                self._note(rule.kind, rule, f"{method} {path}")
                out.injected.append(rule.kind)
                out.delay += rule.delay_ms / 1000
                if out.error is None:
                    out.error = _request_error(rule, path, params)
        return out if out.injected else None

    def offline_nodes(self) -> set[str]:
        """Nodes a scenario takes down (cluster views show them offline)."""
        active = self.active
        if active is None:
            return set()
        return {r.node for r in active.rules if r.enabled and r.kind == "node_offline"}

    def quorate(self) -> bool:
        active = self.active
        return active is None or not any(
            r.enabled and r.kind == "quorum_loss" for r in active.rules
        )

    # -- task worker ----------------------------------------------------------

    def on_task(self, task_type: str, node: str, upid: str) -> TaskFault | None:
        active = self.active
        if active is None:
            return None
        out = TaskFault()
        with self._lock:
            if self.active is not active:
                return None
            for index, rule in enumerate(active.rules):
                if not rule.enabled or rule.kind not in TASK_KINDS:
                    continue
                if rule.task_types and task_type not in rule.task_types:
                    continue
                if rule.node and rule.node != node:
                    continue
                if not self._fires(index, rule):
                    continue
                self._note(rule.kind, rule, upid)
                out.injected.append(rule.kind)
                if rule.kind == "task_failure" and out.failure is None:
                    out.failure = rule.message or f"command '{task_type}' failed: exit code 1"
                elif rule.kind == "task_warnings":
                    out.warnings += rule.warnings
        return out if out.injected else None

    def snapshot(self) -> dict:
        with self._lock:
            return {
                "active": self.active.to_dict() if self.active else None,
                "injections": dict(self.counts),
                "sequence": self.sequence,
                "recent": list(self.recent),
            }


def _matches_request(rule: FaultRule, method: str, path: str, params: dict) -> bool:
    if rule.methods and method not in rule.methods:
        return False
    if rule.path and not fnmatch.fnmatchcase(path, rule.path):
        return False
    kind = rule.kind
    if kind == "node_offline":
        match = _NODE_PATH.match(path)
        return bool(match) and match.group(1) == rule.node
    if kind == "quorum_loss":
        # Logging in still works without quorum; writing cluster files does not.
        return method in _WRITES and path != "/access/ticket"
    if kind == "storage_full":
        return method in _WRITES and _names_storage(params, rule.storage)
    if kind == "lock_timeout":
        return method in _WRITES and bool(_GUEST_PATH.match(path))
    if kind == "slow_agent":
        return bool(_AGENT_PATH.match(path))
    if rule.node:
        match = _NODE_PATH.match(path)
        if not match or match.group(1) != rule.node:
            return False
    return True


def _names_storage(params: dict, storage: str) -> bool:
    """A write allocating on ``storage``: ``storage=X``, ``target-storage=X`` or
    a disk option ``X:SIZE`` / ``X:vm-…``."""
    for key, value in params.items():
        text = str(value)
        if key in ("storage", "target-storage", "target") and text == storage:
            return True
        if text.startswith(f"{storage}:"):
            return True
    return False


def _request_error(rule: FaultRule, path: str, params: dict) -> PveError | None:
    kind = rule.kind
    if kind == "latency" or (kind == "slow_agent" and not rule.status):
        return None
    if kind == "http_error":
        return PveError(rule.message or PVEPROXY_DOWN, status=rule.status or 500)
    if kind == "node_offline":
        return PveError(rule.message or NODE_UNREACHABLE, status=rule.status or 595)
    if kind == "quorum_loss":
        return PveError(rule.message or NO_QUORUM, status=rule.status or 500)
    if kind == "storage_full":
        message = f"unable to allocate image on storage '{rule.storage}' - No space left on device"
        return PveError(rule.message or message, status=rule.status or 500)
    if kind == "lock_timeout":
        match = _GUEST_PATH.match(path)
        vmid = match.group(2)
        lock = (
            f"/var/lock/qemu-server/lock-{vmid}.conf"
            if match.group(1) == "qemu"
            else f"/run/lock/lxc/pve-config-{vmid}.lock"
        )
        return PveError(
            rule.message or f"can't lock file '{lock}' - got timeout", status=rule.status or 500
        )
    # slow_agent with a status: the agent did not answer in time.
    match = _AGENT_PATH.match(path)
    command = match.group(2) or str(params.get("command", "ping"))
    message = f"VM {match.group(1)} qmp command 'guest-{command}' failed - got timeout"
    return PveError(rule.message or message, status=rule.status)


def build_scenario(
    name: str,
    seed: int,
    *,
    rules: list | None = None,
    node: str | None = None,
    storage: str | None = None,
    generation: int = 0,
) -> ActiveScenario:
    """A named scenario from the catalogue, or ``custom`` with explicit rules."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ParameterError({"seed": "expected an integer"})
    if rules is not None:
        if not isinstance(rules, list) or not rules:
            raise ParameterError({"rules": "expected a non-empty list of rules"})
        built = tuple(FaultRule.from_dict(r, i) for i, r in enumerate(rules))
        return ActiveScenario(name or "custom", seed, built, generation)
    known = catalogue(node or "pve2", storage or "local-lvm")
    if name not in known:
        raise ParameterError({"name": f"unknown scenario; one of {', '.join(known)}"})
    return ActiveScenario(name, seed, known[name].rules, generation)


def scenario_from_row(row) -> ActiveScenario | None:
    if row is None:
        return None
    rules = tuple(FaultRule.from_dict(r, i) for i, r in enumerate(row["rules"]))
    return ActiveScenario(row["name"], row["seed"], rules, row["generation"])
