"""Serializer rules for references: what the caller may link to, not only what exists."""

from __future__ import annotations

from django.utils.translation import gettext as _
from rest_framework import serializers


class VisibleReferencesMixin:
    """Referenced objects must be visible to the caller, even when given by numeric ID.

    NetBox itself resolves a bare ID without a view check; ownership data must not
    leak or link through objects the caller cannot see.
    """

    visible_references: tuple[str, ...] = ()

    def validate(self, data):
        # A nested serializer validates the related object it resolved, not the
        # caller's fields, so only the top-level payload is checked here.
        if self.nested:
            return super().validate(data)
        # PostgreSQL text cannot hold NUL: refuse it naming the field instead of a 500.
        for field, value in data.items():
            if isinstance(value, str) and "\x00" in value:
                raise serializers.ValidationError({field: [_("NUL characters are not allowed.")]})
        request = self.context.get("request")
        if request is not None:
            for field in self.visible_references:
                obj = data.get(field)
                if obj is None:
                    continue
                if not type(obj).objects.restrict(request.user, "view").filter(pk=obj.pk).exists():
                    raise serializers.ValidationError(
                        {field: [_("Related object not found using the provided attributes.")]}
                    )
        return super().validate(data)
