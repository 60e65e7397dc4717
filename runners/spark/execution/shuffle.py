"""Shuffles: key partitioning for keyed steps, GroupByKey in batch, and Reshuffle.

Keys are compared as Beam compares them, by their deterministic encoding, and placed by
``zlib.crc32`` of those bytes (never Python's ``hash()``, which is salted per process and
would send one key to different partitions from different workers).

Key partitioning (a stateful stage's input, and every streaming keyed step) packs elements
on the map side per target partition (:class:`~runners.spark.worker.records.KeyedPacker`), so the
shuffle moves a few large records instead of one per element.

GroupByKey in batch runs as ``fn_api_runner.execution.GroupingBuffer`` does, but distributed:
the map side keys each element by its encoded key, the backend's ``group_by_key`` (Spark's
shuffle, which spills large groups to disk) brings each key's elements together, and the
reduce side hands them to
Beam's trigger driver (``process_entire_key``), which assigns them to (merged) windows and
emits the panes a bounded input produces. When that pane is known without the driver
(:func:`direct_pane_info`: default windowing, or a non-merging WindowFn under the default
trigger with end-of-window timestamps: one on-time pane per key and window), the elements'
timestamps are not needed: the map side gathers each key's *values* per window, encodes them
together as one iterable per key, window and flush (:func:`_value_chunks`), and the reduce
side decodes a group's few chunks straight into its pane: one decode and one encode per
value on each side, no per-element record through Spark's shuffle. Reports the GroupByKey
receives (a task's metrics, where the backend gathers them so) go through the shuffle under
their own group, :data:`REPORTS_GROUP`, and come out after the panes.

Every function here works on the backend's datasets (:mod:`runners.spark.backends`).
"""

from __future__ import annotations

import functools
import heapq
import pickle
import zlib
from typing import Any, Iterable, Iterator, List, Sequence, Tuple

from apache_beam.coders import coders
from apache_beam.transforms.trigger import DefaultTrigger
from apache_beam.transforms.window import TimestampCombiner
from apache_beam.utils import windowed_value

from runners.spark.backends.base import Dataset
from runners.spark.beam_internals import create_trigger_driver
from runners.spark.planning.execution_plan import GroupSpec
from runners.spark.worker.components import (
    SharedComponents,
    encode_chunks,
    iter_encoded,
    join_chunks,
)
from runners.spark.worker.records import Elements, KeyedElements, KeyedPacker, unpack_keyed


def key_partition(encoded_key: bytes) -> int:
    """The partition hash of an encoded key: stable across processes and runs."""
    return zlib.crc32(encoded_key)


def partition_of(encoded_key: bytes, partitions: int) -> int:
    """The key partition (of ``partitions``) an encoded key belongs to.

    >>> partition_of(b"team-a", 2) == zlib.crc32(b"team-a") % 2
    True
    """
    return zlib.crc32(encoded_key) % partitions


# ----- key partitioning
def partition_by_key(records: Dataset, coder_ids: Sequence[str], components: SharedComponents,
                     partitions: int, key_prefixed: bool = False) -> Dataset:
    """``Elements`` (on ports whose coders are ``coder_ids``) as :class:`KeyedElements`, each
    key in one of ``partitions`` partitions (partition i of the result holds key partition
    i); reports ride along to partition 0.

    Keys are encoded by the element coder's key coder; with ``key_prefixed`` (the SDK
    length-prefixes a key that coder reads as opaque bytes) in its nested form, so the
    bytes equal the SDK harness's own encoding of the key (its user state keys).
    """
    keyed = records.map_partitions(functools.partial(
        keyed_records, tuple(coder_ids), components, partitions, key_prefixed))
    return keyed.partition_by(partitions)


def keyed_records(coder_ids: Tuple[str, ...], components: SharedComponents, partitions: int,
                  key_prefixed: bool, records: Iterable[Any]) -> Iterator[Tuple[int, Any]]:
    """The map side of :func:`partition_by_key`: ``(key partition, record)`` pairs (reports
    to partition 0)."""
    coder_impls = [components.coder_impl(coder_id) for coder_id in coder_ids]
    key_impl = components.coder(coder_ids[0]).key_coder().get_impl()
    encode = key_impl.encode_nested if key_prefixed else key_impl.encode
    packer = KeyedPacker(partitions)
    reports: List[Any] = []
    for record in records:
        if type(record) is not Elements:
            reports.append(record)
            continue
        for element, encoded in iter_encoded(coder_impls[record.port], record.data):
            key = encode(element.value[0])
            packer.add(zlib.crc32(key) % partitions, record.port, key, encoded)
    yield from packer.records()
    for report in reports:
        yield 0, report


