"""NetBox tags the sync sets on objects, and how it edits an object's tag list.

NetBox replaces an object's whole tag list on write, so the sync always sends the
tags it found plus or minus its own: a tag an operator added is never dropped.
"""

from __future__ import annotations

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


def tag_slugs(obj: dict) -> list[str]:
    """The slugs of an object's tags as NetBox serializes them (nested objects)."""
    return [tag["slug"] for tag in obj.get("tags") or () if isinstance(tag, dict)]


def tags_field(slugs: list[str]) -> list[dict]:
    """The `tags` value for a write: NetBox resolves each nested tag by its slug."""
    return [{"slug": slug} for slug in slugs]


def add_tag(obj: dict, slug: str) -> list[dict] | None:
    """The object's tags plus `slug`; None when it carries the tag already."""
    current = tag_slugs(obj)
    return None if slug in current else tags_field([*current, slug])


def remove_tag(obj: dict, slug: str) -> list[dict] | None:
    """The object's tags without `slug`; None when it does not carry the tag."""
    current = tag_slugs(obj)
    return tags_field([s for s in current if s != slug]) if slug in current else None
