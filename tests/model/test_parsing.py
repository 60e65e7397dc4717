"""Edge adaptation: typed events or dead letters, nothing dropped, counters that add up."""

from __future__ import annotations

import collections
import typing
from typing import List, Optional, Tuple

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import window
from apache_beam.utils.timestamp import Timestamp

from transforms.parsing import METRICS_NAMESPACE, DeadLetter, ParseCsv, ParseJson


class Play(typing.NamedTuple):
    user: str
    score: int
    weight: float
    bonus: bool
    team: Optional[str]
    timestamp: float


class Reading(typing.NamedTuple):
    """An event type without its timestamp field, and with a default."""

    sensor: str
    value: float
    unit: str = "C"


MAY_1_10H_UTC = 1714557600  # 2024-05-01T10:00:00Z


def _stamped(parsed):
    return parsed | "Stamped" >> beam.Map(lambda event, t=beam.DoFn.TimestampParam: (event, t))


def _dead_letters_match(expected: List[Tuple[str, str]], source: str):
    """Each rejected raw record once, its reason containing the expected text."""

    def match(actual):
        assert all(isinstance(letter, DeadLetter) for letter in actual), actual
        assert sorted(letter.raw for letter in actual) == sorted(raw for raw, _ in expected), (
            actual)
        reasons = {letter.raw: letter.reason for letter in actual}
        for raw, reason in expected:
            assert reason in reasons[raw], f"{raw!r}: {reason!r} not in {reasons[raw]!r}"
        assert {letter.source for letter in actual} == {source}, actual

    return match


def _counters(result) -> dict:
    """The parse counters, summed over steps (committed where the runner has them)."""
    counters = result.metrics().query(
        MetricsFilter().with_namespace(METRICS_NAMESPACE))["counters"]
    totals = collections.Counter()
    for counter in counters:
        totals[counter.key.metric.name] += counter.result
    return dict(totals)


def _run_parse(make_pipeline, parse, records, expected_events, expected_rejections, source):
    """Parse ``records``; check outputs, timestamps, dead letters and the counters."""
    pipeline = make_pipeline()
    result = pipeline | beam.Create(records) | parse
    assert_that(_stamped(result.parsed), equal_to(expected_events), label="parsed")
    assert_that(result.dead_letter, _dead_letters_match(expected_rejections, source),
                label="dead_letter")
    outcome = pipeline.run()
    outcome.wait_until_finish()
    counters = _counters(outcome)
    assert counters == {"parsed": len(expected_events), "rejected": len(expected_rejections)}
    # Nothing dropped: every input is exactly one of the two.
    assert counters["parsed"] + counters["rejected"] == len(records)


# --- JSON ---

GOOD_JSON = [
    ('{"user": "ann", "score": 3, "weight": 1, "bonus": true, "team": "red", "timestamp": 10}',
     Play("ann", 3, 1.0, True, "red", 10.0), 10),
    ('{"timestamp": 12.5, "user": "bob", "score": -2, "weight": 0.5, "bonus": 0, "team": null}',
     Play("bob", -2, 0.5, False, None, 12.5), 12.5),
    ('{"user": "\u00e8ve", "score": 0, "weight": 2e1, "bonus": 1, "team": "b", '
     '"timestamp": 1714557600}'.encode("utf-8"),
     Play("\u00e8ve", 0, 20.0, True, "b", 1714557600.0), MAY_1_10H_UTC),
]


def _play(**changes) -> str:
    fields = {"user": '"ann"', "score": "3", "weight": "1.5", "bonus": "true",
              "team": '"red"', "timestamp": "10"}
    fields.update(changes)
    return "{" + ", ".join(f'"{k}": {v}' for k, v in fields.items() if v is not None) + "}"


BAD_JSON = [
    ('{"user": "ann"', "malformed JSON: Expecting ',' delimiter"),
    ("", "malformed JSON: Expecting value: line 1 column 1 (char 0)"),
    ("[1, 2]", "not a JSON object: got list"),
    ('"ann"', "not a JSON object: got str"),
    (_play(score=None), "missing field 'score'"),
    (_play(timestamp=None), "missing field 'timestamp'"),
    (_play(level="3", rank="1"), "unexpected field(s) 'level', 'rank': not in Play"),
    (_play(score='"3"'), "field 'score': expected int, got '3'"),
    (_play(score="3.5"), "field 'score': expected int, got 3.5"),
    (_play(score="true"), "field 'score': expected int, got True"),
    (_play(weight='"1.5"'), "field 'weight': expected float, got '1.5'"),
    (_play(weight="NaN"), "malformed JSON: NaN is not valid JSON"),
    (_play(weight="1e400"), "field 'weight': inf is not a finite number"),
    (_play(bonus='"yes"'), "field 'bonus': expected bool (true/false/1/0), got 'yes'"),
    (_play(bonus="2"), "field 'bonus': expected bool (true/false/1/0), got 2"),
    (_play(user="7"), "field 'user': expected str, got 7"),
    (_play(user="null"), "field 'user': expected str, got None"),
    (_play(team="{}"), "field 'team': expected str or null, got {}"),
    ('{"user": "a", "user": "b"}', "duplicate field 'user'"),
    (_play(timestamp="-1"), "field 'timestamp': event time -1.0 is out of range: it must be "
                            "at or after 1970-01-01T00:00:00Z and before "
                            "10000-01-01T00:00:00Z"),
    (_play(timestamp="253402300800"), "field 'timestamp': event time 253402300800.0 is out "
                                      "of range"),
    (_play(timestamp="1e300"), "field 'timestamp': event time 1e+300 is out of range"),
    (_play(timestamp='"10"'), "field 'timestamp': expected float, got '10'"),
]


