"""Metrics of a pipeline run on Spark: collected per bundle, merged on the driver.

Every bundle reports Beam ``MonitoringInfo`` protos (user counters, distributions, gauges,
string sets, plus system metrics such as element counts). A task merges those of its
bundles and adds them, serialized, to a Spark accumulator; Spark merges the updates of
successful tasks on the driver, where :class:`SparkMetrics` consolidates them per metric
and transform and answers ``PipelineResult.metrics().query(...)`` as Beam's runners do.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional

from apache_beam.metrics.metric import MetricResults
from pyspark.accumulators import AccumulatorParam

from runners.spark.beam_internals import (
    MetricResult,
    metrics_pb2,
    monitoring_infos,
    portable_metrics,
)


def pack(infos: Iterable[Any]) -> List[bytes]:
    """Consolidate MonitoringInfos and serialize them for the accumulator."""
    return [info.SerializeToString() for info in monitoring_infos.consolidate(infos)]


def unpack(packed: Iterable[bytes]) -> List[Any]:
    """Consolidated MonitoringInfos from serialized ones (of any number of tasks)."""
    return list(monitoring_infos.consolidate(
        metrics_pb2.MonitoringInfo.FromString(data) for data in packed))


class MonitoringInfoAccumulator(AccumulatorParam):
    """Accumulates serialized MonitoringInfos; merged into one list per run on the driver."""

    def zero(self, value: List[bytes]) -> List[bytes]:
        return []

    def addInPlace(self, value1: List[bytes], value2: List[bytes]) -> List[bytes]:
        value1.extend(value2)
        # Keep the driver-side list short: consolidate once it grows.
        if len(value1) > 4096:
            value1[:] = pack(unpack(value1))
        return value1


class SparkMetrics(MetricResults):
    """Committed metrics of a finished (or failed) run: successful tasks only.

    >>> SparkMetrics([]).query()["counters"]
    []
    """

    def __init__(self, infos: Iterable[Any], user_metrics_only: bool = True) -> None:
        self._infos = list(infos)
        (self._counters, self._distributions, self._gauges, self._string_sets,
         self._bounded_tries) = portable_metrics.from_monitoring_infos(
             self._infos, user_metrics_only)

    def query(self, filter: Optional[Any] = None) -> Dict[str, List[MetricResult]]:
        def results(table):
            return [MetricResult(key, value, value) for key, value in table.items()
                    if self.matches(filter, key)]

        return {
            self.COUNTERS: results(self._counters),
            self.DISTRIBUTIONS: results(self._distributions),
            self.GAUGES: results(self._gauges),
            self.STRINGSETS: results(self._string_sets),
            self.BOUNDED_TRIES: results(self._bounded_tries),
        }

    def monitoring_infos(self) -> List[Any]:
        return list(self._infos)
