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
        request = self.context.get("request")
        if request is not None and not self.nested:
            for field in self.visible_references:
                value = data.get(field)
                # A many-to-many field is a list of objects: each must be visible.
                objs = [obj for obj in value if obj is not None] if isinstance(value, list) else []
                if value is not None and not isinstance(value, list):
                    objs = [value]
                for obj in objs:
                    visible = type(obj).objects.restrict(request.user, "view")
                    if not visible.filter(pk=obj.pk).exists():
                        raise serializers.ValidationError(
                            {field: [_("Related object not found using the provided attributes.")]}
                        )
        return super().validate(data)