def test_parse_json_typed_events_and_every_kind_of_bad_record(make_pipeline):
    records = [raw for raw, _, _ in GOOD_JSON] + [raw for raw, _ in BAD_JSON]
    records += [b"\xff{}", 42]
    rejections = BAD_JSON + [
        ("\\xff{}", "not valid UTF-8: 'utf-8' codec can't decode byte 0xff in position 0"),
        ("42", "expected a str or bytes record, got int"),
    ]
    _run_parse(
        make_pipeline,
        ParseJson(Play),
        records,
        [(event, Timestamp(seconds)) for _, event, seconds in GOOD_JSON],
        rejections,
        "ParseJson[Play]",
    )


def test_parse_json_iso_timestamps_defaults_and_extra_fields(make_pipeline):
    good = [
        '{"sensor": "s1", "value": 21, "timestamp": "2024-05-01T12:00:00+02:00"}',
        '{"sensor": "s2", "value": 1.5, "unit": "F", "timestamp": "2024-05-01T10:00:00Z"}',
        '{"sensor": "s3", "value": 0, "timestamp": 1714557600, "color": "blue"}',
    ]
    bad = [
        ('{"sensor": "s1", "value": 1, "timestamp": "2024-05-01T12:00:00"}',
         "field 'timestamp': event time '2024-05-01T12:00:00' has no timezone"),
        ('{"sensor": "s1", "value": 1, "timestamp": "1e999"}',
         "field 'timestamp': event time '1e999' is not a finite number"),
        ('{"sensor": "s1", "value": 1, "timestamp": true}',
         "field 'timestamp': event time must be seconds or ISO-8601, got True"),
        ('{"sensor": "s1", "timestamp": 5}', "missing field 'value'"),
    ]
    _run_parse(
        make_pipeline,
        ParseJson(Reading, ignore_extra_fields=True, source="sensors-topic"),
        good + [raw for raw, _ in bad],
        [(Reading("s1", 21.0), Timestamp(MAY_1_10H_UTC)),
         (Reading("s2", 1.5, "F"), Timestamp(MAY_1_10H_UTC)),
         (Reading("s3", 0.0), Timestamp(MAY_1_10H_UTC))],
        bad,
        "sensors-topic",
    )


class Score(typing.NamedTuple):
    user: str
    points: int


def test_parse_json_without_timestamp_field_keeps_input_timestamps(make_pipeline):
    records = [window.TimestampedValue('{"user": "ann", "points": 3}', 99),
               window.TimestampedValue('{"user": "bob", "points": 1, "timestamp": 5}', 7)]
    with make_pipeline() as p:
        result = p | beam.Create(records) | ParseJson(Score, timestamp_field=None)
        assert_that(_stamped(result.parsed), equal_to([(Score("ann", 3), Timestamp(99))]),
                    label="parsed")
        assert_that(
            result.dead_letter | beam.Map(lambda letter, t=beam.DoFn.TimestampParam:
                                          (letter.reason, t)),
            equal_to([("unexpected field(s) 'timestamp': not in Score", Timestamp(7))]),
            label="dead_letter")


# --- CSV ---

GOOD_CSV = [
    ("ann,3,1,true,red,10", Play("ann", 3, 1.0, True, "red", 10.0), 10),
    ('"Smith, Jo",7,2.5,FALSE,,11', Play("Smith, Jo", 7, 2.5, False, None, 11.0), 11),
    ('bob, 12 ,0.5e1,1,"blue, dark",12.25', Play("bob", 12, 5.0, True, "blue, dark", 12.25),
     12.25),
    ('"say ""hi""",-4,.5,0,x,1714557600', Play('say "hi"', -4, 0.5, False, "x", 1714557600.0),
     MAY_1_10H_UTC),
]