def without_keys(records: Iterable[Any]) -> Iterator[Any]:
    """:class:`KeyedElements` back to ``Elements`` (the SDK harness reads keys itself)."""
    for record in records:
        if type(record) is KeyedElements:
            yield Elements(record.port, b"".join(element for _, element in
                                                 unpack_keyed(record.data)))
        else:
            yield record


# ----- GroupByKey in batch
#: The group a GroupByKey's map side sends the reports it receives under (each pickled): no
#: group of elements has a key of this shape (a key's encoding, or a pair of key and window).
REPORTS_GROUP = (b"reports",)


def group_by_key(records: Dataset, spec: GroupSpec, components: SharedComponents,
                 partitions: int) -> Dataset:
    """``Elements`` of encoded ``(key, value)`` pairs -> ``Elements`` of ``(key, values)`` panes;
    reports pass through."""
    pane_info = direct_pane_info(components.windowing(spec.windowing_strategy_id))
    if pane_info is not None:
        chunks = records.map_partitions(functools.partial(_value_chunks, spec, components))
        grouped = chunks.group_by_key(partitions, _partition_of_group)
        return grouped.map_partitions(functools.partial(_direct_panes, spec, components,
                                                        pane_info))
    keyed = records.map_partitions(functools.partial(_key_elements, spec.input_coder_id,
                                                     components))
    grouped = keyed.group_by_key(partitions, _partition_of_group)
    return grouped.map_partitions(functools.partial(_group_also_by_window, spec, components))


def _partition_of_group(group: Any) -> int:
    """The partition hash of a group: its encoded key's (a group is an encoded key, or a
    tuple whose first item is one)."""
    return key_partition(group[0] if type(group) is tuple else group)


def _key_elements(coder_id: str, components: SharedComponents, records: Iterable[Any]):
    coder_impl = components.coder_impl(coder_id)
    key_impl = components.coder(coder_id).key_coder().get_impl()
    for record in records:
        if type(record) is Elements:
            for element, encoded in iter_encoded(coder_impl, record.data):
                yield key_impl.encode(element.value[0]), encoded
        else:
            yield REPORTS_GROUP, pickle.dumps(record)


def _reports_of(chunks: Iterable[bytes]) -> List[Any]:
    return [pickle.loads(chunk) for chunk in chunks]


_ON_TIME_GLOBAL_PANE = windowed_value.PaneInfo(
    is_first=True, is_last=True, timing=windowed_value.PaneInfoTiming.ON_TIME, index=0,
    nonspeculative_index=0)
#: What Beam's GeneralTriggerDriver emits in batch for the default trigger: the window's
#: end-of-window firing, not its last (the trigger repeats).
_ON_TIME_WINDOW_PANE = windowed_value.PaneInfo(
    is_first=True, is_last=False, timing=windowed_value.PaneInfoTiming.ON_TIME, index=0,
    nonspeculative_index=0)
#: Values a map task holds before it sends its per-key chunks on (bounds its memory).
VALUES_PER_FLUSH = 1 << 16


def direct_pane_info(windowing: Any) -> Any:
    """The pane a batch GroupByKey emits for each key and window when no trigger driver is
    needed to make it, or None.

    Default windowing has one pane per key (Beam's batch driver's, at the end of the global
    window). A non-merging WindowFn under the default trigger with the end-of-window
    timestamp combiner has one pane per key and window: the driver's on-time firing at the
    end of the window, holding every value, timestamped at the window's ``max_timestamp``
    (all of a bounded input is on time). Anything else (merging windows, other triggers,
    other timestamp combiners) goes through Beam's trigger driver.
    """
    if windowing.is_default():
        return _ON_TIME_GLOBAL_PANE
    if (not windowing.windowfn.is_merging() and windowing.triggerfn == DefaultTrigger()
            and windowing.timestamp_combiner == TimestampCombiner.OUTPUT_AT_EOW):
        return _ON_TIME_WINDOW_PANE
    return None


def window_pane(key: Any, values: List[Any], window: Any, pane_info: Any) -> Any:
    """A key's pane in ``window`` as :func:`direct_pane_info` describes it."""
    return windowed_value.WindowedValue((key, values), window.max_timestamp(), (window,),
                                        pane_info)


