"""Many jobs in one process: every job's result is its own, never another job's.

A notebook, a test session or a job server runs pipeline after pipeline in one process, on
one Spark whose Python workers live on. Jobs of one shape with different data have stages of
the very same code; whatever a worker keeps between tasks (a pooled processor, its DoFns,
the side-input values Beam's invoker holds) must not carry one job's data into the next.
Before it was so (processors pooled by their code alone), this test saw the other data set
in 25 to 34 of its 50 jobs, on classic Spark and on Connect alike, and ``Create(data) |
CombineGlobally(sum)`` gave one job in three or more another job's sum (Beam's
``ApproximateQuantilesTest`` got another test's quantiles).
"""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter

#: The jobs each runner runs, alternating the two data sets.
JOBS = 50
#: Two data sets of one shape: one job's side inputs and total must never show in the next.
DATA_SETS = ([3, 1, 4, 1, 5], [90, 20, 60])

_NAMESPACE = "job_isolation"
_SEEN = Metrics.distribution(_NAMESPACE, "seen")
_TOTAL = Metrics.counter(_NAMESPACE, "total")


def _record(unused_element, numbers, total):
    """What the job's side inputs hold, as metrics of the job."""
    for number in numbers:
        _SEEN.update(number)
    _TOTAL.inc(total)


def _run_job(pipeline, numbers):
    """One job: a stage of the same code in every job (a Map reading side inputs in the
    global window, as ``CombineGlobally`` injects its default) reads the numbers and their
    sum. Returns ``(sum, count, min, max)`` of the numbers it saw, and the sum it saw."""
    created = pipeline | "Numbers" >> beam.Create(numbers, reshuffle=False)
    total = pipeline | "Total" >> beam.Create([sum(numbers)])
    _ = (pipeline | "Once" >> beam.Impulse()
         | "Record" >> beam.Map(_record, beam.pvalue.AsList(created),
                                beam.pvalue.AsSingleton(total)))
    result = pipeline.run()
    result.wait_until_finish()
    queried = result.metrics().query(MetricsFilter().with_namespace(_NAMESPACE))
    seen = [(found.committed.sum, found.committed.count, found.committed.min,
             found.committed.max) for found in queried["distributions"]]
    totals = [found.committed for found in queried["counters"]]
    return seen, totals


# The DirectRunner runs each job in SDK workers of its own: what could leak is the Spark
# runner's, whose Python workers outlive jobs.
@pytest.mark.parametrize("runner_name", ["SparkRunner", "SparkConnect"], indirect=True)
def test_jobs_of_one_shape_in_one_process_each_get_their_own_result(make_pipeline):
    wrong = []
    for job in range(JOBS):
        numbers = DATA_SETS[job % 2]
        expected = ([(sum(numbers), len(numbers), min(numbers), max(numbers))],
                    [sum(numbers)])
        got = _run_job(make_pipeline(), numbers)
        if got != expected:
            wrong.append((job, numbers, got))
    assert not wrong, f"{len(wrong)} of {JOBS} jobs got another job's result: {wrong[:4]}"
