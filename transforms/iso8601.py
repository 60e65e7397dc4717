"""ISO-8601 date-times, read the same on every Python the project supports (3.10 to 3.13).

``datetime.fromisoformat`` changed under the same name: on 3.10 it reads only what
``isoformat()`` writes (no ``Z``, no basic format, fractions of exactly 3 or 6 digits); from
3.11 it reads most of ISO-8601, with a few quirks of its own (any character between date and
time, a fraction after the minutes). An event time must not be valid on one Python and a
dead letter on another, so :func:`parse_iso8601` reads one grammar on every version, a strict
subset of what 3.11's ``fromisoformat`` accepts, with the same result wherever both accept:

* a date: ``YYYY-MM-DD`` or ``YYYYMMDD``; or an ISO week date ``YYYY-Www-D`` or ``YYYYWwwD``
  (``YYYY-Www`` and ``YYYYWww`` are that week's Monday);
* then, optionally, ``T`` (or ``t``, or a space) and a time: ``HH``, ``HH:MM``,
  ``HH:MM:SS``, or in basic format ``HHMM``, ``HHMMSS``; seconds may have a fraction after
  ``.`` or ``,``, of any length (digits past the microsecond are dropped, as 3.11 does);
* then, optionally, an offset: ``Z``, or ``+`` or ``-`` followed by a time of the same form
  (``+02:00``, ``-0530``, ``+05``).

Nothing else: no text around it, no lowercase ``z``, no ordinal date (``2024-122``), no hour
24, no leap second, no offset of 24 hours or more. Without an offset the result is naive.

>>> parse_iso8601("2024-05-01T10:00:00Z") == parse_iso8601("2024-05-01T12:00:00+02:00")
True
>>> parse_iso8601("20240501T100000.5-0130").isoformat()
'2024-05-01T10:00:00.500000-01:30'
"""

from __future__ import annotations

import datetime
import re
from typing import Optional

__all__ = ["InvalidDateTime", "parse_iso8601"]


class InvalidDateTime(ValueError):
    """The text is in the grammar but names no date-time: a 30 February, an hour 24."""

# [0-9], not \d: \d also matches other scripts' digits, which fromisoformat rejects.
_TIME = (r"(?P<{p}hour>[0-9]{{2}})(?:"
         r":(?P<{p}minute>[0-9]{{2}})(?::(?P<{p}second>[0-9]{{2}})(?P<{p}fraction>[.,][0-9]+)?)?"
         r"|(?P<{p}bminute>[0-9]{{2}})(?:(?P<{p}bsecond>[0-9]{{2}})(?P<{p}bfraction>[.,][0-9]+)?)?"
         r")?")
_DATE_TIME = re.compile(
    r"(?P<year>[0-9]{4})(?:"
    r"-(?P<month>[0-9]{2})-(?P<day>[0-9]{2})"
    r"|(?P<bmonth>[0-9]{2})(?P<bday>[0-9]{2})"
    r"|-W(?P<week>[0-9]{2})(?:-(?P<weekday>[1-7]))?"
    r"|W(?P<bweek>[0-9]{2})(?P<bweekday>[1-7])?"
    r")"
    r"(?:[Tt ]" + _TIME.format(p="") +
    r"(?:(?P<utc>Z)|(?P<sign>[+-])" + _TIME.format(p="offset_") + r")?"
    r")?",
    re.ASCII,
)


def parse_iso8601(text: str) -> datetime.datetime:
    """The ``datetime`` that ``text`` names in the grammar above, or raise ``ValueError``.

    The error is an :class:`InvalidDateTime` where ``text`` is in the grammar but names no
    date-time (a 30 February, an hour 24, a week 53 of a year with 52), and says why.
    """
    match = _DATE_TIME.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not an ISO-8601 date-time")
    fields = match.groupdict()
    try:
        year = int(fields["year"])
        if fields["week"] or fields["bweek"]:
            date = datetime.date.fromisocalendar(
                year, int(fields["week"] or fields["bweek"]),
                int(fields["weekday"] or fields["bweekday"] or 1))
        else:
            date = datetime.date(year, int(fields["month"] or fields["bmonth"]),
                                 int(fields["day"] or fields["bday"]))
        time = _time_of_day(fields, "")
        zone: Optional[datetime.tzinfo] = None
        if fields["utc"]:
            zone = datetime.timezone.utc
        elif fields["sign"]:
            offset = _time_of_day(fields, "offset_")
            delta = datetime.timedelta(hours=offset.hour, minutes=offset.minute,
                                       seconds=offset.second, microseconds=offset.microsecond)
            zone = datetime.timezone(-delta if fields["sign"] == "-" else delta)
    except ValueError as error:  # matched the grammar, but no such day, time or offset
        raise InvalidDateTime(f"{text!r} is not a valid date-time: {error}") from None
    return datetime.datetime.combine(date, time, tzinfo=zone)


def _time_of_day(fields: dict, prefix: str) -> datetime.time:
    """The time of day the groups named ``prefix...`` hold (midnight where there are none)."""

    def field(name: str) -> Optional[str]:
        return fields[prefix + name] or fields[prefix + "b" + name]

    fraction = field("fraction")
    # Truncated to microseconds, not rounded: fromisoformat does so, and rounding up could
    # carry into the next second (".9999999").
    micros = int(fraction[1:7].ljust(6, "0")) if fraction else 0
    return datetime.time(int(fields[prefix + "hour"] or 0), int(field("minute") or 0),
                         int(field("second") or 0), micros)