def _value_coder(windowed_kv_coder: Any) -> Any:
    """The value coder of a GroupByKey's windowed KV coder (Beam's KV coder is a TupleCoder
    of two)."""
    kv_coder = getattr(windowed_kv_coder, "wrapped_value_coder", None)
    if type(kv_coder) is not coders.TupleCoder or len(kv_coder.coders()) != 2:
        raise TypeError(f"a GroupByKey's input coder must be a windowed KV coder, "
                        f"got {windowed_kv_coder!r}")
    return kv_coder.coders()[1]


class _GroupCoders:
    """The coders both sides of a direct-pane GroupByKey use."""

    def __init__(self, spec: GroupSpec, components: SharedComponents) -> None:
        input_coder = components.coder(spec.input_coder_id)
        self.element = input_coder.get_impl()
        self.key = input_coder.key_coder().get_impl()
        self.values = coders.IterableCoder(_value_coder(input_coder)).get_impl()
        self.window = components.windowing(
            spec.windowing_strategy_id).windowfn.get_window_coder().get_impl()


def _value_chunks(spec: GroupSpec, components: SharedComponents,
                  records: Iterable[Any]) -> Iterator[Tuple[Tuple[bytes, bytes], bytes]]:
    """The map side of a direct-pane GroupByKey: ``((encoded key, encoded window), encoded
    values)``, one pair per key, window and flush; the values an ``IterableCoder`` encoding
    of the value coder's."""
    group_coders = _GroupCoders(spec, components)
    encode_key, encode_window = group_coders.key.encode, group_coders.window.encode
    encoded_windows: dict = {}
    values_by_group: dict = {}
    held = 0
    for record in records:
        if type(record) is not Elements:
            yield REPORTS_GROUP, pickle.dumps(record)
            continue
        for element, _ in iter_encoded(group_coders.element, record.data):
            key, value = element.value
            encoded_key = encode_key(key)
            for window in element.windows:
                encoded_window = encoded_windows.get(window)
                if encoded_window is None:
                    if len(encoded_windows) >= VALUES_PER_FLUSH:
                        encoded_windows.clear()
                    encoded_window = encoded_windows[window] = encode_window(window)
                group = (encoded_key, encoded_window)
                values = values_by_group.get(group)
                if values is None:
                    values = values_by_group[group] = []
                values.append(value)
                held += 1
            if held >= VALUES_PER_FLUSH:
                for group, flushed in values_by_group.items():
                    yield group, group_coders.values.encode(flushed)
                values_by_group, held = {}, 0
    for group, flushed in values_by_group.items():
        yield group, group_coders.values.encode(flushed)


def _direct_panes(spec: GroupSpec, components: SharedComponents, pane_info: Any,
                  groups: Iterable[Tuple[Tuple[bytes, bytes], Iterable[bytes]]]
                  ) -> Iterator[Elements]:
    """The reduce side of a direct-pane GroupByKey: each key's pane in each window."""
    output_impl = components.coder_impl(spec.output_coder_id)
    group_coders = _GroupCoders(spec, components)
    reports: List[Any] = []

    def panes() -> Iterator[Any]:
        for group, chunks in groups:
            if group == REPORTS_GROUP:
                reports.extend(_reports_of(chunks))
                continue
            encoded_key, encoded_window = group
            values: List[Any] = []
            for chunk in chunks:
                values.extend(group_coders.values.decode(chunk))
            yield window_pane(group_coders.key.decode(encoded_key), values,
                              group_coders.window.decode(encoded_window), pane_info)

    for chunk in encode_chunks(output_impl, panes()):
        yield Elements(0, chunk)
    yield from reports


def _group_also_by_window(spec: GroupSpec, components: SharedComponents,
                          groups: Iterable[Tuple[bytes, Iterable[bytes]]]) -> Iterator[Elements]:
    input_impl = components.coder_impl(spec.input_coder_id)
    output_impl = components.coder_impl(spec.output_coder_id)
    windowing = components.windowing(spec.windowing_strategy_id)

    driver = create_trigger_driver(windowing, True)  # direct_pane_info() was None
    reports: List[Any] = []

    def panes(key, elements):
        return driver.process_entire_key(
            key, [element.with_value(element.value[1]) for element in elements])

    def all_panes():
        for group, encoded_elements in groups:
            if group == REPORTS_GROUP:
                reports.extend(_reports_of(encoded_elements))
                continue
            elements = [element for chunk in encoded_elements
                        for element, _ in iter_encoded(input_impl, chunk)]
            yield from panes(elements[0].value[0], elements)

    for chunk in encode_chunks(output_impl, all_panes()):
        yield Elements(0, chunk)
    yield from reports


