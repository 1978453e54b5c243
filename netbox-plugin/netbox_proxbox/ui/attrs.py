"""Attributes the endpoint, tracking-record and sync-state panels need beyond NetBox's own."""

from django.utils.formats import date_format
from django.utils.html import format_html
from django.utils.timezone import localtime
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext
from netbox.ui import attrs

from ..choices import SyncStatusChoices
from ..sync.schedules import next_scheduled_sync, schedule_state


class AnchoredMixin:
    """Wraps the rendered value in an element with a stable id, for tests and deep links."""

    def __init__(self, *args, dom_id=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.dom_id = dom_id

    def render(self, obj, context):
        rendered = super().render(obj, context)
        if self.dom_id is None:
            return rendered
        return format_html('<span id="{}">{}</span>', self.dom_id, rendered)


class _ViewableObjectAttr(attrs.RelatedObjectAttr):
    """A related object, shown (and linked) only to a viewer allowed to see it.

    NetBox's RelatedObjectAttr renders any related object; a relation across models (the
    native cluster, its sync state) must not name an object the viewer may not see.
    """

    def render(self, obj, context):
        value = self.viewable_value(obj, context)
        if value is None:
            return self.placeholder
        return super().render(obj, context)

    def viewable_value(self, obj, context):
        value = self.get_value(obj)
        if value is None:
            return None
        user = context["perms"].user
        if not type(value).objects.restrict(user, "view").filter(pk=value.pk).exists():
            return None
        return value


class ViewableObjectAttr(AnchoredMixin, _ViewableObjectAttr):
    pass


class _SyncOutcomeAttr(_ViewableObjectAttr):
    """The last sync's outcome from the native cluster's sidecar (for viewers of it): status,
    when, and for a degraded or failed run the error count and what went wrong."""

    def render(self, obj, context):
        state = self.viewable_value(obj, context)
        if state is None:
            return self.placeholder
        when = (
            date_format(localtime(state.last_sync), "SHORT_DATETIME_FORMAT")
            if state.last_sync
            else ""
        )
        rendered = format_html(
            '<a href="{}"><span class="badge text-bg-{}">{}</span></a> {}',
            state.get_absolute_url(),
            state.get_status_color(),
            state.get_status_display(),
            when,
        )
        if state.status in SyncStatusChoices.PROBLEMS:
            rendered = format_html(
                '{} <span class="text-danger">{}</span><div class="text-muted">{}</div>',
                rendered,
                ngettext("%(count)d error", "%(count)d errors", state.errors)
                % {"count": state.errors},
                state.problem,
            )
        return rendered


class SyncOutcomeAttr(AnchoredMixin, _SyncOutcomeAttr):
    pass


class AnchoredTextAttr(AnchoredMixin, attrs.TextAttr):
    pass


class AnchoredChoiceAttr(AnchoredMixin, attrs.ChoiceAttr):
    pass


class AnchoredBooleanAttr(AnchoredMixin, attrs.BooleanAttr):
    pass


class HostAttr(attrs.TextAttr):
    def get_value(self, obj):
        return f"{obj.host}:{obj.port}"


class TokenSecretAttr(attrs.TextAttr):
    """Whether a secret is stored; never anything derived from it."""

    def get_value(self, obj):
        return _("Stored (write-only)") if obj.has_token_secret else None


class SyncScheduleAttr(AnchoredTextAttr):
    def get_value(self, obj):
        if not obj.sync_interval:
            return None
        return _("Every {minutes} min").format(minutes=obj.sync_interval)


class WatchAttr(AnchoredTextAttr):
    def get_value(self, obj):
        if not obj.watch_interval:
            return None
        return _("On: Proxmox polled every {seconds} s").format(seconds=obj.watch_interval)


class _NextSyncAttr(attrs.DateTimeAttr):
    """The recurring Job's next run, or why scheduled syncs do not run."""

    def get_value(self, obj):
        return next_scheduled_sync(obj)

    def render(self, obj, context):
        note = schedule_state(obj)
        if note:
            return format_html('<span class="text-warning">{}</span>', note)
        return super().render(obj, context)


class NextSyncAttr(AnchoredMixin, _NextSyncAttr):
    pass
