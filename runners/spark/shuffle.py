"""Shuffles: key partitioning for keyed steps, GroupByKey in batch, and Reshuffle.

Keys are compared as Beam compares them, by their deterministic encoding, and placed by
``zlib.crc32`` of those bytes (never Python's ``hash()``, which is salted per process and
would send one key to different partitions from different workers).

Key partitioning (a stateful stage's input, and every streaming keyed step) packs elements
on the map side per target partition (:class:`~runners.spark.records.KeyedPacker`), so the
shuffle moves a few large records instead of one per element.

GroupByKey in batch runs as ``fn_api_runner.execution.GroupingBuffer`` does, but distributed:
the map side keys each element by its encoded key, Spark's ``groupByKey`` (which spills
large groups to disk) brings each key's elements together, and the reduce side hands them to
Beam's trigger driver (``process_entire_key``), which assigns them to (merged) windows and
emits the panes a bounded input produces. Default windowing (the global window, the default
trigger) has one pane per key, ON_TIME, at the end of the global window, so it needs neither
the elements' windows nor their timestamps: the map side gathers each key's *values*,
encodes them together as one iterable per key and flush (:func:`_value_chunks`), and the
reduce side decodes a key's few chunks straight into its pane: one decode and one encode
per value on each side, no per-element record through Spark's shuffle.
"""

from __future__ import annotations

import functools
import zlib
from typing import Any, Iterable, Iterator, List, Sequence, Tuple

from apache_beam.coders import coders
from apache_beam.transforms.window import GlobalWindow, GlobalWindows
from apache_beam.utils import windowed_value

from runners.spark.beam_internals import create_trigger_driver
from runners.spark.components import SharedComponents, encode_chunks, iter_encoded, join_chunks
from runners.spark.planning import GroupSpec
from runners.spark.records import Elements, KeyedElements, KeyedPacker, unpack_keyed


def key_partition(encoded_key: bytes) -> int:
    """The partition hash of an encoded key: stable across processes and runs."""
    return zlib.crc32(encoded_key)


def partition_of(encoded_key: bytes, partitions: int) -> int:
    """The key partition (of ``partitions``) an encoded key belongs to.

    >>> partition_of(b"team-a", 2) == zlib.crc32(b"team-a") % 2
    True
    """
    return zlib.crc32(encoded_key) % partitions


def _identity(number: int) -> int:
    return number


# ----- key partitioning
def partition_by_key(records: Any, coder_ids: Sequence[str], components: SharedComponents,
                     partitions: int, key_prefixed: bool = False) -> Any:
    """``Elements`` (on ports whose coders are ``coder_ids``) as :class:`KeyedElements`, each
    key in one of ``partitions`` partitions (partition i of the result holds key partition
    i); reports ride along to partition 0.

    Keys are encoded by the element coder's key coder; with ``key_prefixed`` (the SDK
    length-prefixes a key that coder reads as opaque bytes) in its nested form, so the
    bytes equal the SDK harness's own encoding of the key (its user state keys).
    """
    keyed = records.mapPartitions(functools.partial(
        keyed_records, tuple(coder_ids), components, partitions, key_prefixed))
    return keyed.partitionBy(partitions, _identity).values()


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
def group_by_key(records: Any, spec: GroupSpec, components: SharedComponents,
                 partitions: int) -> Any:
    """``Elements`` of encoded ``(key, value)`` pairs -> ``Elements`` of ``(key, values)`` panes."""
    if (components.windowing(spec.windowing_strategy_id).is_default()
            and _value_coder(components.coder(spec.input_coder_id)) is not None):
        chunks = records.mapPartitions(functools.partial(_value_chunks, spec.input_coder_id,
                                                         components))
        grouped = chunks.groupByKey(partitions, partitionFunc=key_partition)
        return grouped.mapPartitions(functools.partial(_global_panes, spec, components))
    keyed = records.mapPartitions(functools.partial(_key_elements, spec.input_coder_id,
                                                    components))
    grouped = keyed.groupByKey(partitions, partitionFunc=key_partition)
    return grouped.mapPartitions(functools.partial(_group_also_by_window, spec, components))


def _key_elements(coder_id: str, components: SharedComponents, records: Iterable[Any]):
    coder_impl = components.coder_impl(coder_id)
    key_impl = components.coder(coder_id).key_coder().get_impl()
    for record in records:
        if type(record) is Elements:
            for element, encoded in iter_encoded(coder_impl, record.data):
                yield key_impl.encode(element.value[0]), encoded