# ----- Reshuffle
def reshuffle(records: Dataset, input_coder_id: str, output_coder_id: str,
              components: SharedComponents, partitions: int,
              by_size: bool = False) -> Dataset:
    """Redistribute elements evenly over ``partitions`` (windows, timestamps, panes kept).

    Elements are dealt round-robin, each input partition starting at its own index; Spark's
    ``repartition`` would move pickled batches of elements, leaving small inputs unspread.
    ``by_size``: the elements are a splittable DoFn's sized restrictions, dealt so that each
    partition gets as much of their total size as can be (see :func:`deal_elements`).
    """
    dealt = records.map_partitions_with_index(
        functools.partial(deal_elements, input_coder_id, output_coder_id, components,
                          by_size=by_size, partitions=partitions))
    return dealt.partition_by(partitions).map_partitions(join_dealt)


def deal_elements(input_coder_id: str, output_coder_id: str, components: SharedComponents,
                  partition: int, records: Iterable[Any], by_size: bool = False,
                  partitions: int = 1) -> Iterator[Tuple[int, Any]]:
    """``(position, encoded element)`` for each element of ``records`` (a partition's),
    position ``partition``, ``partition + 1``, ... (a partition's share is ``position %
    partitions``); other records (reports) at position 0.

    ``by_size``: each element is ``(restriction, size)`` (what a splittable DoFn's split
    yields), and count is not work: Beam splits a file into chunks of one size and a last,
    shorter one, so dealt in turn, 16 chunks of 8 files went 60% to one partition and 40% to
    the other. They are dealt over ``partitions`` as :func:`deal_by_size` says instead."""
    input_impl = components.coder_impl(input_coder_id)
    output_impl = (
        None if output_coder_id == input_coder_id else components.coder_impl(output_coder_id))
    sized: List[Tuple[float, bytes]] = []
    position = partition
    for record in records:
        if type(record) is not Elements:
            yield 0, record
            continue
        if record.port != 0:  # decoded with another input's coder, they would change type
            raise ValueError(f"a Reshuffle has one input, but elements came on port "
                             f"{record.port}: the stage's plan is wrong")
        for element, encoded in iter_encoded(input_impl, record.data):
            if output_impl is not None:
                encoded = output_impl.encode_nested(element)
            if by_size:
                sized.append((_restriction_size(element.value), encoded))
            else:
                yield position, encoded
                position += 1
    if sized:
        yield from deal_by_size(sized, partition, partitions)


def deal_by_size(sized: List[Tuple[float, bytes]], first: int,
                 partitions: int) -> Iterator[Tuple[int, bytes]]:
    """``(partition, value)`` for each ``(size, value)``, over ``partitions`` partitions:
    the largest first, each to the partition whose total is least so far, ties to the one
    nearest after ``first`` (each input partition starts at its own). No partition's total
    then exceeds another's by more than the largest value (the longest-processing-time rule).

    >>> sizes = {"a": 13.0, "b": 9.0, "c": 13.0, "d": 9.0, "e": 13.0, "f": 9.0}
    >>> dealt = deal_by_size([(size, value) for value, size in sizes.items()], 0, 2)
    >>> totals = [0.0, 0.0]
    >>> for partition, value in dealt:
    ...     totals[partition] += sizes[value]
    >>> totals
    [35.0, 31.0]
    """
    totals = [(0.0, (slot - first) % partitions, slot) for slot in range(partitions)]
    heapq.heapify(totals)
    for size, value in sorted(sized, key=lambda pair: -pair[0]):
        total, order, slot = heapq.heappop(totals)
        yield slot, value
        heapq.heappush(totals, (total + size, order, slot))


def _restriction_size(value: Any) -> float:
    """The size of a sized restriction ``(restriction, size)``."""
    size = value[1]
    return float(size) if isinstance(size, (int, float)) and size > 0 else 0.0


def join_dealt(values: Iterable[Any]) -> Iterator[Any]:
    """The reduce side of :func:`reshuffle`: dealt elements joined into chunks, then the
    reports."""
    reports: List[Any] = []

    def elements() -> Iterator[bytes]:
        for value in values:
            if isinstance(value, bytes):
                yield value
            else:
                reports.append(value)

    for chunk in join_chunks(elements()):
        yield Elements(0, chunk)
    yield from reports
