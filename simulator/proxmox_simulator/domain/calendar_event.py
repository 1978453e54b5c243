"""PVE calendar events (``pve-calendar-event``): the systemd-like schedules of jobs.

``[WEEKDAYS] [[YEARS-]MONTHS-DAYS] [HOURS:]MINUTES[:SECONDS] [UTC]`` where each
component is ``*``, a value, a range ``a..b``, a repetition ``a/step`` (or
``a..b/step``, ``*/step``) or a comma list of those; weekdays are names
(``mon``, ``monday``) with ranges ``mon..fri``.  The shorthands ``minutely``,
``hourly``, ``daily``, ``weekly``, ``monthly``, ``yearly``/``annually``,
``quarterly`` and ``semiannually``/``semi-annually`` stand for their usual
events.  A missing time is midnight; a missing second is ``0``.

:func:`next_event` finds the first matching second after a time, in the
event's time zone (the node's, or UTC for a trailing ``UTC``), giving up like
PVE does after a bounded number of steps (an event in a past year never fires).
"""

from __future__ import annotations

import datetime
import re
import zoneinfo
from dataclasses import dataclass, field

_WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_WEEKDAY_NAMES = {
    **{name: i for i, name in enumerate(_WEEKDAYS)},
    **{
        full: i
        for i, full in enumerate(
            ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
        )
    },
}
_MAX_STEPS = 1000  # PVE stops searching after this many adjustments


class CalendarEventError(ValueError):
    """The text is no calendar event; ``str()`` is the parser's reason."""


@dataclass(frozen=True)
class _Value:
    """One element of a component list: a single value, a range or a repetition."""

    start: int
    end: int | None = None  # inclusive; None for a single value or an open repetition
    step: int | None = None

    def matches(self, value: int) -> bool:
        if self.step is None:
            return self.start <= value <= (self.start if self.end is None else self.end)
        if value < self.start or (self.end is not None and value > self.end):
            return False
        return (value - self.start) % self.step == 0

    def next_after(self, value: int) -> int | None:
        """The smallest matching value greater than ``value``."""
        if self.step is None:
            last = self.start if self.end is None else self.end
            if value < self.start:
                return self.start
            return value + 1 if value + 1 <= last else None
        if value < self.start:
            return self.start
        candidate = value + self.step - (value - self.start) % self.step
        if self.end is not None and candidate > self.end:
            return None
        return candidate


Component = tuple[_Value, ...]  # empty: every value


def _contains(component: Component, value: int) -> bool:
    return not component or any(v.matches(value) for v in component)


def _next(component: Component, value: int) -> int | None:
    found = [n for n in (v.next_after(value) for v in component) if n is not None]
    return min(found) if found else None


@dataclass(frozen=True)
class CalendarEvent:
    weekdays: frozenset[int] = frozenset()  # 0 = Monday; empty: every day
    year: Component = ()
    month: Component = ()
    day: Component = ()
    hour: Component = ()
    minute: Component = ()
    second: Component = field(default=(_Value(0),))
    utc: bool = False


_ZERO = (_Value(0),)
_SHORTHANDS = {
    "minutely": {},
    "hourly": {"minute": _ZERO},
    "daily": {"hour": _ZERO, "minute": _ZERO},
    "weekly": {"hour": _ZERO, "minute": _ZERO, "weekdays": frozenset({0})},
    "monthly": {"hour": _ZERO, "minute": _ZERO, "day": (_Value(1),)},
    "yearly": {"hour": _ZERO, "minute": _ZERO, "day": (_Value(1),), "month": (_Value(1),)},
    "quarterly": {
        "hour": _ZERO,
        "minute": _ZERO,
        "day": (_Value(1),),
        "month": tuple(_Value(m) for m in (1, 4, 7, 10)),
    },
    "semiannually": {
        "hour": _ZERO,
        "minute": _ZERO,
        "day": (_Value(1),),
        "month": (_Value(1), _Value(7)),
    },
}
_SHORTHANDS["annually"] = _SHORTHANDS["yearly"]
_SHORTHANDS["semi-annually"] = _SHORTHANDS["semiannually"]

_NUMBER = re.compile(r"\d+")


def _number(text: str, limit: int) -> int:
    if not _NUMBER.fullmatch(text):
        raise CalendarEventError(f"expected a number, got '{text}'")
    value = int(text)
    if value >= limit:
        raise CalendarEventError(f"value '{text}' out of range (must be < {limit})")
    return value


def _element(text: str, limit: int) -> _Value:
    base, slash, step_text = text.partition("/")
    step = _number(step_text, limit) if slash else None
    if step == 0:
        raise CalendarEventError("repetition must be greater than zero")
    first, dots, last = base.partition("..")
    start = _number(first, limit)
    end = _number(last, limit) if dots else None
    if end is not None and start > end:
        raise CalendarEventError("range start is bigger than end")
    return _Value(start, end, step)


def _component(text: str, first: int, limit: int) -> Component:
    if text == "*":
        return ()
    if text.startswith("*/"):
        step = _number(text[2:], limit)
        return () if step == 0 else (_Value(first, None, step),)
    if not text:
        raise CalendarEventError("empty component")
    return tuple(_element(part, limit) for part in text.split(","))


def _weekday(text: str) -> int:
    day = _WEEKDAY_NAMES.get(text.lower())
    if day is None:
        raise CalendarEventError(f"invalid weekday '{text}'")
    return day


