"""NetBox tags the sync sets on objects, and how it edits an object's tag list.

NetBox replaces an object's whole tag list on write, so the sync always sends the
tags it found plus or minus its own: a tag an operator added is never dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class TagDefinition:
    slug: str
    name: str
    color: str  # six hex digits, NetBox's format
    description: str  # NetBox allows 200 characters

    def payload(self) -> dict:
        return {
            "name": self.name,
            "slug": self.slug,
            "color": self.color,
            "description": self.description,
        }


UNCONFIRMED = TagDefinition(
    slug="proxbox-unconfirmed",
    name="proxbox: unconfirmed",
    color="ff9800",
    description="Kept by Proxbox: the guest reported this address before but could not "
    "now (stopped, agent silent). Cleared when it reports it again; deleted when it reports "
    "without it.",
)


PROXBOX = TagDefinition(
    slug="proxbox",
    name="proxbox",
    color="e57000",
    description="Managed by the Proxbox sync from Proxmox VE: the sync keeps this object in "
    "shape (tags you add stay).",
)

# An operator's mark on an object they already keep in NetBox: "let the sync take this
# over" (when the endpoint's policy allows adoption). The sync removes it on adoption.
ADOPT = TagDefinition(
    slug="proxbox-adopt",
    name="proxbox: adopt",
    color="ffc107",
    description="Put by an operator on a VM, device or IP address already in NetBox: the "
    "Proxbox sync adopts it (when its endpoint allows adoption) and then removes this tag.",
)

TEMPLATE = TagDefinition(
    slug="proxbox-template",
    name="proxbox: template",
    color="607d8b",
    description="A Proxmox VE template (a blueprint for clones, never started), synced "
    "because the backend runs with PROXBOX_TEMPLATES=sync.",
)

# Tags mirrored from Proxmox guests carry this slug prefix: the sync adds and removes
# those, and only those, on the VMs it owns.
GUEST_TAG_PREFIX = "pve-"
GUEST_TAG_COLOR = "9e9e9e"
_SLUG_UNSAFE = re.compile(r"[^a-z0-9_-]+")


def guest_tag(name: str, color: str | None = None) -> TagDefinition:
    """The NetBox tag for a Proxmox guest tag (`prod` → slug `pve-prod`, name `pve:prod`).

    The prefix keeps them apart from an operator's own tags of the same name.
    """
    slug = GUEST_TAG_PREFIX + _SLUG_UNSAFE.sub("_", name.lower())
    return TagDefinition(
        slug=slug[:100],
        name=f"pve:{name}"[:100],
        color=(color or GUEST_TAG_COLOR).lower(),
        description="Proxmox VE guest tag, mirrored by the Proxbox sync.",
    )


def is_sync_tag(slug: str) -> bool:
    """Tags the sync sets and takes away on its objects; every other tag is an operator's."""
    return slug in (PROXBOX.slug, UNCONFIRMED.slug, TEMPLATE.slug, ADOPT.slug) or slug.startswith(
        GUEST_TAG_PREFIX
    )


def tag_slugs(obj: dict) -> list[str]:
    """The slugs of an object's tags as NetBox serializes them (nested objects)."""
    return [tag["slug"] for tag in obj.get("tags") or () if isinstance(tag, dict)]


def tags_field(slugs: list[str]) -> list[dict]:
    """The `tags` value for a write: NetBox resolves each nested tag by its slug."""
    return [{"slug": slug} for slug in slugs]


def retag(obj: dict, wanted: set[str]) -> list[dict] | None:
    """The object's new tag list: its operator tags, plus exactly the sync tags `wanted`.

    None when its tags are already that set (NetBox's order does not matter).
    """
    current = tag_slugs(obj)
    kept = [slug for slug in current if not is_sync_tag(slug) or slug in wanted]
    result = kept + sorted(wanted - set(kept))
    return None if set(result) == set(current) else tags_field(result)


def with_sync_tags(fields: dict, obj: dict | None, wanted: set[str]) -> dict:
    """`fields` plus the `tags` a create (obj None) or an update of `obj` needs."""
    if obj is None:
        return {**fields, "tags": tags_field(sorted(wanted))}
    changed = retag(obj, wanted)
    return fields if changed is None else {**fields, "tags": changed}