SIX_COLUMNS = "expected 6 columns (user, score, weight, bonus, team, timestamp)"
BAD_CSV = [
    ("ann,12abc,1,true,red,10", "field 'score': expected int, got '12abc'"),
    ("ann,1_000,1,true,red,10", "field 'score': expected int, got '1_000'"),
    ("ann,3.0,1,true,red,10", "field 'score': expected int, got '3.0'"),
    ("ann,3,abc,true,red,10", "field 'weight': expected float, got 'abc'"),
    ("ann,3,nan,true,red,10", "field 'weight': expected float, got 'nan'"),
    ("ann,3,1e999,true,red,10", "field 'weight': '1e999' is not a finite number"),
    ("ann,3,1,yes,red,10", "field 'bonus': expected bool (true/false/1/0), got 'yes'"),
    ("ann,3,1,true,red", f"malformed CSV: {SIX_COLUMNS}, got 5"),
    ("ann,3,1,true,red,10,extra", f"malformed CSV: {SIX_COLUMNS}, got 7"),
    ("", f"malformed CSV: {SIX_COLUMNS}, got 0"),
    ('"ann,3,1,true,red,10', "malformed CSV: unexpected end of data"),
    ("ann,3,1,true,red,10\nbob,1,1,true,red,10", "malformed CSV: new-line character seen"),
    ("ann,3,1,true,red,-5", "field 'timestamp': event time -5.0 is out of range"),
    ("ann,3,1,true,red,", "field 'timestamp': expected float, got ''"),
]


def test_parse_csv_quoting_types_and_every_kind_of_bad_record(make_pipeline):
    _run_parse(
        make_pipeline,
        ParseCsv(Play),
        [raw for raw, _, _ in GOOD_CSV] + [raw for raw, _ in BAD_CSV],
        [(event, Timestamp(seconds)) for _, event, seconds in GOOD_CSV],
        BAD_CSV,
        "ParseCsv[Play]",
    )


def test_parse_csv_with_named_columns_and_a_delimiter(make_pipeline):
    bad = [("2024-05-01T10:00:00;s1;2", "field 'timestamp': event time "
                                        "'2024-05-01T10:00:00' has no timezone"),
           ("1714557600;s1;warm", "field 'value': expected float, got 'warm'")]
    _run_parse(
        make_pipeline,
        ParseCsv(Reading, columns=["timestamp", "sensor", "value"], delimiter=";"),
        ["2024-05-01T10:00:00Z;s1;21.5", "1714557600;s2;-3"] + [raw for raw, _ in bad],
        [(Reading("s1", 21.5), Timestamp(MAY_1_10H_UTC)),
         (Reading("s2", -3.0), Timestamp(MAY_1_10H_UTC))],
        bad,
        "ParseCsv[Reading]",
    )


# --- Construction errors and the DeadLetter record. ---


class Listy(typing.NamedTuple):
    tags: list
    timestamp: float


class Flagged(typing.NamedTuple):
    timestamp: bool


@pytest.mark.parametrize(
    "make, error, message",
    [
        (lambda: ParseJson(dict), TypeError, "event_type must be a typing.NamedTuple class"),
        (lambda: ParseJson(Listy), TypeError,
         "Listy.tags is annotated <class 'list'>; supported field types are int, float, str, "
         "bool and Optional[...] of these"),
        (lambda: ParseJson(collections.namedtuple("Plain", "a b")), TypeError,
         "Plain.a has no type annotation"),
        (lambda: ParseJson(Flagged), TypeError,
         "Flagged.timestamp is the timestamp field but is annotated bool"),
        (lambda: ParseJson(Play, timestamp_field=""), TypeError,
         "timestamp_field must be a field name, or None"),
        (lambda: ParseCsv(Play, delimiter=";;"), ValueError, "delimiter must be one character"),
        (lambda: ParseCsv(Play, delimiter='"'), ValueError, "delimiter must be one character"),
        (lambda: ParseCsv(Play, columns=["user", "weight", "bonus", "team", "timestamp"]),
         ValueError, "lack ['score']"),
        (lambda: ParseCsv(Reading, columns=["sensor", "value"]), ValueError,
         "lack ['timestamp']"),
        (lambda: ParseCsv(Reading, columns=["sensor", "value", "timestamp", "room"]),
         ValueError, "columns ['room'] are not fields of Reading"),
        (lambda: ParseCsv(Reading, columns=["sensor", "value", "value", "timestamp"]),
         ValueError, "columns name ['value'] more than once"),
        (lambda: ParseCsv(Reading, columns=[]), ValueError, "columns must be a non-empty list"),
        (lambda: ParseCsv(Reading, columns="sensor,value,timestamp"), TypeError,
         "columns must be a list of field names, got the string"),
    ],
)
def test_invalid_arguments_are_rejected_at_construction(make, error, message):
    with pytest.raises(error) as raised:
        make()
    assert message in str(raised.value)


def test_extra_csv_columns_are_accepted_when_asked_for():
    ParseCsv(Reading, columns=["sensor", "value", "timestamp", "room"], ignore_extra_fields=True)


def test_dead_letter_is_json_serialisable():
    letter = DeadLetter('{"a": "\u00e9"', "malformed JSON: Expecting ',' delimiter", "ParseJson[X]")
    text = letter.to_json()
    assert text == ('{"raw": "{\\"a\\": \\"\\u00e9\\"", "reason": "malformed JSON: '
                    "Expecting ',' delimiter\", \"source\": \"ParseJson[X]\"}")
    assert DeadLetter.from_json(text) == letter
