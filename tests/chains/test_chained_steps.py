"""Chained simple steps (``--chain_simple_steps``) give what Beam's own operations give.

Each case builds one fused stage (its input behind a ``Reshuffle``, its output read as a
side input, so the stage writes it out), plans it with chaining on and off, feeds both the
same encoded
``WindowedValue`` s (chosen timestamps; the global window or several sliding windows per
element; default, early and late panes) through the stage in process
(:class:`runners.spark.worker.bundles.StageProcessor`, no Spark), and compares:

(a) the plan: with chaining on, the named steps sit inside ``CHAINED_STEPS_URN``
    transforms, in order; with it off there is none;
(b) the decoded output elements, as multisets of (value, timestamp, windows, pane);
(c) the ``beam:metric:element_count:v1`` monitoring infos of every PCollection (and the
    sampled byte sizes where Beam samples every element);
(d) user metrics (a ``Metrics.counter`` in each user function; distributions, gauges and
    string sets in one case), under the same step.

Then: exceptions (same type, same message naming the step, the original chained), DoFn
``setup``/``teardown``, the steps that must keep Beam's operation (side inputs,
``TimestampParam``, ``start_bundle``, several outputs, state) with their neighbours
still chained, runtime type checks and ``--type_check_strictness``, and one pipeline on
the SparkRunner with chaining on and off (same output, same metrics).

Also: a lifted ``CombinePerKey``'s precombine at a chain's end, chains longer than Python's
limit of nested blocks, a second bundle on the same processor, and the stage input's
decode loop against Beam's own.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import threading
import typing
from collections.abc import Callable, Sequence
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.coders.coder_impl import create_InputStream, create_OutputStream
from apache_beam.metrics import Metrics, monitoring_infos
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.portability.api import beam_fn_api_pb2, beam_runner_api_pb2
from apache_beam.pvalue import TaggedOutput
from apache_beam.runners.pipeline_context import PipelineContext
from apache_beam.testing.benchmarks.nexmark.monitor import Monitor
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import combiners, userstate
from apache_beam.transforms.window import (
    FixedWindows,
    GlobalWindow,
    GlobalWindows,
    IntervalWindow,
    Sessions,
    SlidingWindows,
    TimestampCombiner,
    TimestampedValue,
    WindowFn,
)
from apache_beam.typehints.decorators import TypeCheckError
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import (
    PANE_INFO_UNKNOWN,
    PaneInfo,
    PaneInfoTiming,
    WindowedValue,
)

from runners.spark.chains.planning import CHAINED_STEPS_URN, chain_order, why_not_chained
from runners.spark.chains.precombine import ChainedPrecombine
from runners.spark.planning import execution_plan
from runners.spark.worker.bundles import StageProcessor

from spark_fixtures import spark_session  # noqa: F401 (fixture)

NAMESPACE = "chained_steps_test"
EARLY = PaneInfo(True, False, PaneInfoTiming.EARLY, 0, 0)
LATE = PaneInfo(False, False, PaneInfoTiming.LATE, 3, 2)
SLIDING = SlidingWindows(60, 20)


def _tick(name: str) -> None:
    Metrics.counter(NAMESPACE, name).inc()


# ---------------------------------------------------------------------------------------
# The user functions (module level: pickled by reference, each counts its calls).

def double(x):
    _tick("double")
    return 2 * x


def add(x, amount):
    _tick("add")
    return x + amount


def add_default(x, offset=5):
    _tick("add_default")
    return x + offset


def twice_generator(x):
    _tick("twice_generator")
    yield x
    yield x + 100


def pair_list(x):
    _tick("pair_list")
    return [x, -x]


def returns_none(x):
    _tick("returns_none")  # and returns None


def returns_empty(x):
    _tick("returns_empty")
    return []


def returns_text(x):
    _tick("returns_text")
    return "ab"


def is_even(x):
    _tick("is_even")
    return x % 2 == 0


def never(x):
    _tick("never")
    return False


def to_pair(x):
    _tick("to_pair")
    return (x % 3, x)


def add_pair(key, value):
    _tick("add_pair")
    return key + value


def spread_pair(key, value):
    _tick("spread_pair")
    return [(key, value), (value, key)]


def key_of(x):
    _tick("key_of")
    return x % 2


def stamp(x):
    _tick("stamp")
    return TimestampedValue(x, 1000 + 7 * x)


#: The ``Timestamp`` object each value was stamped with by :func:`stamp_kept`, last run.
STAMPED: dict[int, Timestamp] = {}


def stamp_kept(x):
    _tick("stamp_kept")
    STAMPED[x] = Timestamp(1000 + 7 * x)
    return TimestampedValue(x, STAMPED[x])


def same_stamp(x, timestamp=beam.DoFn.TimestampParam):
    """Whether the timestamp handed in is the very object :func:`stamp_kept` stamped."""
    _tick("same_stamp")
    return (x, timestamp is STAMPED.get(x), timestamp.micros)


def global_windowed(x):
    _tick("global_windowed")
    return WindowedValue(x, 77, [GlobalWindow()])


def interval_windowed(x):
    _tick("interval_windowed")
    return WindowedValue(x, 45, [IntervalWindow(40, 100)])


def tagged_main(x):
    _tick("tagged_main")
    return TaggedOutput("None", x)  # the proto's main output tag of a Map: Beam emits it


def tagged_undeclared(x):
    _tick("tagged_undeclared")
    return TaggedOutput("elsewhere", x) if x % 2 else x


class Claims:
    """A value claiming to be a ``TimestampedValue`` when it holds one (its ``__class__``,
    which Python's ``isinstance`` asks too): Beam's compiled output handler looks at its
    type alone, so it is never resolved as one."""

    def __init__(self, held):
        self.held = held

    @property
    def __class__(self):
        return TimestampedValue if isinstance(self.held, TimestampedValue) else Claims

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.held, name)

    def __reduce__(self):
        return Claims, (self.held,)


def claims_stamped_or_not(x):
    _tick("claims")
    yield Claims(x)
    yield Claims(TimestampedValue(x, 500 + x))


def unclaimed(x):
    if type(x) is not Claims:
        return "plain", x
    held = x.held
    if type(held) is TimestampedValue:
        return "held stamped", held.value, held.timestamp.micros
    return "held", held


def yields_tagged(x):
    _tick("yields_tagged")
    yield TaggedOutput("elsewhere", x)
    yield x


class Triple(beam.DoFn):
    def process(self, element):
        _tick("triple")
        yield 3 * element


class ListTwice(beam.DoFn):
    def process(self, element):
        _tick("list_twice")
        return [element, element]


class ReturnsText(beam.DoFn):
    def process(self, element):
        return "text"


class WithBundleContext(beam.DoFn):
    def process(self, element, opened=beam.DoFn.BundleContextParam(lambda: open(__file__))):
        yield element


def with_key(kv, key=beam.DoFn.KeyParam):
    return kv


class Split(beam.DoFn):
    def process(self, element):
        if element % 2:
            yield TaggedOutput("odd", element)
        else:
            yield element


class Stateful(beam.DoFn):
    SEEN = userstate.CombiningValueStateSpec("seen", combine_fn=sum)

    def process(self, element, seen=beam.DoFn.StateParam(SEEN)):
        seen.add(1)
        yield element


LIFECYCLE: list[str] = []


class Recorded(beam.DoFn):
    def setup(self):
        LIFECYCLE.append("setup")

    def process(self, element):
        LIFECYCLE.append("process")
        yield element

    def teardown(self):
        LIFECYCLE.append("teardown")


def boom(x):
    raise ValueError("boom")


def yield_then_raise(x):
    yield x
    raise ValueError(f"after one of {x}")


def key_error(x):
    raise KeyError()


def number_error(x):
    raise ValueError(42)


def unpicklable(x):
    return threading.Lock()


def failing_with_timestamp(x, t=beam.DoFn.TimestampParam):
    raise ValueError(f"late at {t}")


def with_timestamp(x, t=beam.DoFn.TimestampParam):
    return (x, int(t))


def plus_one(x):
    _tick("plus_one")
    return x + 1


def first_of(kv):
    return kv[0]


def singleton_list(x):
    return [x]


def upto(x):
    _tick("upto")
    return range(x)


class Quintuple:
    def __call__(self, x):
        _tick("quintuple")
        return 5 * x


class Scaled(beam.DoFn):
    def process(self, element, factor):
        _tick("scaled")
        yield element * factor


def measure(x):
    Metrics.counter(NAMESPACE, "measured").inc(x)
    Metrics.distribution(NAMESPACE, "sizes").update(x)
    Metrics.gauge(NAMESPACE, "latest").set(x)
    Metrics.string_set(NAMESPACE, "seen").add(str(x))
    return x


class TagsByName(beam.DoFn):
    """A ParDo whose only output is named ``main`` in Python: in the proto its tag is still
    ``None``, so Beam's worker emits a TaggedOutput to ``None`` and drops one to ``main``."""

    def process(self, element):
        _tick("tags_by_name")
        yield TaggedOutput("main", element)
        yield TaggedOutput("None", -element)
        yield element + 1000


class CountedSum(beam.CombineFn):
    """A sum whose precombine counts what it is given (metrics in add_input)."""

    def create_accumulator(self):
        _tick("create_accumulator")
        return 0

    def add_input(self, accumulator, element):
        _tick("add_input")
        return accumulator + element

    def merge_accumulators(self, accumulators):
        return sum(accumulators)

    def extract_output(self, accumulator):
        return accumulator


class CompactCounted(CountedSum):
    def compact(self, accumulator):
        _tick("compact")
        return accumulator


class AddFails(CountedSum):
    def add_input(self, accumulator, element):
        raise ValueError("bad combine")


class BadCompact(CountedSum):
    def compact(self, accumulator):
        raise ValueError("cannot compact")


class SetupFails(beam.DoFn):
    def setup(self):
        raise RuntimeError("no connection")

    def process(self, element):
        yield element



# Steps that ask for their element's timestamp, window or pane, and DoFns with bundle
# methods (the shape of Nexmark's Monitor: metrics in start_bundle, process, finish_bundle).

def stamped_pair(x, timestamp=beam.DoFn.TimestampParam):
    _tick("stamped_pair")
    return (x, timestamp.micros)


def in_window(x, window=beam.DoFn.WindowParam):
    _tick("in_window")
    return (x, str(window))


def pane_of(x, pane=beam.DoFn.PaneInfoParam):
    _tick("pane_of")
    return (x, pane.timing, pane.index, pane.is_first)


def in_even_window(x, window=beam.DoFn.WindowParam):
    _tick("in_even_window")
    return isinstance(window, GlobalWindow) or window.start.micros // 20_000_000 % 2 == 0


def every_parameter(x, timestamp=beam.DoFn.TimestampParam, window=beam.DoFn.WindowParam,
                    pane=beam.DoFn.PaneInfoParam):
    _tick("every_parameter")
    yield (x, timestamp.micros, str(window), pane.timing)
    yield (-x, str(window))


def add_at(x, amount, timestamp=beam.DoFn.TimestampParam, window=beam.DoFn.WindowParam):
    _tick("add_at")
    return (x + amount, timestamp.micros, str(window))


def add_keyword_at(x, timestamp=beam.DoFn.TimestampParam, window=beam.DoFn.WindowParam,
                   amount=0):
    _tick("add_keyword_at")
    return (x + amount, timestamp.micros, str(window))


def sum_stamped(key, value, timestamp=beam.DoFn.TimestampParam):
    _tick("sum_stamped")
    return (key + value, timestamp.micros)


def restamped_in_window(x, window=beam.DoFn.WindowParam):
    _tick("restamped_in_window")
    return TimestampedValue((x, str(window)), 3 + x)


def many_stamped(x, timestamp=beam.DoFn.TimestampParam):
    _tick("many_stamped")
    return [(x, index, timestamp.micros) for index in range(300)]


class Monitored(beam.DoFn):
    """Counts what it sees, as Nexmark's Monitor does (without its wall-clock times)."""

    def __init__(self, prefix):
        self.elements = Metrics.counter(NAMESPACE, prefix + ".elements")
        self.stamps = Metrics.distribution(NAMESPACE, prefix + ".event_timestamp")
        self.bundles = Metrics.counter(NAMESPACE, prefix + ".bundles")
        self.finished = Metrics.gauge(NAMESPACE, prefix + ".finished")

    def start_bundle(self):
        self.bundles.inc()

    def process(self, element, timestamp=beam.DoFn.TimestampParam):
        self.elements.inc()
        self.stamps.update(timestamp.micros)
        yield element

    def finish_bundle(self):
        self.finished.set(1)


class Buffered(beam.DoFn):
    """Outputs odd elements at once and every element again from finish_bundle, in the
    window it was in (tens of it), and one to an undeclared output (dropped)."""

    def start_bundle(self):
        _tick("buffered_start")
        self.seen = []

    def process(self, element, timestamp=beam.DoFn.TimestampParam,
                window=beam.DoFn.WindowParam):
        _tick("buffered")
        self.seen.append((element, timestamp, window))
        if element % 2:
            yield element

    def finish_bundle(self):
        _tick("buffered_finish")
        for element, timestamp, window in self.seen:
            yield WindowedValue(10 * element, timestamp, [window])
        yield TaggedOutput("elsewhere", WindowedValue(-1, 0, [GlobalWindow()]))


class BufferedPairs(Buffered):
    def process(self, element, timestamp=beam.DoFn.TimestampParam,
                window=beam.DoFn.WindowParam):
        self.seen.append((element, timestamp, window))
        yield (element % 2, element)

    def finish_bundle(self):
        for element, timestamp, window in self.seen:
            yield WindowedValue((element % 3, element), timestamp, [window])


#: (event, step) in the order Beam's operations call a DoFn's methods.
CALLS: list[tuple[str, str]] = []


class CallsRecorded(beam.DoFn):
    def __init__(self, name):
        self.name = name

    def setup(self):
        CALLS.append(("setup", self.name))

    def start_bundle(self):
        CALLS.append(("start_bundle", self.name))

    def process(self, element, timestamp=beam.DoFn.TimestampParam):
        CALLS.append(("process", self.name))
        yield element

    def finish_bundle(self):
        CALLS.append(("finish_bundle", self.name))
        yield WindowedValue(100, 7, [GlobalWindow()])

    def teardown(self):
        CALLS.append(("teardown", self.name))


class FailsIn(beam.DoFn):
    """Raises in the method named, or returns from start_bundle / outputs from
    finish_bundle what Beam refuses."""

    def __init__(self, method):
        self.method = method

    def start_bundle(self):
        if self.method == "start_bundle":
            raise ValueError("cannot start")
        if self.method == "start_bundle_outputs":
            return [1]

    def process(self, element, window=beam.DoFn.WindowParam):
        if self.method == "process":
            raise ValueError(f"cannot process {element}")
        yield element

    def finish_bundle(self):
        if self.method == "finish_bundle":
            raise ValueError("cannot finish")
        if self.method == "finish_bundle_plain_value":
            yield 5
        if self.method == "finish_bundle_bad_tag":
            yield TaggedOutput(7, WindowedValue(1, 0, [GlobalWindow()]))
        if self.method == "finish_bundle_then_raise":
            yield WindowedValue(1, 0, [GlobalWindow()])
            raise ValueError("cannot finish after one")


def fails_on_tens(x):
    if x >= 10:
        raise ValueError(f"no tens: {x}")
    return x

# ---------------------------------------------------------------------------------------
# The harness: one fused stage, in process.

@dataclasses.dataclass
class StageRun:
    """What one run of a stage gives (its last bundle, when it runs several)."""

    elements: collections.Counter  # (value, timestamp, windows, pane) -> how many
    written: dict[str, int]  # PCollection the stage writes -> how many elements
    counts: dict[str, int]  # PCollection id -> element_count
    sizes: dict[str, tuple[int, int, int, int]]  # PCollection id -> sampled byte sizes
    user_metrics: dict[tuple[str, str, str, str], Any]  # (urn, step, namespace, name) -> value
    read_index: int  # the stage input's data_channel read index
    chains: list[list[str]]  # the steps of each chain of the stage, in order
    descriptor: Any
    processor: StageProcessor


def build_proto(build: Callable[[Any], Any], windowing: str = "global",
                options: PipelineOptions | None = None, visit: Any = None):
    """The pipeline proto of ``Impulse | Map | [WindowInto] | Reshuffle | build``, what
    ``build`` makes read as a side input (so the stage writes it out; after merging
    windows, a Reshuffle reads it)."""
    options = options or PipelineOptions([])
    pipeline = beam.Pipeline(options=options)
    source = (pipeline | beam.Impulse()
              | "Any" >> beam.Map(lambda _: 0).with_output_types(typing.Any))
    if windowing == "sliding":
        source = source | "Slide" >> beam.WindowInto(SLIDING)
    built = build(source | "In" >> beam.Reshuffle())
    if built.windowing.windowfn.is_merging():  # not allowed in a side input
        _ = built | "Out" >> beam.Reshuffle() | "Sink" >> beam.Map(lambda _: None)
    else:
        _ = (pipeline | "Probe" >> beam.Impulse()
             | "Sink" >> beam.Map(lambda _, side: None, beam.pvalue.AsIter(built)))
    if visit is not None:
        pipeline.visit(visit)
    return execution_plan.pipeline_proto(pipeline, options)


def inputs_for(values: Sequence[Any], windowing: str = "global") -> list[WindowedValue]:
    """``values`` as stage inputs: timestamps 5 s, 22 s, ...; the global window, or the
    three sliding windows of each timestamp; panes default, early and late in turn."""
    elements = []
    for index, value in enumerate(values):
        timestamp = Timestamp(5 + 17 * index)
        if windowing == "global":
            windows = [GlobalWindow()]
        else:
            windows = list(SLIDING.assign(WindowFn.AssignContext(timestamp)))
            assert len(windows) == 3
        pane = (PANE_INFO_UNKNOWN, EARLY, LATE)[index % 3]
        elements.append(WindowedValue(value, timestamp, windows, pane))
    return elements


def _decode_all(coder_impl, chunks) -> list[WindowedValue]:
    decoded = []
    for chunk in chunks:
        stream = create_InputStream(chunk)
        while stream.size() > 0:
            decoded.append(coder_impl.decode_from_stream(stream, True))
    return decoded


def chains_of(descriptor) -> list[list[str]]:
    """The steps (names) of each chain transform of a planned descriptor, in order."""
    found = []
    for transform in descriptor.transforms.values():
        if transform.spec.urn == CHAINED_STEPS_URN:
            steps = beam_runner_api_pb2.Components.FromString(transform.spec.payload)
            found.append([step.unique_name for step in chain_order(steps, transform)])
    return found


def labels(names: Sequence[str]) -> list[str]:
    """Step names by their top-level label (``WK/Map(<lambda ...>)`` -> ``WK``)."""
    return [name.split("/")[0] for name in names]


def stage_with(plan, step: str):
    (stage,) = [stage for stage in plan.stages if step in labels(stage.steps)]
    return stage


def _hashable(value: Any) -> Any:
    """A value as a multiset key: lists (accumulators) as tuples, ``["list", ...]``."""
    if isinstance(value, list):
        return ("list",) + tuple(_hashable(item) for item in value)
    if isinstance(value, tuple):
        return tuple(_hashable(item) for item in value)
    return value


def _port_coder(context, descriptor, transform_id: str):
    """The coder of a stage input's or output's data, as the SDK harness has it."""
    port = beam_fn_api_pb2.RemoteGrpcPort.FromString(
        descriptor.transforms[transform_id].spec.payload)
    return context.coders.get_by_id(port.coder_id).get_impl()


def _user_metric_value(info) -> Any:
    if info.urn == monitoring_infos.USER_GAUGE_URN:
        return monitoring_infos.extract_gauge_value(info)[1]  # not its wall-clock time
    if info.urn == monitoring_infos.USER_DISTRIBUTION_URN:
        return monitoring_infos.extract_distribution(info)
    if info.urn == monitoring_infos.USER_STRING_SET_URN:
        return monitoring_infos.extract_string_set_value(info)
    return monitoring_infos.extract_counter_value(info)


def encoded_inputs(plan_stage, descriptor, context, inputs) -> tuple[str, bytes]:
    (spec,) = plan_stage.inputs
    coder = _port_coder(context, descriptor, spec.transform_id)
    stream = create_OutputStream()
    for element in inputs:
        coder.encode_to_stream(element, stream, True)
    return spec.transform_id, stream.get()


def run_stage(proto, first_step: str, inputs: Sequence[WindowedValue], chain: bool,
              bundles: int = 1) -> StageRun:
    """Plan ``proto`` (chaining on or off), run the stage holding ``first_step`` on
    ``inputs`` as one bundle (``bundles`` times, on the same processor), and decode what
    the last bundle writes."""
    plan = execution_plan.plan(proto, chain_steps=chain)
    stage = stage_with(plan, first_step)
    descriptor = beam_fn_api_pb2.ProcessBundleDescriptor.FromString(stage.descriptor)
    processor = StageProcessor(stage.descriptor)
    context = PipelineContext(plan.components)
    input_id, data = encoded_inputs(stage, descriptor, context, inputs)
    for _ in range(bundles):
        outputs, _, _, infos = processor.run_bundle({input_id: [data]}, {})
    elements: collections.Counter = collections.Counter()
    written = {}
    for output_id, _ in stage.outputs:
        decoded = _decode_all(_port_coder(context, descriptor, output_id),
                              outputs.get(output_id, []))
        written[next(iter(descriptor.transforms[output_id].inputs.values()))] = len(decoded)
        for element in decoded:
            elements[(_hashable(element.value), element.timestamp,
                      tuple(element.windows), element.pane_info)] += 1
    counts, sizes, user_metrics, read_index = {}, {}, {}, -1
    for info in infos:
        if info.urn == monitoring_infos.ELEMENT_COUNT_URN:
            counts[info.labels["PCOLLECTION"]] = monitoring_infos.extract_counter_value(info)
        elif info.urn == monitoring_infos.SAMPLED_BYTE_SIZE_URN:
            sizes[info.labels["PCOLLECTION"]] = monitoring_infos.extract_distribution(info)
        elif info.urn == monitoring_infos.DATA_CHANNEL_READ_INDEX:
            read_index = monitoring_infos.extract_counter_value(info)
        elif info.urn in monitoring_infos.USER_METRIC_URNS:
            key = (info.urn, info.labels["PTRANSFORM"], info.labels["NAMESPACE"],
                   info.labels["NAME"])
            user_metrics[key] = _user_metric_value(info)
    return StageRun(elements, written, counts, sizes, user_metrics, read_index,
                    chains_of(descriptor), descriptor, processor)


def run_both(proto, first_step: str, inputs, bundles: int = 1) -> tuple[StageRun, StageRun]:
    return (run_stage(proto, first_step, inputs, chain=False, bundles=bundles),
            run_stage(proto, first_step, inputs, chain=True, bundles=bundles))


def output_of(descriptor, step: str) -> str:
    (transform,) = [t for t in _all_transforms(descriptor) if t.unique_name == step]
    (pcollection,) = transform.outputs.values()
    return pcollection


def _all_transforms(descriptor) -> list[Any]:
    found = []
    for transform in descriptor.transforms.values():
        if transform.spec.urn == CHAINED_STEPS_URN:
            steps = beam_runner_api_pb2.Components.FromString(transform.spec.payload)
            found += list(steps.transforms.values())
        else:
            found.append(transform)
    return found


# ---------------------------------------------------------------------------------------
# Comparison cases.

VALUES = ("sliding",)  # element-only steps: carried windows and panes are what matter
WINDOWS = ("global", "sliding")  # results and WindowInto: the window kind matters too
PAIRS = tuple((k, 10 * k) for k in range(7))


@dataclasses.dataclass
class Case:
    build: Callable[[Any], Any]
    chains: tuple[tuple[str, ...], ...]  # the labels of each chain's steps, in order
    values: Sequence[Any] = tuple(range(7))
    windowings: tuple[str, ...] = VALUES
    ticks: bool = True  # the user functions count (user metrics must show)
    outputs: bool = True  # elements reach the stage's output


def one(build, *steps, **settings) -> Case:
    """A case whose steps make one chain."""
    return Case(build, (tuple(steps),), **settings)


def _fan_out(pc):
    doubled = pc | "Double" >> beam.Map(double)
    left = doubled | "Left" >> beam.Map(plus_one)
    right = doubled | "Right" >> beam.Map(add, 3) | "RightTwice" >> beam.FlatMap(pair_list)
    return (left, right) | "Both" >> beam.Flatten()


def _deep(count: int, function=None):
    def build(pc):
        for index in range(count):
            pc = pc | f"Deep{index}" >> beam.FlatMap(function or singleton_list)
        return pc
    return build


def windowed_singleton(x, window=beam.DoFn.WindowParam):
    return [x]


CASES: dict[str, Case] = {
    "map": one(lambda pc: pc | "Double" >> beam.Map(double), "Double"),
    "map_extra_argument": one(lambda pc: pc | "AddThree" >> beam.Map(add, 3), "AddThree"),
    "map_keyword_argument": one(lambda pc: pc | "AddFour" >> beam.Map(add, amount=4),
                                "AddFour"),
    "map_default_argument": one(lambda pc: pc | "AddDefault" >> beam.Map(add_default),
                                "AddDefault"),
    "map_returns_none": one(lambda pc: pc | "Nones" >> beam.Map(returns_none), "Nones"),
    "map_builtin": one(lambda pc: pc | "Text" >> beam.Map(str), "Text", ticks=False),
    "map_partial": one(lambda pc: pc | "Partial" >> beam.Map(functools.partial(add, amount=2)),
                       "Partial"),
    "map_callable_object": one(lambda pc: pc | "Callable" >> beam.Map(Quintuple()),
                               "Callable"),
    "flat_map_generator": one(lambda pc: pc | "Twice" >> beam.FlatMap(twice_generator),
                              "Twice"),
    "flat_map_list": one(lambda pc: pc | "Pairs" >> beam.FlatMap(pair_list), "Pairs"),
    "flat_map_none": one(lambda pc: pc | "Nothing" >> beam.FlatMap(returns_none),
                         "Nothing", outputs=False),
    "flat_map_empty": one(lambda pc: pc | "Empty" >> beam.FlatMap(returns_empty),
                          "Empty", outputs=False),
    "flat_map_str": one(lambda pc: pc | "Letters" >> beam.FlatMap(returns_text), "Letters"),
    "flat_map_range": one(lambda pc: pc | "Upto" >> beam.FlatMap(upto), "Upto"),
    "filter_some": one(lambda pc: pc | "Even" >> beam.Filter(is_even), "Even"),
    "filter_none": one(lambda pc: pc | "Never" >> beam.Filter(never), "Never",
                       outputs=False),
    "map_tuple": one(lambda pc: pc | "AddPair" >> beam.MapTuple(add_pair), "AddPair",
                     values=PAIRS),
    "flat_map_tuple": one(lambda pc: pc | "Spread" >> beam.FlatMapTuple(spread_pair),
                          "Spread", values=PAIRS),
    "with_keys_function": one(lambda pc: pc | "KeyOf" >> beam.WithKeys(key_of), "KeyOf"),
    "with_keys_constant": one(lambda pc: pc | "KeyK" >> beam.WithKeys("k"), "KeyK",
                              ticks=False),
    "keys": one(lambda pc: pc | "Keys" >> beam.Keys(), "Keys", values=PAIRS, ticks=False),
    "values": one(lambda pc: pc | "Values" >> beam.Values(), "Values", values=PAIRS,
                  ticks=False),
    "kv_swap": one(lambda pc: pc | "Swap" >> beam.KvSwap(), "Swap", values=PAIRS,
                   ticks=False),
    "dofn_yields": one(lambda pc: pc | "Triple" >> beam.ParDo(Triple()), "Triple"),
    "dofn_returns_list": one(lambda pc: pc | "ListTwice" >> beam.ParDo(ListTwice()),
                             "ListTwice"),
    "dofn_with_extra_argument": one(lambda pc: pc | "Scaled" >> beam.ParDo(Scaled(), 4),
                                    "Scaled"),
    "every_kind_of_user_metric": one(lambda pc: pc | "Measure" >> beam.Map(measure),
                                     "Measure"),
    "several_in_a_row": one(
        lambda pc: (pc | "ToPair" >> beam.Map(to_pair)
                    | "Spread" >> beam.FlatMapTuple(spread_pair)
                    | "Swap" >> beam.KvSwap() | "Values" >> beam.Values()
                    | "Even" >> beam.Filter(is_even) | "Twice" >> beam.FlatMap(twice_generator)
                    | "Triple" >> beam.ParDo(Triple()) | "KeyOf" >> beam.WithKeys(key_of)
                    | "Keys" >> beam.Keys() | "AddThree" >> beam.Map(add, 3)
                    | "Measure" >> beam.Map(measure)),
        "ToPair", "Spread", "Swap", "Values", "Even", "Twice", "Triple", "KeyOf", "Keys",
        "AddThree", "Measure"),
    "map_then_filter_none": one(
        lambda pc: pc | "Double" >> beam.Map(double) | "Never" >> beam.Filter(never),
        "Double", "Never", outputs=False),
    "fan_out_and_flatten": Case(_fan_out, (("Double",), ("Left",), ("Right", "RightTwice"))),
    # Results that Beam's output handler treats specially.
    "timestamped_value": one(lambda pc: pc | "Stamp" >> beam.Map(stamp), "Stamp",
                             windowings=WINDOWS),
    "timestamped_value_in_chain": one(
        lambda pc: (pc | "Double" >> beam.Map(double) | "Stamp" >> beam.Map(stamp)
                    | "Twice" >> beam.FlatMap(twice_generator)),
        "Double", "Stamp", "Twice", windowings=WINDOWS),
    "timestamped_value_after_sessions": one(
        lambda pc: (pc | "Sessions" >> beam.WindowInto(Sessions(10))
                    | "Stamp" >> beam.Map(stamp) | "Double" >> beam.Map(double)),
        "Stamp", "Double", windowings=("global",)),
    "windowed_value_global": one(lambda pc: pc | "Rewindow" >> beam.Map(global_windowed),
                                 "Rewindow", windowings=("global",)),
    "windowed_value_interval": one(
        lambda pc: pc | "Rewindow" >> beam.Map(interval_windowed), "Rewindow",
        windowings=("sliding",)),
    "tagged_output_main_tag": one(lambda pc: pc | "TagMain" >> beam.Map(tagged_main),
                                  "TagMain", windowings=WINDOWS),
    "tagged_output_undeclared_tag": one(
        lambda pc: pc | "TagElsewhere" >> beam.Map(tagged_undeclared), "TagElsewhere",
        windowings=WINDOWS),
    "values_claiming_a_class_as_their_own": one(
        lambda pc: (pc | "Claims" >> beam.FlatMap(claims_stamped_or_not)
                    | "Unclaimed" >> beam.Map(unclaimed)),
        "Claims", "Unclaimed", windowings=WINDOWS),
    "tagged_output_undeclared_in_chain": one(
        lambda pc: (pc | "Tagged" >> beam.FlatMap(yields_tagged)
                    | "Double" >> beam.Map(double)),
        "Tagged", "Double", windowings=WINDOWS),
    "tagged_output_named_main_tag": one(
        lambda pc: (pc | "Named" >> beam.ParDo(TagsByName()).with_outputs(main="main")).main,
        "Named", windowings=WINDOWS),
    # WindowInto inside a chain.
    "window_into_fixed": one(
        lambda pc: (pc | "Stamp" >> beam.Map(stamp) | "Window" >> beam.WindowInto(
            FixedWindows(60)) | "Double" >> beam.Map(double)),
        "Stamp", "Window", "Double", windowings=WINDOWS),
    "window_into_sliding": one(
        lambda pc: (pc | "Stamp" >> beam.Map(stamp) | "Window" >> beam.WindowInto(
            SlidingWindows(60, 20)) | "Double" >> beam.Map(double)),
        "Stamp", "Window", "Double", windowings=WINDOWS),
    "window_into_global": one(
        lambda pc: (pc | "Stamp" >> beam.Map(stamp) | "Window" >> beam.WindowInto(
            GlobalWindows()) | "Double" >> beam.Map(double)),
        "Stamp", "Window", "Double", windowings=WINDOWS),
    "window_into_global_unstamped": one(
        lambda pc: (pc | "Double" >> beam.Map(double)
                    | "Window" >> beam.WindowInto(GlobalWindows())),
        "Double", "Window", windowings=WINDOWS),
    "window_into_fixed_first_then_stamp": one(
        lambda pc: (pc | "Window" >> beam.WindowInto(FixedWindows(60))
                    | "Stamp" >> beam.Map(stamp)),
        "Window", "Stamp", windowings=WINDOWS),
    # A lifted CombinePerKey's precombine ends the chain before it.
    "combine_per_key_sum": one(
        lambda pc: pc | "ToPair" >> beam.Map(to_pair) | "Sum" >> beam.CombinePerKey(sum),
        "ToPair", "Sum", windowings=WINDOWS),
    "count_and_top_per_key": Case(
        lambda pc: (pc | "ToPair" >> beam.Map(to_pair) | "Count" >> combiners.Count.PerKey()
                    | "Top" >> combiners.Top.LargestPerKey(2)),
        (("ToPair", "Count"),), windowings=WINDOWS),
    "combine_fn_with_metrics": one(
        lambda pc: pc | "ToPair" >> beam.Map(to_pair)
        | "Counted" >> beam.CombinePerKey(CountedSum()),
        "ToPair", "Counted", windowings=WINDOWS),
    "window_into_fixed_then_combine": one(
        lambda pc: (pc | "Stamp" >> beam.Map(stamp) | "ToPair" >> beam.Map(to_pair)
                    | "Window" >> beam.WindowInto(FixedWindows(60))
                    | "Sum" >> beam.CombinePerKey(sum)),
        "Stamp", "ToPair", "Window", "Sum", windowings=WINDOWS),
    # Steps asking for their timestamp, window or pane (a window: once per window).
    "timestamp_param_map": one(lambda pc: pc | "Stamped" >> beam.Map(stamped_pair),
                               "Stamped", windowings=WINDOWS),
    "window_param_map": one(lambda pc: pc | "InWindow" >> beam.Map(in_window), "InWindow",
                            windowings=WINDOWS),
    "pane_param_map": one(lambda pc: pc | "Pane" >> beam.Map(pane_of), "Pane",
                          windowings=WINDOWS),
    "window_param_filter": one(
        lambda pc: (pc | "Even" >> beam.Filter(in_even_window)
                    | "Double" >> beam.Map(double)), "Even", "Double", windowings=WINDOWS),
    "every_parameter_flat_map": one(
        lambda pc: pc | "Every" >> beam.FlatMap(every_parameter), "Every",
        windowings=WINDOWS),
    "extra_argument_timestamp_and_window": one(
        lambda pc: pc | "AddAt" >> beam.Map(add_at, 3), "AddAt", windowings=WINDOWS),
    "keyword_argument_timestamp_and_window": one(
        lambda pc: pc | "AddAt" >> beam.Map(add_keyword_at, amount=4), "AddAt",
        windowings=WINDOWS),
    "map_tuple_with_timestamp": one(
        lambda pc: pc | "SumStamped" >> beam.MapTuple(sum_stamped), "SumStamped",
        values=PAIRS, windowings=WINDOWS),
    "window_param_then_timestamped_value": one(
        lambda pc: (pc | "Restamped" >> beam.Map(restamped_in_window)
                    | "Stamped" >> beam.Map(stamped_pair)),
        "Restamped", "Stamped", windowings=WINDOWS),
    "large_output_with_timestamps": one(
        lambda pc: (pc | "Many" >> beam.FlatMap(many_stamped)
                    | "InWindow" >> beam.Map(in_window)), "Many", "InWindow",
        windowings=WINDOWS),
    # DoFns with bundle methods: Nexmark's shape, outputs from finish_bundle.
    "monitors_around_steps": one(
        lambda pc: (pc | "Parse" >> beam.Map(double) | "Stamp" >> beam.Map(stamp)
                    | "Events" >> beam.ParDo(Monitored("event"))
                    | "Query" >> beam.Map(plus_one)
                    | "Results" >> beam.ParDo(Monitored("result"))
                    | "Global" >> beam.WindowInto(GlobalWindows())),
        "Parse", "Stamp", "Events", "Query", "Results", "Global", windowings=WINDOWS),
    "finish_bundle_outputs_through_the_chain": one(
        lambda pc: (pc | "Buffered" >> beam.ParDo(Buffered())
                    | "Stamped" >> beam.Map(stamped_pair)),
        "Buffered", "Stamped", windowings=WINDOWS),
    "finish_bundle_outputs_last": one(
        lambda pc: pc | "Double" >> beam.Map(double) | "Buffered" >> beam.ParDo(Buffered()),
        "Double", "Buffered", windowings=WINDOWS),
    "finish_bundle_outputs_nothing": one(
        lambda pc: (pc | "Never" >> beam.Filter(never) | "Buffered" >> beam.ParDo(Buffered())
                    | "Double" >> beam.Map(double)),
        "Never", "Buffered", "Double", outputs=False),
    "finish_bundle_outputs_into_the_precombine": one(
        lambda pc: (pc | "Buffered" >> beam.ParDo(BufferedPairs())
                    | "Sum" >> beam.CombinePerKey(sum)),
        "Buffered", "Sum", windowings=WINDOWS),
    "finish_bundle_outputs_into_fixed_windows_and_the_precombine": one(
        lambda pc: (pc | "Buffered" >> beam.ParDo(BufferedPairs())
                    | "Window" >> beam.WindowInto(FixedWindows(60))
                    | "Sum" >> beam.CombinePerKey(sum)),
        "Buffered", "Window", "Sum", windowings=WINDOWS),
    "earliest_timestamps_keep_the_precombine_apart": one(
        lambda pc: (pc | "Stamp" >> beam.Map(stamp) | "ToPair" >> beam.Map(to_pair)
                    | "Window" >> beam.WindowInto(
                        FixedWindows(60), timestamp_combiner=TimestampCombiner.OUTPUT_AT_EARLIEST)
                    | "Sum" >> beam.CombinePerKey(sum)),
        "Stamp", "ToPair", "Window"),
}



def _params():
    return [pytest.param(name, windowing, id=f"{name}-{windowing}")
            for name, case in CASES.items() for windowing in case.windowings]


@functools.cache
def _compared(name: str, windowing: str) -> tuple[Case, StageRun, StageRun]:
    """Both runs of a case (cached: the tests of a case read the same runs)."""
    case = CASES[name]
    proto = build_proto(case.build, windowing)
    off, on = run_both(proto, case.chains[0][0], inputs_for(case.values, windowing))
    return case, off, on


@pytest.mark.parametrize("name, windowing", _params())
def test_chain_gives_beams_elements_and_user_metrics(name, windowing):
    case, off, on = _compared(name, windowing)
    # (a) the chains are used when on, and only then
    assert sorted(labels(chain) for chain in on.chains) == sorted(map(list, case.chains))
    assert off.chains == []
    # (b) the same elements, timestamps, windows and panes
    assert on.elements == off.elements
    assert (sum(off.elements.values()) > 0) == case.outputs
    # (d) the same user metrics, under the same steps
    assert on.user_metrics == off.user_metrics
    assert bool(off.user_metrics) == case.ticks
    chained = {step for chain in case.chains for step in chain}
    assert {labels([step])[0] for _, step, _, _ in on.user_metrics} <= chained


@pytest.mark.parametrize("name, windowing", _params())
def test_chain_counts_elements_as_beam(name, windowing):
    case, off, on = _compared(name, windowing)
    # (c) every PCollection's element count, as Beam's operations count them
    assert on.counts == off.counts
    outputs = {output_of(on.descriptor, step) for chain in on.chains for step in chain}
    assert outputs <= set(on.counts)
    for pcollection, written in on.written.items():
        assert on.counts[pcollection] == written
    if case.outputs:
        assert all(on.counts[pcollection] > 0 for pcollection in outputs)


@pytest.mark.parametrize("name, windowing", [
    param for param in _params() if any(len(chain) > 1 for chain in CASES[param.values[0]].chains)])
def test_chain_samples_sizes_as_beam(name, windowing):
    """The sampled byte sizes of every PCollection whose elements were all sampled (Beam
    samples each of the first ten, then at random)."""
    _, off, on = _compared(name, windowing)
    sampled = {pc for pc, count in off.counts.items() if 0 < count <= 10}
    inner = {output_of(on.descriptor, step) for chain in on.chains for step in chain[:-1]}
    assert inner <= set(on.sizes)
    assert {pc: on.sizes[pc] for pc in sampled} == {pc: off.sizes[pc] for pc in sampled}


def test_tagged_outputs_go_where_beam_sends_them():
    """Spelled out for the tagged cases above: Beam's worker sends a TaggedOutput to its
    step's only output tag in the proto (``None``, also for a ParDo that names its main
    output ``main``) to the main output, and drops one to any other tag."""
    def values(name):
        _, off, on = _compared(name, "global")
        assert on.elements == off.elements
        return sorted(value for (value, *_), count in on.elements.items() for _ in range(count))

    assert values("tagged_output_main_tag") == list(range(7))
    assert values("tagged_output_undeclared_tag") == [0, 2, 4, 6]
    assert values("tagged_output_named_main_tag") == (
        list(range(-6, 1)) + list(range(1000, 1007)))


def test_two_chained_maps_count_as_beam():
    """The smallest case of a collision found at 3248afa: the first step's output and the
    chain's own output were one counter ('<first step>-out0-ElementCount') and both
    PCollections reported the sum (6 and 6 here)."""
    proto = build_proto(lambda pc: pc | "Double" >> beam.Map(double)
                        | "Inc" >> beam.Map(plus_one))
    off, on = run_both(proto, "Double", inputs_for([1, 2, 3]))
    first = output_of(off.descriptor, "Double")
    (last,) = off.written
    assert off.counts[first] == off.counts[last] == 3
    assert on.chains == [["Double", "Inc"]] and on.elements == off.elements
    assert (on.counts[first], on.counts[last]) == (3, 3)


def test_a_run_of_many_looping_steps_is_chained_whole_and_runs():
    """25 FlatMaps in a row. Each is a ``for`` block of the chain's function, and Python
    allows 20 nested blocks in a function: at 3248afa, 20 such steps made the stage's
    setup raise SyntaxError('too many statically nested blocks'); then a run cut at
    MAX_CHAIN_STEPS left the steps after the cut unchained. Now: several chains, every
    step in one, Beam's elements."""
    proto = build_proto(_deep(25))
    off, on = run_both(proto, "Deep0", inputs_for([1, 2], "sliding"))
    chained = [step for chain in on.chains for step in labels(chain)]
    assert sorted(chained) == sorted(f"Deep{index}" for index in range(25))
    assert len(on.chains) >= 2
    assert on.elements == off.elements and sum(on.elements.values()) == 2


def test_steps_invoked_once_per_window_open_two_blocks_each():
    """A step asking for its window loops over the element's windows and over its
    outputs: 12 such FlatMaps are 24 nested blocks, more than a function may hold. Chains
    are cut to fit; every step runs, once per window."""
    proto = build_proto(_deep(12, windowed_singleton), "sliding")
    off, on = run_both(proto, "Deep0", inputs_for([1, 2], "sliding"))
    chained = [step for chain in on.chains for step in labels(chain)]
    assert sorted(chained) == sorted(f"Deep{index}" for index in range(12))
    assert len(on.chains) >= 2
    assert on.elements == off.elements and sum(on.elements.values()) == 6


def test_precombine_full_of_keys_flushes_and_adds_each_window_once():
    """A table holding its limit of keys is flushed whole in the middle of an element in
    several windows: the windows it was added to before the flush are flushed with it and
    not added again, so each (window, key) sums to what Beam's precombine gives."""
    windowing = beam.WindowInto(SlidingWindows(60, 20)).windowing
    precombine = ChainedPrecombine(beam.CombineFn.maybe_from_callable(sum), windowing)
    precombine.max_keys = 2
    flushed = []
    add = precombine.adder(flushed.append)
    expected = collections.Counter()
    for key in range(5):
        element = WindowedValue((key, key + 1), 70,
                                windowing.windowfn.assign(WindowFn.AssignContext(70)))
        for window in element.windows:
            expected[(window, key)] += key + 1
        add(element, element.value)
    precombine.flush(flushed.append)
    totals = collections.Counter()
    for element in flushed:
        (key, accumulator), = [element.value]
        totals[(element.windows[0], key)] += sum(accumulator) if isinstance(
            accumulator, list) else accumulator
    assert totals == expected and len(expected) == 15


@pytest.mark.parametrize("windowing", WINDOWS)
def test_metrics_of_a_combine_fn_at_the_flush_are_reported_as_beam(windowing):
    """``CombineFn.compact`` runs when the precombine flushes, at the bundle's end: Beam
    counts its metrics under the ParDo before the precombine (its own operation has no
    state of its own there). At 22ab20d the chain counted them in its operation's own
    container, which it never reported: they were lost."""
    proto = build_proto(lambda pc: pc | "ToPair" >> beam.Map(to_pair)
                        | "Counted" >> beam.CombinePerKey(CompactCounted()), windowing)
    off, on = run_both(proto, "ToPair", inputs_for(range(7), windowing))
    assert [labels(chain) for chain in on.chains] == [["ToPair", "Counted"]]
    assert on.elements == off.elements
    compacts = [key for key in off.user_metrics if key[3] == "compact"]
    assert compacts and on.user_metrics == off.user_metrics


def test_a_second_bundle_counts_only_its_own_elements():
    """A Spark task runs many bundles on one processor: counts and user metrics are per
    bundle."""
    proto = build_proto(lambda pc: pc | "Twice" >> beam.FlatMap(twice_generator))
    off, on = run_both(proto, "Twice", inputs_for(range(4), "sliding"), bundles=2)
    assert on.chains == [["Twice"]]
    assert on.elements == off.elements and sum(on.elements.values()) == 8
    assert on.counts == off.counts and on.counts[output_of(on.descriptor, "Twice")] == 8
    assert on.user_metrics == off.user_metrics
    assert list(on.user_metrics.values()) == [4]


def test_a_lone_window_into_is_not_chained():
    proto = build_proto(lambda pc: pc | "Window" >> beam.WindowInto(FixedWindows(60)))
    off, on = run_both(proto, "Window", inputs_for(range(4), "sliding"))
    assert on.chains == [] and on.elements == off.elements
    assert sum(on.elements.values()) == 12  # once per input window


def test_window_into_gives_each_input_window_its_element_without_pane():
    """What Beam's WindowIntoDoFn gives, spelled out: one output per input window, the
    windows of the timestamp, no pane (so the comparisons above compare the right thing)."""
    proto = build_proto(lambda pc: pc | "Double" >> beam.Map(double)
                        | "Window" >> beam.WindowInto(FixedWindows(60)))
    off, on = run_both(proto, "Double", [WindowedValue(4, 75, SLIDING.assign(
        WindowFn.AssignContext(Timestamp(75))), EARLY)])
    expected = {(8, Timestamp(75), (IntervalWindow(60, 120),), PANE_INFO_UNKNOWN): 3}
    assert on.elements == off.elements == expected


#: A windowed value whose window's duration is a varint of more than ten bytes: a timestamp
#: (8 bytes), one window (a count of 4 bytes; its end, 8 bytes; then the varint), all within
#: the input, so decoding fails the same way wherever it runs. (A lone stray byte does not:
#: Beam's compiled input stream reads past its end without a word, and decoded one as an
#: element whose value was None when this test ran alone.)
CORRUPT_WINDOWED_VALUE = (b"\x80" + b"\x00" * 7 + b"\x00\x00\x00\x01" + b"\x80" + b"\x00" * 7
                          + b"\xff" * 10 + b"\x01")


def test_the_decode_loop_reads_as_beams_data_input(monkeypatch):
    """decode_loop.py against Beam's own DataInputOperation: same elements, counts and
    read index; a corrupt input raises the same error."""
    from runners.spark.worker import bundles

    proto = build_proto(lambda pc: pc | "Double" >> beam.Map(double), "sliding")
    inputs = inputs_for(range(5), "sliding")
    ours = run_stage(proto, "Double", inputs, chain=True)
    plan = execution_plan.plan(proto)
    stage = stage_with(plan, "Double")
    descriptor = beam_fn_api_pb2.ProcessBundleDescriptor.FromString(stage.descriptor)
    input_id, data = encoded_inputs(stage, descriptor, PipelineContext(plan.components),
                                    inputs)
    errors = []
    for swap in (True, False):
        if not swap:
            monkeypatch.setattr(bundles, "use_decode_loop", lambda descriptor: 0)
            beams = run_stage(proto, "Double", inputs, chain=True)
            assert beams.elements == ours.elements and beams.counts == ours.counts
            assert beams.read_index == ours.read_index == 5
        processor = StageProcessor(stage.descriptor)
        kinds = {type(op).__name__ for op in processor.processor.ops.values()}
        assert ("DecodeLoop" in kinds) == swap
        with pytest.raises(ValueError) as caught:
            processor.run_bundle({input_id: [data + CORRUPT_WINDOWED_VALUE]}, {})
        errors.append((type(caught.value), str(caught.value)))
    assert errors[0] == errors[1] and "Error decoding input stream" in errors[0][1]


# ---------------------------------------------------------------------------------------
# Exceptions.

def _raised(proto, first_step: str, values, chain: bool) -> BaseException:
    with pytest.raises(Exception) as caught:
        run_stage(proto, first_step, inputs_for(values), chain=chain)
    return caught.value


def _causes(error: BaseException) -> list[BaseException]:
    found, seen = [], set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        found.append(error)
        error = error.__cause__ or error.__context__
    return found


#: name -> (the steps, a step of the failing stage, the step the error must name (None:
#: Beam names none), the original error's type and message (None: not checked)).
ERROR_CASES = {
    "map_raises": (lambda pc: pc | "Explode" >> beam.Map(boom), "Explode", "Explode",
                   ValueError, "boom"),
    "generator_raises_after_one": (
        lambda pc: pc | "Yields" >> beam.FlatMap(yield_then_raise)
        | "Double" >> beam.Map(double), "Yields", "Yields", ValueError, "after one of 1"),
    "no_args": (lambda pc: pc | "NoArgs" >> beam.Map(key_error), "NoArgs", "NoArgs",
                KeyError, None),
    "first_arg_not_a_str": (lambda pc: pc | "Number" >> beam.Map(number_error), "Number",
                            "Number", ValueError, None),
    "later_step": (
        lambda pc: pc | "Double" >> beam.Map(double) | "Even" >> beam.Filter(is_even)
        | "Third" >> beam.Map(boom), "Double", "Third", ValueError, "boom"),
    "dofn_returns_str": (lambda pc: pc | "Text" >> beam.ParDo(ReturnsText()), "Text", "Text",
                         TypeError, None),
    "output_not_encodable": (
        lambda pc: pc | "Double" >> beam.Map(double) | "Lock" >> beam.Map(unpicklable),
        "Double", "Lock", None, None),
    "after_the_chain": (
        lambda pc: pc | "Double" >> beam.Map(double) | "Inc" >> beam.Map(plus_one)
        | "Late" >> beam.Map(failing_with_timestamp), "Double", "Late", ValueError, None),
    "after_a_window_into": (
        lambda pc: pc | "Double" >> beam.Map(double)
        | "Window" >> beam.WindowInto(FixedWindows(60)) | "Lock" >> beam.Map(unpicklable),
        "Double", "Lock", None, None),
    "combine_fn_raises_in_the_precombine": (
        lambda pc: pc | "ToPair" >> beam.Map(to_pair) | "Fails" >> beam.CombinePerKey(AddFails()),
        "ToPair", "ToPair", ValueError, "bad combine"),
    "window_param_step_raises": (
        lambda pc: pc | "Double" >> beam.Map(double) | "Fails" >> beam.ParDo(FailsIn("process")),
        "Double", "Fails", ValueError, "cannot process 2"),
    "start_bundle_raises": (
        lambda pc: pc | "Double" >> beam.Map(double)
        | "Fails" >> beam.ParDo(FailsIn("start_bundle")), "Double", "Fails", ValueError,
        "cannot start"),
    "start_bundle_outputs": (
        lambda pc: pc | "Double" >> beam.Map(double)
        | "Fails" >> beam.ParDo(FailsIn("start_bundle_outputs")), "Double", "Fails", None,
        None),
    "finish_bundle_raises": (
        lambda pc: pc | "Fails" >> beam.ParDo(FailsIn("finish_bundle"))
        | "Double" >> beam.Map(double), "Fails", "Fails", ValueError, "cannot finish"),
    "finish_bundle_outputs_a_plain_value": (
        lambda pc: pc | "Fails" >> beam.ParDo(FailsIn("finish_bundle_plain_value"))
        | "Double" >> beam.Map(double), "Fails", "Fails", None, None),
    "finish_bundle_outputs_to_a_tag_not_a_str": (
        lambda pc: pc | "Fails" >> beam.ParDo(FailsIn("finish_bundle_bad_tag"))
        | "Double" >> beam.Map(double), "Fails", "Fails", None, None),
    "finish_bundle_raises_after_an_output": (
        lambda pc: pc | "Fails" >> beam.ParDo(FailsIn("finish_bundle_then_raise"))
        | "Double" >> beam.Map(double), "Fails", "Fails", ValueError,
        "cannot finish after one"),
    "a_step_after_finish_bundle_raises": (
        lambda pc: pc | "Buffered" >> beam.ParDo(Buffered())
        | "NoTens" >> beam.Map(fails_on_tens), "Buffered", "NoTens", ValueError,
        "no tens: 10"),
    "combine_fn_raises_at_the_flush": (
        lambda pc: pc | "ToPair" >> beam.Map(to_pair)
        | "Compact" >> beam.CombinePerKey(BadCompact()), "ToPair", None, None, None),
}


@pytest.mark.parametrize("name", list(ERROR_CASES))
def test_errors_are_raised_as_beam_raises_them(name):
    build, stage_step, named, original_type, original_message = ERROR_CASES[name]
    proto = build_proto(build)
    off = _raised(proto, stage_step, [1, 2, 3], chain=False)
    on = _raised(proto, stage_step, [1, 2, 3], chain=True)
    plan = execution_plan.plan(proto, chain_steps=True)
    descriptor = beam_fn_api_pb2.ProcessBundleDescriptor.FromString(
        stage_with(plan, stage_step).descriptor)
    assert chains_of(descriptor), "the failing stage runs a chain"
    assert type(on) is type(off)
    assert str(on) == str(off)
    if named is None:
        assert "[while running" not in str(on)
    else:
        assert str(on).endswith(f"[while running '{named}']")
    if original_type is not None:
        originals = [error for error in _causes(on)[1:] if type(error) is original_type]
        assert originals, f"no {original_type.__name__} chained to {on!r}"
        if original_message is not None:
            assert str(originals[0]) == original_message


# ---------------------------------------------------------------------------------------
# DoFn lifecycle.

def test_setup_and_teardown_run_in_a_chain():
    proto = build_proto(lambda pc: pc | "Double" >> beam.Map(double)
                        | "Recorded" >> beam.ParDo(Recorded()) | "Inc" >> beam.Map(plus_one))
    events = {}
    for chain in (False, True):
        del LIFECYCLE[:]
        run = run_stage(proto, "Double", inputs_for([1, 2, 3]), chain=chain)
        assert LIFECYCLE == ["setup"] + ["process"] * 3
        run.processor.processor.shutdown()
        events[chain] = list(LIFECYCLE)
        if chain:
            assert [labels(steps) for steps in run.chains] == [["Double", "Recorded", "Inc"]]
    assert events[True] == events[False] == ["setup"] + ["process"] * 3 + ["teardown"]


def test_a_failing_setup_is_raised_as_beam_raises_it():
    proto = build_proto(lambda pc: pc | "Double" >> beam.Map(double)
                        | "NoSetup" >> beam.ParDo(SetupFails()))
    errors = []
    for chain in (False, True):
        plan = execution_plan.plan(proto, chain_steps=chain)
        descriptor = stage_with(plan, "Double").descriptor
        with pytest.raises(Exception) as caught:
            StageProcessor(descriptor)
        errors.append(caught.value)
    off, on = errors
    assert type(on) is type(off) is RuntimeError
    assert str(on) == str(off) == "no connection [while running 'NoSetup']"


# ---------------------------------------------------------------------------------------
# Parameters and bundle methods, spelled out.

@pytest.mark.parametrize("windowing", WINDOWS)
def test_a_timestamped_value_hands_its_own_timestamp_on_as_beam(windowing):
    """Beam's output handler makes the element of a ``TimestampedValue`` with that value's
    own ``Timestamp``: the next step asking for its timestamp gets that very object (none
    made again from microseconds), in the global window and in sliding windows."""
    proto = build_proto(lambda pc: pc | "Stamp" >> beam.Map(stamp_kept)
                        | "Same" >> beam.Map(same_stamp), windowing)
    off, on = run_both(proto, "Stamp", inputs_for(range(4), windowing))
    assert on.chains == [["Stamp", "Same"]]
    assert on.elements == off.elements
    assert {value for (value, *_) in on.elements} == {
        (x, True, (1000 + 7 * x) * 1_000_000) for x in range(4)}
    assert on.user_metrics == off.user_metrics


def test_a_step_asking_for_its_window_runs_once_per_window_as_beam():
    """What Beam's PerWindowInvoker gives, spelled out: an element in three windows is
    processed three times, each output in its one window, without the element's pane."""
    proto = build_proto(lambda pc: pc | "Double" >> beam.Map(double)
                        | "InWindow" >> beam.Map(in_window), "sliding")
    windows = SLIDING.assign(WindowFn.AssignContext(Timestamp(75)))
    off, on = run_both(proto, "Double", [WindowedValue(4, 75, windows, EARLY)])
    assert on.chains == [["Double", "InWindow"]]
    expected = {((8, str(window)), Timestamp(75), (window,), PANE_INFO_UNKNOWN): 1
                for window in windows}
    assert on.elements == off.elements == expected
    assert on.user_metrics == off.user_metrics
    assert sorted(on.user_metrics.values()) == [1, 3]  # double once, in_window thrice


def test_what_finish_bundle_outputs_goes_through_the_rest_of_the_chain():
    """Each element again, tens of it, from finish_bundle, in its window: through the next
    step, counted in the PCollections between; the output to an undeclared tag dropped."""
    proto = build_proto(lambda pc: pc | "Buffered" >> beam.ParDo(Buffered())
                        | "Inc" >> beam.Map(plus_one), "sliding")
    off, on = run_both(proto, "Buffered", inputs_for(range(4), "sliding"))
    assert on.chains == [["Buffered", "Inc"]]
    assert on.elements == off.elements
    assert sorted(value for (value, *_), count in on.elements.items()
                  for _ in range(count)) == sorted([2, 2, 2, 4, 4, 4] + [
                      10 * x + 1 for x in range(4) for _ in range(3)])
    buffered = output_of(on.descriptor, "Buffered")
    assert on.counts == off.counts and on.counts[buffered] == 18
    assert on.user_metrics == off.user_metrics


def test_setup_bundle_methods_and_teardown_are_called_in_beams_order():
    """Beam's bundle processor sets up and starts its operations from the last to the
    first, finishes and tears them down from the first to the last; what a finish_bundle
    outputs is processed by the steps after it (not finished yet). Twice: two bundles."""
    proto = build_proto(lambda pc: pc | "First" >> beam.ParDo(CallsRecorded("first"))
                        | "Second" >> beam.ParDo(CallsRecorded("second")))
    calls = {}
    for chain in (False, True):
        del CALLS[:]
        run = run_stage(proto, "First", inputs_for([1, 2]), chain=chain, bundles=2)
        run.processor.processor.shutdown()
        calls[chain] = list(CALLS)
        assert run.chains == ([["First", "Second"]] if chain else [])
    bundle = ([("start_bundle", "second"), ("start_bundle", "first")]
              + [("process", "first"), ("process", "second")] * 2
              + [("finish_bundle", "first"), ("process", "second"),
                 ("finish_bundle", "second")])
    assert calls[True] == calls[False] == (
        [("setup", "second"), ("setup", "first")] + bundle * 2
        + [("teardown", "first"), ("teardown", "second")])


def test_monitors_count_each_bundle_as_beam():
    """Nexmark's shape (metrics in start_bundle, process and finish_bundle) on a processor
    running two bundles: each bundle's metrics are its own."""
    proto = build_proto(lambda pc: (pc | "Stamp" >> beam.Map(stamp)
                                    | "Events" >> beam.ParDo(Monitored("event"))
                                    | "Double" >> beam.Map(double)), "sliding")
    off, on = run_both(proto, "Stamp", inputs_for(range(5), "sliding"), bundles=2)
    assert on.chains == [["Stamp", "Events", "Double"]]
    assert on.elements == off.elements and on.counts == off.counts
    assert on.user_metrics == off.user_metrics
    values = {name: value for (_, step, _, name), value in on.user_metrics.items()}
    assert (values["event.elements"], values["event.bundles"], values["event.finished"]) == (
        5, 1, 1)


# ---------------------------------------------------------------------------------------
# Steps that keep Beam's operation.

def _side_input_step(pc):
    side = pc.pipeline | "Side" >> beam.Create([7])
    return pc | "X" >> beam.Map(lambda x, s: x + s, beam.pvalue.AsSingleton(side))


UNCHAINED = {
    "side_input": (_side_input_step, "side input"),
    "key_param": (lambda pc: pc | "X" >> beam.Map(with_key), "KeyParam"),
    "bundle_context": (lambda pc: pc | "X" >> beam.ParDo(WithBundleContext()),
                       "BundleContextParam"),
    "several_outputs": (
        lambda pc: (pc | "X" >> beam.ParDo(Split()).with_outputs("odd", main="even")).even,
        "outputs"),
    "state": (lambda pc: pc | "X" >> beam.ParDo(Stateful()), "state"),
}


@pytest.mark.parametrize("name", list(UNCHAINED))
def test_steps_that_need_more_than_the_element_keep_beams_operation(name):
    step, reason_word = UNCHAINED[name]
    proto = build_proto(lambda pc: (
        step(pc | "Before1" >> beam.Map(to_pair) | "Before2" >> beam.Map(first_of)
             | "Before3" >> beam.Map(to_pair))
        | "After1" >> beam.Map(first_of) | "After2" >> beam.Map(plus_one)))
    (x,) = [t for t in proto.components.transforms.values()
            if labels([t.unique_name]) == ["X"] and not t.subtransforms]
    reason = why_not_chained(x)
    assert reason is not None and reason_word in reason, reason
    plan = execution_plan.plan(proto, chain_steps=True)
    chains, plain = [], set()
    for stage in plan.stages:
        if stage.descriptor and stage.kind == execution_plan.SDK_STAGE:
            descriptor = beam_fn_api_pb2.ProcessBundleDescriptor.FromString(stage.descriptor)
            chains += [labels(chain) for chain in chains_of(descriptor)]
            plain |= {t.unique_name for t in descriptor.transforms.values()
                      if t.spec.urn != CHAINED_STEPS_URN}
    assert x.unique_name in plain
    assert all("X" not in chain for chain in chains)
    assert ["Before1", "Before2", "Before3"] in chains
    assert ["After1", "After2"] in chains


def test_a_step_asking_for_its_key_runs_as_beam_between_chains():
    proto = build_proto(lambda pc: pc | "ToPair" >> beam.Map(to_pair)
                        | "Inc" >> beam.MapTuple(lambda k, v: (k, v + 1))
                        | "X" >> beam.Map(with_key) | "Swap" >> beam.KvSwap()
                        | "Keys" >> beam.Keys())
    off, on = run_both(proto, "ToPair", inputs_for(range(5), "sliding"))
    assert sorted(map(labels, on.chains)) == [["Swap", "Keys"], ["ToPair", "Inc"]]
    assert on.elements == off.elements and on.user_metrics == off.user_metrics
    assert sorted(value for value, *_ in on.elements) == [1, 2, 3, 4, 5]


def test_a_merging_window_fn_is_not_chained():
    proto = build_proto(lambda pc: pc | "Double" >> beam.Map(double)
                        | "Window" >> beam.WindowInto(Sessions(10))
                        | "Inc" >> beam.Map(plus_one))
    (window,) = [t for t in proto.components.transforms.values()
                 if t.unique_name == "Window"]
    assert "not a ParDo" in why_not_chained(window)
    plan = execution_plan.plan(proto, chain_steps=True)
    descriptor = beam_fn_api_pb2.ProcessBundleDescriptor.FromString(
        stage_with(plan, "Double").descriptor)
    assert sorted(map(labels, chains_of(descriptor))) == [["Double"], ["Inc"]]


# ---------------------------------------------------------------------------------------
# Type checks.

def to_text(x):
    return str(x)


def _typed(pc):
    return pc | "Typed" >> beam.Map(to_text).with_output_types(int)


def test_runtime_type_check_wraps_the_step_and_fails_in_both_modes():
    """``--runtime_type_check``: Beam's ``Pipeline.run`` wraps every ParDo in a type-checking
    DoFn (``TypeCheckVisitor``) before the runner sees it; the wrapped step is not chained,
    and both modes raise the same TypeCheckError naming the step."""
    from apache_beam.typehints.typecheck import TypeCheckVisitor

    options = PipelineOptions(["--runtime_type_check"])
    proto = build_proto(lambda pc: _typed(pc | "Double" >> beam.Map(double)), options=options,
                        visit=TypeCheckVisitor())
    (typed,) = [t for t in proto.components.transforms.values() if t.unique_name == "Typed"]
    assert "type check" in why_not_chained(typed)
    off = _raised(proto, "Double", [1, 2], chain=False)
    on = _raised(proto, "Double", [1, 2], chain=True)
    assert type(on) is type(off) and isinstance(on, TypeCheckError)
    assert str(on) == str(off) and "Typed" in str(on)


def test_the_runtime_type_check_option_alone_checks_nothing_in_process():
    """``pipeline_proto`` with ``--runtime_type_check`` and no visitor: no wrapper (the
    check is ``Pipeline.run``'s, see the test above), so the step is chained, and the str
    it returns against its ``int`` hint fails, in both modes the same way, where the
    output's ``VarIntCoder`` first meets it (no TypeCheckError)."""
    options = PipelineOptions(["--runtime_type_check"])
    proto = build_proto(_typed, options=options)
    plan = execution_plan.plan(proto, chain_steps=True)
    descriptor = beam_fn_api_pb2.ProcessBundleDescriptor.FromString(
        stage_with(plan, "Typed").descriptor)
    assert chains_of(descriptor) == [["Typed"]]
    off = _raised(proto, "Typed", [1, 2], chain=False)
    on = _raised(proto, "Typed", [1, 2], chain=True)
    assert type(on) is type(off) and not isinstance(on, TypeCheckError)
    assert str(on) == str(off) and "[while running 'Typed']" in str(on)


def test_performance_runtime_type_check_fails_in_both_modes():
    from apache_beam.typehints.typecheck import PerformanceTypeCheckVisitor

    options = PipelineOptions(["--performance_runtime_type_check"])
    proto = build_proto(lambda pc: _typed(pc | "Double" >> beam.Map(double)),
                        options=options, visit=PerformanceTypeCheckVisitor())
    off = _raised(proto, "Double", [1, 2], chain=False)
    on = _raised(proto, "Double", [1, 2], chain=True)
    assert type(on) is type(off) and isinstance(on, TypeCheckError)
    assert str(on) == str(off) and "Typed" in str(on)


@pytest.mark.parametrize("chain", ["true", "false"])
def test_all_required_type_hints_refuse_a_map_without_hints(chain):
    options = PipelineOptions(["--type_check_strictness", "ALL_REQUIRED",
                               "--chain_simple_steps", chain])
    pipeline = beam.Pipeline(options=options)
    source = pipeline | beam.Create([1]).with_output_types(int)
    with pytest.raises(TypeCheckError, match="type-hint"):
        _ = source | "NoHints" >> beam.Map(lambda x: x)
    hinted = source | "Hinted" >> beam.Map(double).with_input_types(int).with_output_types(int)
    assert hinted.element_type is int


# ---------------------------------------------------------------------------------------
# On the SparkRunner.

def _spark_pipeline(pipeline):
    return (pipeline
            | beam.Create([(f"k{i % 3}", i) for i in range(30)])
            | "Count" >> beam.Map(_counted_pair)
            | "Keep" >> beam.Filter(lambda kv: kv[1] % 4 != 3)
            | "Window" >> beam.WindowInto(FixedWindows(10))
            | "Sum" >> beam.CombinePerKey(sum)
            | "Format" >> beam.Map(_with_window))


def _counted_pair(kv):
    Metrics.counter(NAMESPACE, "pairs").inc()
    return TimestampedValue(kv, kv[1])


def _with_window(kv, window=beam.DoFn.WindowParam):
    return f"{kv[0]}@{int(window.start)}={kv[1]}"


def _kept_sums(count: int) -> "collections.Counter[str]":
    """What both Spark pipelines below give for ``range(count)``: the sums of the values
    kept (``x % 4 != 3``) by key ``x % 3`` and 10 s window, as ``k<key>@<window start>``."""
    expected: "collections.Counter[str]" = collections.Counter()
    for i in range(count):
        if i % 4 != 3:
            expected[f"k{i % 3}@{i // 10 * 10}"] += i
    return expected


def test_on_spark_the_same_output_and_metrics_with_and_without_chains(spark_session):  # noqa: F811
    from runners.spark import SparkRunner
    from runners.spark.options import validated

    expected = _kept_sums(30)
    results = {}
    for flag in ("true", "false"):
        options = PipelineOptions(["--spark_master_url", "local[2]",
                                   "--chain_simple_steps", flag])
        # What the runner plans for these options: the chain is there with "true" only.
        planned = beam.Pipeline(options=options)
        _spark_pipeline(planned)
        plan = execution_plan.plan(execution_plan.pipeline_proto(planned, options),
                             chain_steps=validated(options).chain_simple_steps)
        chains = [labels(chain) for stage in plan.stages if stage.kind == execution_plan.SDK_STAGE
                  for chain in chains_of(
                      beam_fn_api_pb2.ProcessBundleDescriptor.FromString(stage.descriptor))]
        chained = any(chain[-4:] == ["Count", "Keep", "Window", "Sum"] for chain in chains)
        assert chained == (flag == "true") and bool(chains) == (flag == "true")
        pipeline = beam.Pipeline(runner=SparkRunner(spark_session), options=options)
        assert_that(_spark_pipeline(pipeline),
                    equal_to([f"{k}={v}" for k, v in expected.items()]))
        result = pipeline.run()
        result.wait_until_finish()
        query = result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))
        results[flag] = sorted((c.key.step, c.key.metric.name, c.committed)
                               for c in query["counters"])
    assert results["true"] == results["false"]
    assert [(name, value) for _, name, value in results["true"]] == [("pairs", 30)]
    assert "Count" in results["true"][0][0]


