"""Values handed between operations a block at a time, counted as Beam counts them one at a
time.

Between two of Beam's operations, a consumer set hands on each element alone: it counts the
element into its PCollection (the element count, and the element's encoded size at Beam's
sampling rate: each of the first ten, then about ten in n), then calls the next operation's
``process``. That costs a ``WindowedValue``, a compiled call and a Python call an element.
Two hand-overs carry many values of one carrier (one timestamp, windows and pane) and need
none of it per element:

- a bulk text read hands each block of lines of one restriction to a chain, its one
  consumer (:class:`ValueBlocks`, then ``ChainedStepsOperation.process_values``): the chain
  loops over the block with the restriction element as every line's carrier;
- a chain whose last step is ``WriteImpl``'s ``WindowInto(GlobalWindows)`` appends each value
  alone in the global window with no pane to the block of its one consumer, a
  :class:`BlockSink` (the text sink's writing step), which writes a block at a time.

What a user can observe stays Beam's: each PCollection's element count is the same, and its
sampled sizes are sizes of its elements sampled at Beam's rate (:class:`SampledSizes`; the
samples are random, as Beam's are).
"""

from __future__ import annotations

import math
import random
from typing import Any, Dict, List, Optional, Sequence

#: Beam samples the size of every element of the first ten of a PCollection, then fewer.
ALWAYS_SAMPLED = 10


class SampledSizes:
    """One PCollection's sampled sizes, kept in a Beam ``OperationCounters`` as Beam's
    consumer set keeps them, at its sampling rate (all of the first ten elements, then
    ~10/n of them), each sampled value type-checked as Beam's consumer set checks it."""

    def __init__(self, counters: Any) -> None:
        self.counters = counters
        self.coder_impl = counters.coder_impl
        self.type_checked = bool(counters.output_type_constraints)

    def sample(self, carrier: Any, value: Any, seen: int) -> int:
        """Record the size of the ``seen``-th element (``value`` with ``carrier``'s
        timestamp, windows and pane); the count at which to sample next (the next one for
        the first ten, then after a gap drawn as Beam draws it)."""
        if self.type_checked:
            self.counters.type_check(value)
        element = carrier if value is carrier.value else carrier.with_value(value)
        self.counters.mean_byte_counter.update(self.coder_impl.estimate_size(element))
        if seen <= ALWAYS_SAMPLED:
            return seen + 1
        gap = math.log(1.0 - random.random()) / math.log(1.0 - ALWAYS_SAMPLED / seen)
        return seen + 1 + math.floor(gap)


class ValueBlocks:
    """The hand-over of blocks of values of one carrier to a chain, the producer's one
    consumer: each block counted into the producer's output PCollection as Beam's consumer
    set would count its elements one by one, then run down the chain.

    ``receiver`` is the producer's consumer set (its ``opcounter`` holds the PCollection's
    counters), ``chain`` the consumer (``process_values(carrier, values)``).
    """

    def __init__(self, receiver: Any, chain: Any) -> None:
        self.counters = receiver.opcounter
        self.sizes = SampledSizes(self.counters)
        self.chain = chain
        self.seen = 0  # elements counted so far
        self.next = 1  # the count at which to sample next

    def hand(self, carrier: Any, values: Sequence[Any]) -> None:
        """Count ``values`` (elements with ``carrier``'s timestamp, windows and pane) and run
        them down the chain, in order."""
        seen = self.seen
        end = seen + len(values)
        while self.next <= end:
            self.next = self.sizes.sample(carrier, values[self.next - seen - 1], self.next)
        self.seen = end
        self.counters.element_counter.update(len(values))
        self.chain.process_values(carrier, values)


def only_consumer(consumers: Dict[str, List[Any]], kind: type) -> Optional[Any]:
    """An operation's one consumer (``consumers``: output tag -> operations, as Beam's
    operation factories get them) when it is a ``kind``; None otherwise."""
    found = [operation for operations in consumers.values() for operation in operations]
    return found[0] if len(found) == 1 and isinstance(found[0], kind) else None


def takes_value_blocks(receiver: Any) -> bool:
    """Whether a consumer set's elements may be handed on a block at a time: no data
    sampler takes samples of them (Beam's consumer set hands each element to it)."""
    return getattr(receiver, "output_sampler", None) is None


class BlockSink:
    """An operation taking the values of elements alone in the global window with no pane
    a block at a time (the mixin of the text sink's writing step): its producer appends
    each value to :meth:`value_block`, calling :meth:`open_block` with the first one's
    element before, and :meth:`flush_block` once the block holds ``BLOCK_SIZE`` values;
    the operation flushes what is left before any element of its own ``process`` and at
    its ``finish``."""

    BLOCK_SIZE: int  # the values of a full block

    def value_block(self) -> List[Any]:
        """The block (one list for the operation's life: a producer binds its ``append``)."""
        try:
            return self._value_block
        except AttributeError:
            self._value_block: List[Any] = []
            return self._value_block

    def open_block(self, carrier: Any) -> None:
        """The element of the block's first value (its timestamp is the block's)."""
        raise NotImplementedError

    def flush_block(self) -> None:
        """Hand on the block's values, in order, and empty it."""
        raise NotImplementedError
