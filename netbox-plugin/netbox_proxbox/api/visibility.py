"""Serializer rules for references: what the caller may link to, not only what exists."""

from __future__ import annotations

from collections.abc import Mapping

from django.utils.translation import gettext as _
from rest_framework import serializers


class VisibleReferencesMixin:
    """Referenced objects must be visible to the caller, even when given by numeric ID.

    NetBox itself resolves a bare ID without a view check; ownership data must not
    leak or link through objects the caller cannot see.
    """

    visible_references: tuple[str, ...] = ()

    def to_internal_value(self, data):
        # PostgreSQL text cannot hold NUL, and NetBox resolves nested references and
        # custom-field keys with queries before any field validator runs: a NUL anywhere
        # in the payload is refused naming its top-level field instead of a 500.
        if not self.nested and isinstance(data, Mapping):
            for field, value in data.items():
                if _holds_nul(field) or _holds_nul(value):
                    raise serializers.ValidationError(
                        {str(field).replace("\x00", ""): [_("NUL characters are not allowed.")]}
                    )
        return super().to_internal_value(data)

    def validate(self, data):
        request = self.context.get("request")
        if request is not None and not self.nested:
            for field in self.visible_references:
                obj = data.get(field)
                if obj is None:
                    continue
                if not type(obj).objects.restrict(request.user, "view").filter(pk=obj.pk).exists():
                    raise serializers.ValidationError(
                        {field: [_("Related object not found using the provided attributes.")]}
                    )
        return super().validate(data)


def _holds_nul(value) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, Mapping):
        return any(_holds_nul(k) or _holds_nul(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(_holds_nul(item) for item in value)
    return False
