"""Metrics of a pipeline run on Spark: collected per bundle, merged on the driver.

Every bundle reports Beam ``MonitoringInfo`` protos (user counters, distributions, gauges,
string sets, bounded tries, plus system metrics such as element counts). A task merges those
of its bundles and hands them, serialized, to its backend's metrics sink (classic Spark: an
accumulator; Spark Connect: a report record the run's job collects); the driver gathers the
updates of successful tasks, and :class:`SparkMetrics` consolidates them per metric and
transform and answers ``PipelineResult.metrics().query(...)`` as Beam's runners do.

Updates of one metric merge as Beam merges its cells (:func:`consolidate`): counters and
distributions add up, a gauge keeps its latest value, string sets and bounded tries take the
union. (Beam's own ``monitoring_infos.consolidate`` merges only the first two kinds and keeps
every update of the others, of which a query then shows one.)
"""

from __future__ import annotations

import collections
import functools
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional

from apache_beam.coders import IterableCoder, StrUtf8Coder
from apache_beam.metrics.metric import MetricResults

from runners.spark.beam_internals import (
    MetricResult,
    metrics_pb2,
    monitoring_infos,
    portable_metrics,
)


def _latest_gauge(first: Any, second: Any) -> bytes:
    # The payload is (time in ms, value), both var-ints; the later update wins, as in Beam.
    later = max((first, second), key=lambda info: monitoring_infos.extract_gauge_value(info)[0])
    return later.payload


def _string_set_union(first: Any, second: Any) -> bytes:
    union = (monitoring_infos.extract_string_set_value(first)
             | monitoring_infos.extract_string_set_value(second))
    return IterableCoder(StrUtf8Coder()).encode(sorted(union))


def _bounded_trie_union(first: Any, second: Any) -> bytes:
    combined = monitoring_infos.extract_bounded_trie_value(first).combine(
        monitoring_infos.extract_bounded_trie_value(second))
    return combined.to_proto().SerializeToString()


def _histogram_sum(first: Any, second: Any) -> bytes:
    combined = monitoring_infos.extract_histogram_value(first).combine(
        monitoring_infos.extract_histogram_value(second))
    return combined.to_proto().SerializeToString()


def _payloads(combine: Callable[[bytes, bytes], bytes]) -> Callable[[Any, Any], bytes]:
    return lambda first, second: combine(first.payload, second.payload)


#: Type URN -> how two updates of one metric become one payload.
_MERGES: Dict[str, Callable[[Any, Any], bytes]] = {
    monitoring_infos.SUM_INT64_TYPE: _payloads(monitoring_infos.sum_payload_combiner),
    monitoring_infos.DISTRIBUTION_INT64_TYPE:
        _payloads(monitoring_infos.distribution_payload_combiner),
    monitoring_infos.LATEST_INT64_TYPE: _latest_gauge,
    monitoring_infos.STRING_SET_TYPE: _string_set_union,
    monitoring_infos.BOUNDED_TRIE_TYPE: _bounded_trie_union,
    monitoring_infos.HISTOGRAM_TYPE: _histogram_sum,
}


def consolidate(infos: Iterable[Any]) -> Iterator[Any]:
    """One MonitoringInfo per metric and transform, merging the updates of each.

    >>> from apache_beam.metrics.cells import StringSetData
    >>> def names(*strings):
    ...     return monitoring_infos.user_set_string("n", "names", StringSetData(set(strings)))
    >>> [merged] = consolidate([names("a"), names("b", "c")])
    >>> sorted(monitoring_infos.extract_string_set_value(merged))
    ['a', 'b', 'c']
    """
    grouped: Dict[Any, List[Any]] = collections.defaultdict(list)
    for info in infos:
        grouped[monitoring_infos.to_key(info)].append(info)
    for updates in grouped.values():
        merge = _MERGES.get(updates[0].type)
        if len(updates) == 1 or merge is None:
            yield updates[-1]  # a kind Beam does not merge either: its latest update
            continue
        yield functools.reduce(
            lambda first, second: metrics_pb2.MonitoringInfo(
                urn=first.urn, type=first.type, labels=first.labels,
                payload=merge(first, second)),
            updates)


def pack(infos: Iterable[Any]) -> List[bytes]:
    """Consolidate MonitoringInfos and serialize them for the accumulator."""
    return [info.SerializeToString() for info in consolidate(infos)]


def unpack(packed: Iterable[bytes]) -> List[Any]:
    """Consolidated MonitoringInfos from serialized ones (of any number of tasks)."""
    return list(consolidate(metrics_pb2.MonitoringInfo.FromString(data) for data in packed))


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