def _monitored_pipeline(pipeline):
    """Nexmark's launcher's shape: timestamped events through Beam's own ``Monitor`` (a
    DoFn asking for the timestamp, with metrics in its bundle methods), a query, a
    windowed sum, the results through another ``Monitor``, formatted with their window."""
    events = (pipeline
              | beam.Create(list(range(60)))
              | "Stamp" >> beam.Map(lambda x: TimestampedValue(x, x))
              | "event_monitor" >> beam.ParDo(Monitor(NAMESPACE, "event").doFn))
    return (events
            | "Query" >> beam.Filter(lambda x: x % 4 != 3)
            | "Window" >> beam.WindowInto(FixedWindows(10))
            | "Keyed" >> beam.Map(lambda x: (f"k{x % 3}", x))
            | "Sum" >> beam.CombinePerKey(sum)
            | "result_monitor" >> beam.ParDo(Monitor(NAMESPACE, "result").doFn)
            | "Format" >> beam.Map(_with_window))


def test_on_spark_nexmarks_monitors_give_the_same_output_and_metrics_chained(spark_session):  # noqa: F811
    """Beam's Nexmark monitors chained and not, on the SparkRunner: the same output and the
    same ``metrics().query()``: counters and distributions under the same steps (the
    monitors' wall-clock ``event_time``: the same number of updates, one per bundle start
    and finish)."""
    from runners.spark import SparkRunner

    expected = _kept_sums(60)
    results = {}
    for flag in ("true", "false"):
        options = PipelineOptions(["--spark_master_url", "local[2]",
                                   "--chain_simple_steps", flag])
        planned = beam.Pipeline(options=options)
        _monitored_pipeline(planned)
        plan = execution_plan.plan(execution_plan.pipeline_proto(planned, options),
                                   chain_steps=flag == "true")
        chained = {step for stage in plan.stages if stage.kind == execution_plan.SDK_STAGE
                   for chain in chains_of(
                       beam_fn_api_pb2.ProcessBundleDescriptor.FromString(stage.descriptor))
                   for step in labels(chain)}
        assert ({"event_monitor", "result_monitor"} <= chained) == (flag == "true")
        pipeline = beam.Pipeline(runner=SparkRunner(spark_session), options=options)
        assert_that(_monitored_pipeline(pipeline),
                    equal_to([f"{k}={v}" for k, v in expected.items()]))
        result = pipeline.run()
        result.wait_until_finish()
        query = result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))
        results[flag] = (
            sorted((c.key.step, c.key.metric.name, c.committed) for c in query["counters"]),
            sorted((d.key.step, d.key.metric.name,
                    d.committed.count if d.key.metric.name.endswith(".event_time")
                    else d.committed) for d in query["distributions"]))
    assert results["true"] == results["false"]
    counters, distributions = results["true"]
    assert [(step, name, value) for step, name, value in counters] == [
        ("event_monitor", "event.elements", 60), ("result_monitor", "result.elements", 18)]
    assert len(distributions) == 4
