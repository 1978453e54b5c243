"""Route table generated from the active contract snapshot.

Templates are matched segment by segment instead of through FastAPI path
converters, because PVE templates use names FastAPI cannot (``{route-map-id}``)
and some values contain ``/`` (``{volume}`` = ``local:iso/x.iso``, ``{cidr}``).
A template whose last segment is one of the parameters whose values may
contain ``/`` absorbs the remaining segments, but only when no template
matches segment-for-segment.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote

from proxmox_simulator.contracts.model import Contract, Endpoint

# Volume IDs ("local:iso/x.iso"), CIDRs ("10.0.0.0/24") and nested pool IDs
# ("parent/child") contain slashes; every other parameter is one segment.
SLASH_PARAMS = frozenset({"volume", "cidr", "poolid"})


@dataclass(frozen=True)
class Template:
    path: str
    segments: tuple[str, ...]
    params: tuple[tuple[int, str], ...]

    @property
    def tail_param(self) -> bool:
        return bool(self.segments) and self.segments[-1][1:-1] in SLASH_PARAMS

    def literal_count(self) -> int:
        return sum(1 for s in self.segments if not s.startswith("{"))


@dataclass(frozen=True)
class RouteMatch:
    template: str
    params: dict[str, str]


class RouteTable:
    def __init__(self, contract: Contract) -> None:
        self.contract = contract
        self._methods: dict[str, dict[str, Endpoint]] = {}
        by_length: dict[int, list[Template]] = {}
        for endpoint in contract.endpoints:
            self._methods.setdefault(endpoint.path, {})[endpoint.method] = endpoint
        for path in self._methods:
            segments = tuple(s for s in path.split("/") if s)
            params = tuple(
                (i, s[1:-1])
                for i, s in enumerate(segments)
                if s.startswith("{") and s.endswith("}")
            )
            by_length.setdefault(len(segments), []).append(Template(path, segments, params))
        # More literal segments first: "/nodes/{node}/qemu" beats "/nodes/{node}/{x}".
        for templates in by_length.values():
            templates.sort(key=lambda t: (-t.literal_count(), t.path))
        self._by_length = by_length
        self._tails = sorted(
            (t for ts in by_length.values() for t in ts if t.tail_param),
            key=lambda t: (-len(t.segments), -t.literal_count()),
        )

    def methods(self, template: str) -> dict[str, Endpoint]:
        return self._methods.get(template, {})

    def match(self, path: str) -> RouteMatch | None:
        raw_segments = [s for s in path.split("/") if s]
        segments = [unquote(s) for s in raw_segments]
        for template in self._by_length.get(len(segments), ()):
            if self._fits(template, segments):
                return RouteMatch(template.path, {name: segments[i] for i, name in template.params})
        for template in self._tails:
            n = len(template.segments)
            if len(segments) <= n or not self._fits(template, segments[: n - 1], prefix=True):
                continue
            params = {name: segments[i] for i, name in template.params[:-1]}
            params[template.params[-1][1]] = "/".join(segments[n - 1 :])
            return RouteMatch(template.path, params)
        return None

    @staticmethod
    def _fits(template: Template, segments: list[str], prefix: bool = False) -> bool:
        parts = template.segments[: len(segments)] if prefix else template.segments
        for want, got in zip(parts, segments, strict=False):
            if want.startswith("{"):
                if not got:
                    return False
            elif want != got:
                return False
        return True
