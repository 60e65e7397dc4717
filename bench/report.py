"""Benchmark results: one record per (workload, engine) run, ratios, a table and JSON lines.

A record is a plain dict (so it goes to JSON as it is) with at least ``workload``,
``engine``, ``status`` (``ok``, ``unavailable``, ``failed``), ``events``, ``seconds``,
``events_per_second``, ``agrees`` and ``peak_mib``.

>>> rows = [{"workload": "global_sum", "engine": "spark", "status": "ok", "events": 10,
...          "seconds": 2.0, "events_per_second": 5.0, "agrees": True, "peak_mib": {}},
...         {"workload": "global_sum", "engine": "direct", "status": "ok", "events": 10,
...          "seconds": 4.0, "events_per_second": 2.5, "agrees": True, "peak_mib": {}}]
>>> ratios(rows)[0]["value"]
2.0
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

#: Where every benchmark writes its results (one JSON line per run), unless told otherwise.
RESULTS_DIR = Path(__file__).resolve().parent / "results"

def weighted_percentile(pairs: Iterable[Tuple[float, int]], fraction: float) -> Optional[float]:
    """The nearest-rank ``fraction`` quantile of values given as (value, weight) pairs: the
    smallest value with at least that fraction of the weight at or below it; None for none.

    >>> weighted_percentile([(10.0, 3), (20.0, 1)], 0.5), weighted_percentile([], 0.5)
    (10.0, None)
    """
    ordered = sorted(pairs)
    total = sum(weight for _, weight in ordered)
    if not total:
        return None
    running = 0
    for value, weight in ordered:
        running += weight
        if running >= fraction * total:
            return value
    return ordered[-1][0]


def percentile(values: Sequence[float], fraction: float) -> Optional[float]:
    """The nearest-rank ``fraction`` quantile of ``values`` (each weighs one).

    >>> percentile([5, 1, 4, 2, 3], 0.5)
    3
    """
    return weighted_percentile(((value, 1) for value in values), fraction)


#: The goal for a streaming run's batch times: no batch slower than this many times the p50.
MAX_OVER_P50_GOAL = 2.0


def batch_time_spread(millis: Sequence[float], first_batch: int = 1) -> Dict[str, Any]:
    """p50, p99 and max of a run's batch times, and max / p50 against
    :data:`MAX_OVER_P50_GOAL`.

    Percentiles are nearest-rank (:func:`percentile`): the smallest time with at least that
    fraction of the batches at or below it, always a measured time. With fewer than 100
    batches the p99 is therefore the max. ``max_batch`` is the batch number of the
    slowest batch (``millis[0]`` is batch ``first_batch``; the first of them on ties);
    ``max_over_p50`` is rounded to two places, ``within_goal`` is computed unrounded.

    >>> spread = batch_time_spread([100, 110, 120, 400])
    >>> spread["p50"], spread["p99"], spread["max"], spread["max_batch"]
    (110, 400, 400, 4)
    >>> spread["max_over_p50"], spread["within_goal"]
    (3.64, False)
    >>> batch_time_spread([100, 120, 200], first_batch=0)["within_goal"]
    True
    """
    if not millis:
        raise ValueError("no batch times")
    p50, slowest = percentile(millis, 0.5), max(millis)
    return {"p50": p50, "p99": percentile(millis, 0.99), "max": slowest,
            "max_batch": first_batch + list(millis).index(slowest),
            "max_over_p50": round(slowest / p50, 2),
            "within_goal": slowest <= MAX_OVER_P50_GOAL * p50}


#: Engine keys as the command line names them, and how the table names them.
ENGINE_LABELS = {
    "spark": "Beam on SparkRunner",
    "connect": "Beam on SparkRunner, Spark Connect",
    "pyspark": "hand-written PySpark",
    "dataframe": "hand-written DataFrame",
    "direct": "Beam on DirectRunner",
    "python": "plain Python loop",
}
#: (numerator, denominator): throughput ratios worth printing.
RATIOS = (("spark", "direct"), ("spark", "pyspark"), ("spark", "dataframe"),
          ("pyspark", "direct"), ("connect", "spark"))


def ratios(records: Iterable[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Throughput ratios (events/s of one engine over another's) per workload.

    Above 1 means the first engine is faster.
    """
    by_workload: Dict[str, Dict[str, float]] = {}
    for record in records:
        if record["status"] == "ok" and record.get("events_per_second"):
            by_workload.setdefault(record["workload"], {})[record["engine"]] = (
                record["events_per_second"]
            )
    found = []
    for workload, speeds in by_workload.items():
        for numerator, denominator in RATIOS:
            if numerator in speeds and denominator in speeds:
                found.append({
                    "kind": "ratio",
                    "workload": workload,
                    "ratio": f"{numerator}/{denominator}",
                    "value": round(speeds[numerator] / speeds[denominator], 3),
                })
    return found


def _number(value: Optional[float], digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def format_table(records: List[Dict[str, Any]]) -> str:
    """The records as a fixed-width text table, then the ratios."""
    header = ("workload", "engine", "events", "seconds", "events/s", "driver MiB",
              "JVM MiB", "py workers MiB", "same answer")
    rows = [header]
    for record in records:
        peak = record.get("peak_mib") or {}
        if record["status"] != "ok":
            rows.append((record["workload"], ENGINE_LABELS.get(record["engine"], record["engine"]),
                         _number(record.get("events")), record["status"], "-", "-", "-", "-", "-"))
            continue
        rows.append((
            record["workload"],
            ENGINE_LABELS.get(record["engine"], record["engine"]),
            _number(record["events"]),
            _number(record["seconds"], 2),
            _number(record["events_per_second"]),
            _number(peak.get("driver")),
            _number(peak.get("jvm")),
            _number(peak.get("python_workers")),
            "yes" if record["agrees"] else "NO",
        ))
    widths = [max(len(str(row[column])) for row in rows) for column in range(len(header))]
    lines = ["  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)) for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    for record in records:
        if record["status"] != "ok" and record.get("note"):
            lines.append(f"{record['workload']} / {record['engine']}: {record['status']}: "
                         f"{record['note']}")
    found = ratios(records)
    if found:
        lines.append("")
        lines.append("throughput ratios (events/s over events/s; above 1: the first is faster)")
        for ratio in found:
            lines.append(f"  {ratio['workload']:<20} {ratio['ratio']:<16} {ratio['value']:.3f}")
    return "\n".join(lines)


def write_jsonl(path: Path, records: Iterable[Dict[str, Any]]) -> Path:
    """Append ``records`` to ``path`` as JSON lines (directories created as needed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as output:
        for record in records:
            output.write(json.dumps(record, sort_keys=True) + "\n")
    return path