_ON_TIME_GLOBAL_PANE = windowed_value.PaneInfo(
    is_first=True, is_last=True, timing=windowed_value.PaneInfoTiming.ON_TIME, index=0,
    nonspeculative_index=0)
#: Values a map task holds before it sends its per-key chunks on (bounds its memory).
VALUES_PER_FLUSH = 1 << 16


def _value_coder(windowed_kv_coder: Any) -> Any:
    """The value coder of a windowed KV coder (None if it is not the standard KV coder)."""
    kv_coder = getattr(windowed_kv_coder, "wrapped_value_coder", None)
    if type(kv_coder) is not coders.TupleCoder or len(kv_coder.coders()) != 2:
        return None
    return kv_coder.coders()[1]


def _values_impl(coder_id: str, components: SharedComponents) -> Any:
    return coders.IterableCoder(_value_coder(components.coder(coder_id))).get_impl()


def _value_chunks(coder_id: str, components: SharedComponents,
                  records: Iterable[Any]) -> Iterator[Tuple[bytes, bytes]]:
    """The map side of a default-windowing GroupByKey: ``(encoded key, encoded values)``,
    one pair per key and flush, the values an ``IterableCoder`` encoding of the value coder's."""
    coder_impl = components.coder_impl(coder_id)
    key_impl = components.coder(coder_id).key_coder().get_impl()
    values_impl = _values_impl(coder_id, components)
    values_by_key: dict = {}
    held = 0
    for record in records:
        if type(record) is not Elements:
            continue
        for element, _ in iter_encoded(coder_impl, record.data):
            key, value = element.value
            encoded_key = key_impl.encode(key)
            values = values_by_key.get(encoded_key)
            if values is None:
                values = values_by_key[encoded_key] = []
            values.append(value)
            held += 1
            if held >= VALUES_PER_FLUSH:
                for flushed_key, flushed in values_by_key.items():
                    yield flushed_key, values_impl.encode(flushed)
                values_by_key, held = {}, 0
    for flushed_key, flushed in values_by_key.items():
        yield flushed_key, values_impl.encode(flushed)


def _global_panes(spec: GroupSpec, components: SharedComponents,
                  groups: Iterable[Tuple[bytes, Iterable[bytes]]]) -> Iterator[Elements]:
    """The reduce side of a default-windowing GroupByKey: each key's one ON_TIME pane."""
    output_impl = components.coder_impl(spec.output_coder_id)
    key_impl = components.coder(spec.input_coder_id).key_coder().get_impl()
    values_impl = _values_impl(spec.input_coder_id, components)
    end_of_global_window = GlobalWindow().max_timestamp()

    def panes() -> Iterator[Any]:
        for encoded_key, chunks in groups:
            values: List[Any] = []
            for chunk in chunks:
                values.extend(values_impl.decode(chunk))
            yield GlobalWindows.windowed_value(
                (key_impl.decode(encoded_key), values), timestamp=end_of_global_window,
                pane_info=_ON_TIME_GLOBAL_PANE)

    for chunk in encode_chunks(output_impl, panes()):
        yield Elements(0, chunk)


def _group_also_by_window(spec: GroupSpec, components: SharedComponents,
                          groups: Iterable[Tuple[bytes, Iterable[bytes]]]) -> Iterator[Elements]:
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

    for chunk in encode_chunks(output_impl, all_panes()):
        yield Elements(0, chunk)


# ----- Reshuffle
def reshuffle(records: Any, input_coder_id: str, output_coder_id: str,
              components: SharedComponents, partitions: int) -> Any:
    """Redistribute elements evenly over ``partitions`` (windows, timestamps, panes kept).

    Elements are dealt round-robin, each input partition starting at its own index; Spark's
    ``repartition`` would move pickled batches of elements, leaving small inputs unspread.
    """
    dealt = records.mapPartitionsWithIndex(
        functools.partial(deal_elements, input_coder_id, output_coder_id, components))
    return dealt.partitionBy(partitions, _identity).values().mapPartitions(join_dealt)


def deal_elements(input_coder_id: str, output_coder_id: str, components: SharedComponents,
                  partition: int, records: Iterable[Any]) -> Iterator[Tuple[int, Any]]:
    input_impl = components.coder_impl(input_coder_id)
    output_impl = (
        None if output_coder_id == input_coder_id else components.coder_impl(output_coder_id))
    position = partition
    for record in records:
        if type(record) is not Elements:
            yield 0, record
            continue
        for element, encoded in iter_encoded(input_impl, record.data):
            yield position, encoded if output_impl is None else output_impl.encode_nested(element)
            position += 1


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
