"""Honest counters: every number comes from a NetBox answer, never from intent."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

OUTCOMES = ("created", "updated", "unchanged", "deleted", "failed")


@dataclass
class ObjectCounters:
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    deleted: int = 0
    failed: int = 0

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def writes(self) -> int:
        return self.created + self.updated + self.deleted


@dataclass(frozen=True)
class Failure:
    object_type: str
    label: str
    reason: str

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Tally:
    """Counters per NetBox object type plus the failures behind the `failed` numbers."""

    counters: dict[str, ObjectCounters] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)

    def of(self, object_type: str) -> ObjectCounters:
        return self.counters.setdefault(object_type, ObjectCounters())

    def count(self, object_type: str, outcome: str) -> int:
        """How many objects of the type had the outcome so far (0 for an unseen type)."""
        counters = self.counters.get(object_type)
        return getattr(counters, outcome) if counters else 0

    def add(self, object_type: str, outcome: str, n: int = 1) -> None:
        counters = self.of(object_type)
        setattr(counters, outcome, getattr(counters, outcome) + n)

    def fail(self, object_type: str, label: str, reason: str) -> None:
        self.add(object_type, "failed")
        self.failures.append(Failure(object_type, label, reason))

    @property
    def failed(self) -> int:
        return sum(c.failed for c in self.counters.values())

    @property
    def writes(self) -> int:
        return sum(c.writes for c in self.counters.values())

    def as_dict(self) -> dict:
        return {
            "counters": {k: v.as_dict() for k, v in self.counters.items()},
            "failures": [f.as_dict() for f in self.failures],
        }
