"""The decode loop at a fused stage's input, without a lock per element.

Beam's ``DataInputOperation.process_encoded`` decodes a stage's input one element at a
time, and for each takes a lock, checks whether a split has cut the bundle short and
counts the element's index: bookkeeping for dynamic splitting of a bundle, which a runner
asks for while the bundle runs (``ProcessBundleSplitRequest``). This runner never does:
a Spark task runs a bundle to its end. So the stage's input is decoded in a plain loop;
the index (the data channel's read index, a monitoring info) is counted per chunk, and
the loop is Beam's own as soon as a split has set a stop.

Decoding errors are raised as Beam raises them (a ``ValueError`` naming the coder and the
step, the decoding error chained).
"""

from __future__ import annotations

import functools
import math
from typing import Any

from runners.spark.beam_internals import (
    DATA_INPUT_URN,
    BeamTransformFactory,
    DataInputOperation,
    NameContext,
    beam_fn_api_pb2,
    create_InputStream,
)

#: The runner-private URN of a stage input in worker descriptors (:func:`use_decode_loop`).
DECODE_LOOP_URN = "beam:runner:spark_runner:source:v1"
STAGE_INPUT_URNS = frozenset([DATA_INPUT_URN, DECODE_LOOP_URN])


def use_decode_loop(descriptor: Any) -> int:
    """Give every stage input of a ``ProcessBundleDescriptor`` the plain decode loop;
    returns how many."""
    swapped = 0
    for transform in descriptor.transforms.values():
        if transform.spec.urn == DATA_INPUT_URN:
            transform.spec.urn = DECODE_LOOP_URN
            swapped += 1
    return swapped


class DecodeLoop(DataInputOperation):
    """Beam's stage input, decoding without per-element split bookkeeping."""

    def process_encoded(self, encoded_windowed_values: bytes) -> None:
        if self.stop != math.inf:
            super().process_encoded(encoded_windowed_values)
            return
        stream = create_InputStream(encoded_windowed_values)
        remaining = stream.size
        decode = self.windowed_coder_impl.decode_from_stream
        receive = self.receivers[0].receive
        decoded = 0
        try:
            while remaining() > 0:
                try:
                    element = decode(stream, True)
                except Exception as error:
                    raise ValueError(
                        f"Error decoding input stream with coder {self.windowed_coder} in "
                        f"step {self.name_context.step_name}") from error
                decoded += 1
                receive(element)
        finally:
            with self.splitting_lock:
                self.index += decoded


@BeamTransformFactory.register_urn(DECODE_LOOP_URN, beam_fn_api_pb2.RemoteGrpcPort)
def _create_decode_loop(factory, transform_id, transform_proto, grpc_port, consumers):
    # As Beam's own factory of DATA_INPUT_URN builds its DataInputOperation.
    return DecodeLoop(
        NameContext(transform_proto.unique_name, transform_id),
        transform_proto.unique_name,
        consumers,
        factory.counter_factory,
        factory.state_sampler,
        factory.get_coder(grpc_port.coder_id),
        transform_id=transform_id,
        data_channel_factory=functools.partial(
            factory.data_channel_factory.create_data_channel, grpc_port))
