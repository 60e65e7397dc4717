"""ISO-8601 event times: one grammar, the same instants, on every Python from 3.10 to 3.13.

Each case gives its expected date-time written out, so it proves the same thing on every
Python; where ``datetime.fromisoformat`` reads ISO-8601 (3.11 on) it must also agree with it.
"""

from __future__ import annotations

import datetime
import sys

import pytest
from apache_beam.utils.timestamp import Timestamp

from transforms.iso8601 import InvalidDateTime, parse_iso8601
from transforms.windows import parse_event_time

UTC = datetime.timezone.utc
MAY_1_10H_UTC = Timestamp(1714557600)  # 2024-05-01T10:00:00Z
#: Whether this Python's fromisoformat reads ISO-8601 (3.10's reads only isoformat()'s output).
FROMISOFORMAT_READS_ISO_8601 = sys.version_info >= (3, 11)


def _zone(hours=0, minutes=0, seconds=0, microseconds=0):
    return datetime.timezone(datetime.timedelta(
        hours=hours, minutes=minutes, seconds=seconds, microseconds=microseconds))


@pytest.mark.parametrize("text", [
    "2024-05-01T10:00:00Z",
    "2024-05-01T10:00:00+00:00",
    "2024-05-01T10:00:00-00:00",
    "2024-05-01T12:00:00+02:00",
    "2024-05-01T04:30:00-05:30",
    "2024-05-01T12:00:00+0200",
    "2024-05-01T12:00:00+02",
    "2024-05-01T10:00:00.000Z",
    "2024-05-01T10:00Z",
    "2024-05-01 10:00:00Z",
    "20240501T100000Z",
    "2024-W18-3T10:00:00Z",
])
def test_z_and_offsets_name_the_same_instant_on_every_python(text):
    assert parse_event_time(text) == MAY_1_10H_UTC


@pytest.mark.parametrize("text, expected", [
    ("2024-05-01T10:00:00Z", datetime.datetime(2024, 5, 1, 10, tzinfo=UTC)),
    ("2024-05-01t10:00:00Z", datetime.datetime(2024, 5, 1, 10, tzinfo=UTC)),
    ("2024-05-01T10:00:00+05:30", datetime.datetime(2024, 5, 1, 10, tzinfo=_zone(5, 30))),
    ("2024-05-01T10:00:00-0530", datetime.datetime(2024, 5, 1, 10, tzinfo=_zone(-5, -30))),
    ("2024-05-01T10:00:00+05:30:15.5",
     datetime.datetime(2024, 5, 1, 10, tzinfo=_zone(5, 30, 15, 500000))),
    ("2024-05-01T10:00:00+23:59", datetime.datetime(2024, 5, 1, 10, tzinfo=_zone(23, 59))),
    ("2024-05-01T10Z", datetime.datetime(2024, 5, 1, 10, tzinfo=UTC)),
    ("2024-05-01T10:00:00.1Z", datetime.datetime(2024, 5, 1, 10, 0, 0, 100000, tzinfo=UTC)),
    ("2024-05-01T10:00:00.12+00:00",
     datetime.datetime(2024, 5, 1, 10, 0, 0, 120000, tzinfo=UTC)),
    ("2024-05-01T10:00:00,5Z", datetime.datetime(2024, 5, 1, 10, 0, 0, 500000, tzinfo=UTC)),
    # Past the microsecond, digits are dropped (not rounded), as fromisoformat does.
    ("2024-05-01T10:00:00.123456789Z",
     datetime.datetime(2024, 5, 1, 10, 0, 0, 123456, tzinfo=UTC)),
    ("2024-05-01T23:59:59.9999999Z",
     datetime.datetime(2024, 5, 1, 23, 59, 59, 999999, tzinfo=UTC)),
    ("20240501T1000Z", datetime.datetime(2024, 5, 1, 10, tzinfo=UTC)),
    ("20240501T10:00:00Z", datetime.datetime(2024, 5, 1, 10, tzinfo=UTC)),
    ("2024W183T100000Z", datetime.datetime(2024, 5, 1, 10, tzinfo=UTC)),
    ("2024-W18T10:00:00Z", datetime.datetime(2024, 4, 29, 10, tzinfo=UTC)),  # the Monday
    ("2020-W53-7", datetime.datetime(2021, 1, 3)),
    # Without an offset: read, and naive (parse_event_time then asks for a timezone).
    ("2024-05-01", datetime.datetime(2024, 5, 1)),
    ("20240501", datetime.datetime(2024, 5, 1)),
    ("2024-05-01T10:00", datetime.datetime(2024, 5, 1, 10)),
    ("9999-12-31T23:59:59.999999+00:00",
     datetime.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)),
])
def test_iso8601_reads_what_fromisoformat_reads_from_3_11_on(text, expected):
    parsed = parse_iso8601(text)
    assert parsed == expected
    assert parsed.utcoffset() == expected.utcoffset()
    if FROMISOFORMAT_READS_ISO_8601:
        reference = datetime.datetime.fromisoformat(text)
        assert (parsed, parsed.utcoffset()) == (reference, reference.utcoffset())


@pytest.mark.parametrize("text", [
    "soon", "", " 2024-05-01T10:00:00Z", "2024-05-01T10:00:00Z ", "2024-05-01T10:00:00z",
    "2024-5-01T10:00:00Z", "2024-05-01T1:00:00Z", "2024-05-01T10:0000Z",
    "2024-05-01T10:00:00+05:3", "2024-05-01T10:00:00+00:00Z", "2024-05-01T10:00:00Z+00:00",
    "2024-122T10:00:00Z",  # an ordinal date
    "2024-W18-8", "+2024-05-01T10:00:00Z", "\u0662\u0660\u0662\u0664-05-01T10:00:00Z",
    "2024-05-01T10:00:00\u221205:00",  # a minus sign, not a hyphen
    # Quirks 3.11's fromisoformat accepts and ISO-8601 does not: any character between date
    # and time, an empty fraction, a fraction of the minutes read as one of the seconds, a
    # space before the offset, a fraction of an offset's minutes.
    "2024-05-01x10:00:00Z", "2024-05-01T10:00:00.Z", "2024-05-01T10:00.5Z",
    "2024-05-01T10:00:00 Z", "2024-05-01T10:00:00+01:00.5",
])
def test_iso8601_rejects_what_is_not_in_its_grammar(text):
    with pytest.raises(ValueError, match="is not an ISO-8601 date-time"):
        parse_iso8601(text)


@pytest.mark.parametrize("text, reason", [
    ("2024-02-30T10:00:00Z", "day is out of range for month"),
    ("2024-05-01T24:00:00Z", "hour must be in 0..23"),
    ("2024-05-01T23:59:60Z", "second must be in 0..59"),
    ("2024-W53-1T00:00:00Z", "Invalid week: 53"),  # 2024 has 52 ISO weeks
    ("2024-05-01T10:00:00+24:00", "hour must be in 0..23"),
])
def test_iso8601_says_which_part_names_no_date_time(text, reason):
    with pytest.raises(InvalidDateTime) as raised:
        parse_iso8601(text)
    assert str(raised.value) == f"{text!r} is not a valid date-time: {reason}"
    with pytest.raises(ValueError) as raised:
        parse_event_time(text, "ts")
    assert str(raised.value) == f"field 'ts': event time {text!r} is not a valid date-time: {reason}"
