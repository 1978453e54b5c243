"""An endpoint's assignment rules (the plugin's `ProxmoxAssignmentRule`): which tenant,
VM role, platform and site a guest's VM gets.

Rules are tried in order (`weight`, lowest first); the first enabled one whose every set
matcher matches the guest decides, and a guest no rule matches keeps the endpoint's
defaults. A rule's location is read but never written: NetBox 4.7 virtual machines have
no location field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from proxbox_backend.domain.policy import PolicyError


@dataclass(frozen=True)
class AssignmentRule:
    id: int
    weight: int
    enabled: bool = True
    description: str = ""
    # Matchers; None: not part of the rule.
    name_pattern: str | None = None  # a Python regular expression the whole name matches
    tag: str | None = None
    pool: str | None = None
    node: str | None = None
    vmid_min: int | None = None
    vmid_max: int | None = None
    # Assignments: NetBox ids, by the VM field they set.
    tenant: int | None = None
    role: int | None = None
    platform: int | None = None
    site: int | None = None
    location: int | None = None

    @classmethod
    def from_api(cls, data: dict) -> AssignmentRule:
        """From a rule's REST representation (its `rule` field, as the plugin's model
        says the backend reads it)."""
        rule = data.get("rule") or {}
        match, assign = rule.get("match") or {}, rule.get("assign") or {}
        pattern = match.get("name_pattern") or None
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise PolicyError(
                    f"assignment rule {rule.get('weight')}: name pattern {pattern!r}: {exc}"
                ) from None
        return cls(
            id=int(rule["id"]),
            weight=int(rule["weight"]),
            enabled=rule.get("enabled") is not False,
            description=rule.get("description") or "",
            name_pattern=pattern,
            tag=match.get("proxmox_tag") or None,
            pool=match.get("pool") or None,
            node=match.get("node") or None,
            vmid_min=match.get("vmid_min"),
            vmid_max=match.get("vmid_max"),
            tenant=assign.get("tenant"),
            role=assign.get("vm_role"),
            platform=assign.get("platform"),
            site=assign.get("site"),
            location=assign.get("location"),
        )

    @property
    def label(self) -> str:
        """How a report names the rule: its order, and its description when it has one."""
        name = f"rule {self.weight}"
        return f"{name} ({self.description})" if self.description else name

    def matches(self, guest) -> bool:
        if self.name_pattern is not None and re.fullmatch(self.name_pattern, guest.name) is None:
            return False
        # Proxmox compares tags without regard to case unless the cluster's tag style says
        # otherwise; a rule naming `Prod` means the tag however a guest spells it.
        if self.tag is not None and self.tag.casefold() not in {t.casefold() for t in guest.tags}:
            return False
        if self.pool is not None and getattr(guest, "pool", None) != self.pool:
            return False
        if self.node is not None and guest.node != self.node:
            return False
        if self.vmid_min is not None and guest.vmid < self.vmid_min:
            return False
        return self.vmid_max is None or guest.vmid <= self.vmid_max

    def assignments(self) -> dict[str, int]:
        """VM field → id of what the rule assigns (its location has no VM field)."""
        values = {
            "tenant": self.tenant,
            "role": self.role,
            "platform": self.platform,
            "site": self.site,
        }
        return {name: value for name, value in values.items() if value is not None}


def first_match(rules, guest) -> AssignmentRule | None:
    """The rule that decides `guest`'s assignments: the first enabled one, by order, that
    matches it; None: the endpoint's defaults apply."""
    for rule in sorted(rules, key=lambda r: (r.weight, r.id)):
        if rule.enabled and rule.matches(guest):
            return rule
    return None


def placeable(rules, cluster_site: int | None) -> tuple[tuple[AssignmentRule, ...], list[str]]:
    """The rules as a run applies them, and why some of their sites are not written.

    The endpoint's site is its native cluster's scope and its nodes' site; NetBox refuses
    a VM at another site in that cluster or on those hosts, so such a rule's site is left
    out (its other assignments still apply) and the run says so."""
    usable, warnings = [], []
    for rule in rules:
        if cluster_site is not None and rule.site is not None and rule.site != cluster_site:
            warnings.append(
                f"assignment {rule.label}: site {rule.site} not written: the endpoint's "
                f"cluster and nodes are at site {cluster_site}, and NetBox refuses a VM "
                "at another site"
            )
            rule = replace(rule, site=None)
        usable.append(rule)
    return tuple(usable), warnings
