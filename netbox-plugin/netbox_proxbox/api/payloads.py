"""Serializer rules for the payload itself, before any field is resolved."""

from __future__ import annotations

from collections.abc import Mapping

from django.utils.translation import gettext as _
from rest_framework import serializers


class NulFreePayloadMixin:
    """A NUL anywhere in a write is refused naming its top-level field.

    PostgreSQL text cannot hold NUL, and NetBox resolves nested references and
    custom-field keys with queries before any field validator runs, so without this a
    NUL in a nested reference or a tag was a 500.
    """

    def to_internal_value(self, data):
        if not getattr(self, "nested", False) and isinstance(data, Mapping):
            for field, value in data.items():
                if _holds_nul(field) or _holds_nul(value):
                    raise serializers.ValidationError(
                        {str(field).replace("\x00", ""): [_("NUL characters are not allowed.")]}
                    )
        return super().to_internal_value(data)


def _holds_nul(value) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, Mapping):
        return any(_holds_nul(k) or _holds_nul(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(_holds_nul(item) for item in value)
    return False
