"""Shuffles: GroupByKey with GroupAlsoByWindow, Reshuffle, and key partitioning.

Keys are compared as Beam compares them, by their deterministic encoding, and placed by
``zlib.crc32`` of those bytes (never Python's ``hash()``, which is salted per process and
would send one key to different partitions from different workers).

GroupByKey runs as ``fn_api_runner.execution.GroupingBuffer`` does, but distributed: the
map side keys each element by its encoded key, Spark's ``groupByKey`` brings each key's
elements together, and the reduce side hands them to Beam's trigger driver
(``process_entire_key``), which assigns them to (merged) windows and emits the panes a
bounded input produces; default windowing takes the single global ON_TIME pane directly.
"""

from __future__ import annotations

import functools
import zlib
from typing import Any, Iterable, Iterator, List, Tuple

from apache_beam.transforms.window import GlobalWindow, GlobalWindows
from apache_beam.utils import windowed_value

from runners.spark.beam_internals import create_trigger_driver
from runners.spark.components import SharedComponents, encode_chunks, iter_encoded, join_chunks
from runners.spark.planning import GroupSpec, InputSpec


def key_partition(encoded_key: bytes) -> int:
    """The partition hash of an encoded key: stable across processes and runs."""
    return zlib.crc32(encoded_key)


def group_by_key(
    chunks: Any, spec: GroupSpec, components: SharedComponents, partitions: int
) -> Any:
    """An RDD of encoded ``(key, values)`` panes from an RDD of encoded ``(key, value)`` chunks."""
    keyed = chunks.mapPartitions(functools.partial(_key_elements, spec.input_coder_id, components))
    grouped = keyed.groupByKey(partitions, partitionFunc=key_partition)
    return grouped.mapPartitions(functools.partial(_group_also_by_window, spec, components))


def _key_elements(coder_id: str, components: SharedComponents, chunks: Iterable[bytes]):
    coder_impl = components.coder_impl(coder_id)
    key_impl = components.coder(coder_id).key_coder().get_impl()
    for chunk in chunks:
        for element, encoded in iter_encoded(coder_impl, chunk):
            yield key_impl.encode(element.value[0]), encoded


_ON_TIME_GLOBAL_PANE = windowed_value.PaneInfo(
    is_first=True, is_last=True, timing=windowed_value.PaneInfoTiming.ON_TIME, index=0,
    nonspeculative_index=0)


def _group_also_by_window(spec: GroupSpec, components: SharedComponents,
                          groups: Iterable[Tuple[bytes, Iterable[bytes]]]) -> Iterator[bytes]:
    input_impl = components.coder_impl(spec.input_coder_id)
    output_impl = components.coder_impl(spec.output_coder_id)
    windowing = components.windowing(spec.windowing_strategy_id)

    if windowing.is_default():
        def panes(key, elements):
            values = [element.value[1] for element in elements]
            yield GlobalWindows.windowed_value(
                (key, values), timestamp=GlobalWindow().max_timestamp(),
                pane_info=_ON_TIME_GLOBAL_PANE)
    else:
        driver = create_trigger_driver(windowing, True)

        def panes(key, elements):
            return driver.process_entire_key(
                key, [element.with_value(element.value[1]) for element in elements])

    def all_panes():
        for _, encoded_elements in groups:
            elements = [element for chunk in encoded_elements
                        for element, _ in iter_encoded(input_impl, chunk)]
            yield from panes(elements[0].value[0], elements)

    return encode_chunks(output_impl, all_panes())


def reshuffle(chunks: Any, input_coder_id: str, output_coder_id: str,
              components: SharedComponents, partitions: int) -> Any:
    """Redistribute elements evenly over ``partitions`` (windows, timestamps, panes kept).

    Elements are dealt round-robin, each input partition starting at its own index; Spark's
    ``repartition`` would move pickled batches of elements, leaving small inputs unspread.
    """
    dealt = chunks.mapPartitionsWithIndex(
        functools.partial(_deal_elements, input_coder_id, output_coder_id, components))
    return dealt.partitionBy(partitions, _identity).values().mapPartitions(join_chunks)


def _identity(number: int) -> int:
    return number


def _deal_elements(input_coder_id: str, output_coder_id: str, components: SharedComponents,
                   partition: int, chunks: Iterable[bytes]) -> Iterator[Tuple[int, bytes]]:
    input_impl = components.coder_impl(input_coder_id)
    output_impl = (
        None if output_coder_id == input_coder_id else components.coder_impl(output_coder_id))
    position = partition
    for chunk in chunks:
        for element, encoded in iter_encoded(input_impl, chunk):
            yield position, encoded if output_impl is None else output_impl.encode_nested(element)
            position += 1


def partition_by_key(sources: List[Tuple[int, InputSpec, Any]], components: SharedComponents,
                     partitions: int, spark_context: Any) -> Any:
    """(input index, encoded element) records of a stateful stage, each key in one partition.

    Args:
      sources: (input index, input spec, RDD of chunks) for every input of the stage.
    """
    keyed = [
        rdd.mapPartitions(functools.partial(_key_tagged, index, spec.coder_id, components))
        for index, spec, rdd in sources
    ]
    union = keyed[0] if len(keyed) == 1 else spark_context.union(keyed)
    return union.partitionBy(partitions, key_partition).values()


def _key_tagged(index: int, coder_id: str, components: SharedComponents, chunks: Iterable[bytes]):
    for key, encoded in _key_elements(coder_id, components, chunks):
        yield key, (index, encoded)