def _weekdays(text: str) -> frozenset[int]:
    days: set[int] = set()
    for part in text.split(","):
        first, dots, last = part.partition("..")
        start = _weekday(first)
        end = _weekday(last) if dots else start
        if end < start:
            raise CalendarEventError("weekday range start is bigger than end")
        days.update(range(start, end + 1))
    return frozenset(days)


def _date(text: str) -> dict:
    parts = text.split("-")
    if len(parts) == 3:
        return {
            "year": _component(parts[0], 0, 2200),
            "month": _component(parts[1], 1, 13),
            "day": _component(parts[2], 1, 32),
        }
    if len(parts) == 2:
        return {"month": _component(parts[0], 1, 13), "day": _component(parts[1], 1, 32)}
    raise CalendarEventError("invalid date spec")


def _time(text: str) -> dict:
    parts = text.split(":")
    if len(parts) > 3:
        raise CalendarEventError("invalid time spec")
    if len(parts) == 1:  # minutes only: every hour
        return {"hour": (), "minute": _component(parts[0], 0, 60)}
    spec = {"hour": _component(parts[0], 0, 24), "minute": _component(parts[1], 0, 60)}
    if len(parts) == 3:
        spec["second"] = _component(parts[2], 0, 60)
    return spec


def parse(text: str) -> CalendarEvent:
    """The event ``text`` describes; raises :class:`CalendarEventError`."""
    event = text.strip()
    if not event:
        raise CalendarEventError("event is empty")
    utc = event.endswith("UTC")
    if utc:
        event = event[:-3].rstrip(" ")
    if event in _SHORTHANDS:
        return CalendarEvent(utc=utc, **_SHORTHANDS[event])
    tokens = event.split()
    spec: dict = {"hour": _ZERO, "minute": _ZERO}
    if tokens and tokens[0][:1].isalpha():
        spec["weekdays"] = _weekdays(tokens.pop(0))
    if tokens and "-" in tokens[0] and ":" not in tokens[0]:
        spec.update(_date(tokens.pop(0)))
    if tokens:
        spec.update(_time(tokens.pop(0)))
    elif len(spec) == 2:
        raise CalendarEventError("expected a date or time specification")
    if tokens:
        raise CalendarEventError(f"unexpected '{' '.join(tokens)}'")
    return CalendarEvent(utc=utc, **spec)


def verify(text: str) -> None:
    """PVE's ``pve-calendar-event`` format check (its message on failure)."""
    try:
        parse(text)
    except CalendarEventError as exc:
        raise CalendarEventError(
            f"invalid calendar event '{text}' - unable to parse calendar event - {exc}"
        ) from None


# -- the next matching second ----------------------------------------------------------


def _first_of_month(t: datetime.datetime, months: int) -> datetime.datetime:
    index = t.year * 12 + t.month - 1 + months
    return datetime.datetime(index // 12, index % 12 + 1, 1)


def _days_later(t: datetime.datetime, days: int) -> datetime.datetime:
    return datetime.datetime(t.year, t.month, t.day) + datetime.timedelta(days=days)


def next_event(event: CalendarEvent, after: int, zone: str = "UTC") -> int | None:
    """The first epoch second later than ``after`` the event matches, or None."""
    tz = datetime.UTC if event.utc else zoneinfo.ZoneInfo(zone)
    t = datetime.datetime.fromtimestamp(after + 1, tz).replace(tzinfo=None)
    for _ in range(_MAX_STEPS):
        if t.year >= 9999:
            return None
        if not _contains(event.year, t.year):
            following = _next(event.year, t.year)
            if following is None:
                return None
            t = datetime.datetime(following, 1, 1)
            continue
        if not _contains(event.month, t.month):
            following = _next(event.month, t.month)
            t = _first_of_month(t, following - t.month if following else 13 - t.month)
            continue
        if not _contains(event.day, t.day):
            following = _next(event.day, t.day)
            t = (
                _days_later(t, following - t.day)
                if following is not None
                else _first_of_month(t, 1)
            )
            continue
        if event.weekdays and t.weekday() not in event.weekdays:
            wanted = [d for d in sorted(event.weekdays) if d > t.weekday()]
            t = _days_later(t, (wanted[0] if wanted else 7) - t.weekday())
            continue
        if not _contains(event.hour, t.hour):
            following = _next(event.hour, t.hour)
            t = (
                t.replace(hour=following, minute=0, second=0)
                if following is not None and following < 24
                else _days_later(t, 1)
            )
            continue
        if not _contains(event.minute, t.minute):
            following = _next(event.minute, t.minute)
            t = (
                t.replace(minute=following, second=0)
                if following is not None and following < 60
                else t.replace(minute=0, second=0) + datetime.timedelta(hours=1)
            )
            continue
        if not _contains(event.second, t.second):
            following = _next(event.second, t.second)
            t = (
                t.replace(second=following)
                if following is not None and following < 60
                else t.replace(second=0) + datetime.timedelta(minutes=1)
            )
            continue
        epoch = int(t.replace(tzinfo=tz).timestamp())
        if epoch > after:
            return epoch
        t += datetime.timedelta(seconds=1)  # a wall time the clock passed twice (DST)
    return None


def upcoming(event: CalendarEvent, start: int, count: int, zone: str = "UTC") -> list[int]:
    """Up to ``count`` successive events after ``start``."""
    times: list[int] = []
    while len(times) < count:
        following = next_event(event, start, zone)
        if following is None:
            break
        times.append(following)
        start = following
    return times
