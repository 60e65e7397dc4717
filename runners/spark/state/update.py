"""Updating a streaming job: a changed pipeline resuming from the checkpoint of another.

A checkpoint describes, beside its state, the pipeline that wrote it (:func:`describe`):
each step that carries something across micro-batches, and what its state depends on.

* a **GroupByKey**: its key coder, its value coder (the buffered elements) and its windowing
  (window function, trigger, accumulation mode, allowed lateness, timestamp combiner);
* a **stateful DoFn**: its key coder, its main input's windowing, and its state and timer
  specs (each cell's coder, each timer family's time domain);
* a **source**: a TestStream (its events: its position is an index into them) or a
  splittable DoFn (a Kafka read: its positions are its carried residuals).

Steps are found by their names in the pipeline, through Beam's ``--transform_name_mapping``
(``{"old name": "new name"}``; a composite's mapping renames every step inside it, as
Dataflow's update does). An update (:class:`PipelineUpdate`) is compatible when every step of
the checkpoint's pipeline that carries something has its counterpart in the new pipeline,
with the same coders, windowing, and at least the same state and timer specs; stateless steps
may be added, removed or changed freely, DoFn code included, and new steps (a new sink, a
new GroupByKey) start empty. Otherwise the resume is refused before any batch runs, with
every step and the reason it cannot carry over.

>>> NameMapping.of({"Sum": "Total"}).rename("Sum/GroupByKey")
'Total/GroupByKey'
>>> NameMapping.of({"Sum": "Total"}).rename("Summary")
'Summary'
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from typing import Any, Dict, List, Optional, Tuple

from runners.spark.beam_internals import (
    IMPULSE_BUFFER,
    PAR_DO_URNS,
    SPLITTABLE_PROCESS_URN,
    PipelineContext,
    beam_fn_api_pb2,
    beam_runner_api_pb2,
    common_urns,
    split_buffer_id,
)
from runners.spark.chains.planning import unchained_transforms
from runners.spark.planning.execution_plan import (
    SDK_STAGE,
    TEST_STREAM_STAGE,
    ExecutionPlan,
    par_do_payload,
)

GROUP_BY_KEY = "GroupByKey"
STATEFUL_DO_FN = "stateful DoFn"
TEST_STREAM = "TestStream"
SPLITTABLE_DO_FN = "splittable DoFn"
#: A ParDo with side inputs: it may hold main elements until they are ready.
SIDE_INPUT_READER = "side input reader"


@dataclasses.dataclass(frozen=True)
class NameMapping:
    """Beam's ``--transform_name_mapping``: old step name -> new; a composite's name renames
    the steps inside it (``Sum`` renames ``Sum/GroupByKey``)."""

    renames: Tuple[Tuple[str, str], ...] = ()

    @classmethod
    def of(cls, mapping: Any) -> "NameMapping":
        if mapping is None:
            return cls()
        if not isinstance(mapping, dict) or not all(
                isinstance(old, str) and isinstance(new, str) and old and new
                for old, new in mapping.items()):
            raise ValueError(
                f"--transform_name_mapping={mapping!r}: give a JSON object of old step names "
                "to new ones, e.g. '{\"Sum\": \"Total\"}'")
        # Longest first: the most specific mapping of a name wins.
        return cls(tuple(sorted(mapping.items(), key=lambda item: -len(item[0]))))

    def rename(self, name: str) -> str:
        for old, new in self.renames:
            if name == old:
                return new
            if name.startswith(old) and name[len(old)] in "/.":
                return new + name[len(old):]
        return name

    def __bool__(self) -> bool:
        return bool(self.renames)


def pipeline_fingerprint(plan: ExecutionPlan) -> str:
    """A digest of what a checkpoint's state depends on: stages, buffers, coders, windowing,
    state and timer specs, TestStream events (not DoFn code). Stable across processes."""
    digest = hashlib.sha256()

    def add(*parts: Any) -> None:
        digest.update(repr(parts).encode("utf-8"))

    # By name: the fused stages' order (their index) may differ from process to process.
    for stage in sorted(plan.stages, key=lambda stage: stage.name):
        add(stage.name, stage.kind, stage.keyed, stage.inputs, stage.outputs,
            stage.side_inputs, stage.timer_families, stage.output_coder_id, stage.output_coders)
        if stage.kind == TEST_STREAM_STAGE:
            add(stage.descriptor)
        elif stage.kind == SDK_STAGE and stage.descriptor:
            descriptor = beam_fn_api_pb2.ProcessBundleDescriptor.FromString(stage.descriptor)
            for name, transform in sorted(unchained_transforms(descriptor).items()):
                add(name, transform.spec.urn, sorted(transform.inputs.items()),
                    sorted(transform.outputs.items()))
                if transform.spec.urn in PAR_DO_URNS:
                    payload = beam_runner_api_pb2.ParDoPayload.FromString(
                        transform.spec.payload)
                    add(sorted((name, spec.SerializeToString(deterministic=True))
                               for name, spec in payload.state_specs.items()),
                        sorted((name, spec.SerializeToString(deterministic=True))
                               for name, spec in payload.timer_family_specs.items()))
    for buffer_id, group in sorted(plan.groups.items()):
        add(buffer_id, group)
    components = plan.components
    for coder_id, coder in sorted(components.coders.items()):
        add(coder_id, coder.spec.urn, tuple(coder.component_coder_ids))
    for strategy_id, strategy in sorted(components.windowing_strategies.items()):
        add(strategy_id, strategy.SerializeToString(deterministic=True))
    return digest.hexdigest()


def describe(plan: ExecutionPlan) -> Dict[str, Any]:
    """The pipeline as an update sees it, as plain data (JSON): ``steps`` (each step that
    carries something, with what its state depends on), ``stages`` (each fused stage's steps,
    the ones among them that carry something, its inputs' and side inputs' names) and
    ``buffers`` (each buffer's name by its id, hex)."""
    return _Describer(plan).describe()


class _Describer:
    def __init__(self, plan: ExecutionPlan) -> None:
        self.plan = plan
        self.components = plan.components
        self.context = PipelineContext(plan.components)
        self.steps: Dict[str, Dict[str, Any]] = {}

    def describe(self) -> Dict[str, Any]:
        stages = {}
        for stage in self.plan.stages:
            anchors = self._stage_steps(stage)
            stages[stage.name] = {
                "keyed": stage.keyed, "anchors": sorted(anchors),
                "inputs": [self.buffer_name(spec.buffer_id) for spec in stage.inputs],
                "side_inputs": [self.buffer_name(spec.buffer_id) for spec in stage.side_inputs]}
        for buffer_id, group in sorted(self.plan.groups.items()):
            self.steps[group.transform_name] = self._group(buffer_id, group)
        buffers = {}
        for stage in self.plan.stages:
            for buffer_id in ([spec.buffer_id for spec in stage.inputs]
                              + [spec.buffer_id for spec in stage.side_inputs]
                              + [buffer_id for _, buffer_id in stage.outputs]):
                buffers[buffer_id.hex()] = self.buffer_name(buffer_id)
        return {"steps": self.steps, "stages": stages, "buffers": buffers}

    def buffer_name(self, buffer_id: bytes) -> str:
        """A buffer's name from the pipeline's names (ids change as a pipeline changes)."""
        if buffer_id == IMPULSE_BUFFER:
            return "impulse"
        kind, name = split_buffer_id(buffer_id)
        if kind == "group":
            return f"group:{self.components.transforms[name].unique_name}"
        pcollection = self.components.pcollections.get(name)
        if pcollection is None:
            return f"{kind}:{name}"
        # Beam names a PCollection "<length of its producer's label><label>.<tag>".
        match = re.match(r"(\d+)(.*)$", pcollection.unique_name, re.DOTALL)
        if match and len(match.group(2)) > int(match.group(1)):
            return f"{kind}:{match.group(2)}"
        return f"{kind}:{pcollection.unique_name}"

    def _stage_steps(self, stage: Any) -> List[str]:
        """Describe the stage's steps that carry something; returns their names."""
        if stage.kind == TEST_STREAM_STAGE:
            name = stage.steps[0] if stage.steps else stage.name
            self.steps[name] = {"kind": TEST_STREAM,
                                "events": hashlib.sha256(stage.descriptor).hexdigest()[:16]}
            return [name]
        if stage.kind != SDK_STAGE or not stage.descriptor:
            return []
        found = []
        descriptor = beam_fn_api_pb2.ProcessBundleDescriptor.FromString(stage.descriptor)
        for name, transform in sorted(unchained_transforms(descriptor).items()):
            if transform.spec.urn == SPLITTABLE_PROCESS_URN:
                self.steps[name] = {"kind": SPLITTABLE_DO_FN}
                found.append(name)
            elif transform.spec.urn in PAR_DO_URNS:
                payload = par_do_payload(transform)
                if payload.state_specs or payload.timer_family_specs:
                    self.steps[name] = self._stateful(transform, payload)
                    found.append(name)
                elif payload.side_inputs:
                    self.steps[name] = {"kind": SIDE_INPUT_READER}
                    found.append(name)
        return found

    def _group(self, buffer_id: bytes, group: Any) -> Dict[str, Any]:
        transform = self.components.transforms[split_buffer_id(buffer_id)[1]]
        pcollection = self.components.pcollections[next(iter(transform.inputs.values()))]
        key_coder_id, value_coder_id = self._kv_components(pcollection.coder_id)
        return {"kind": GROUP_BY_KEY, "key coder": self.coder(key_coder_id),
                "value coder": self.coder(value_coder_id),
                **self.windowing(pcollection.windowing_strategy_id)}

    def _stateful(self, transform: Any, payload: Any) -> Dict[str, Any]:
        main = [pcollection_id for tag, pcollection_id in transform.inputs.items()
                if tag not in payload.side_inputs]
        pcollection = self.components.pcollections[main[0]]
        key_coder_id, _ = self._kv_components(pcollection.coder_id)
        state = {}
        for state_id, spec in sorted(payload.state_specs.items()):
            kind = spec.WhichOneof("spec")
            coders = [getattr(getattr(spec, kind), field) for field in
                      ("coder_id", "element_coder_id", "key_coder_id", "value_coder_id",
                       "accumulator_coder_id")
                      if hasattr(getattr(spec, kind), field)]
            state[state_id] = f"{kind}({', '.join(self.coder(coder) for coder in coders)})"
        timers = {timer_id: beam_runner_api_pb2.TimeDomain.Enum.Name(spec.time_domain)
                  for timer_id, spec in sorted(payload.timer_family_specs.items())}
        return {"kind": STATEFUL_DO_FN, "key coder": self.coder(key_coder_id),
                **self.windowing(pcollection.windowing_strategy_id),
                "state": state, "timers": timers}

    def _kv_components(self, coder_id: str) -> Tuple[str, str]:
        coder = self.components.coders[coder_id]
        while coder.spec.urn != common_urns.coders.KV.urn and coder.component_coder_ids:
            coder_id = coder.component_coder_ids[0]  # through a length prefix
            coder = self.components.coders[coder_id]
        if coder.spec.urn != common_urns.coders.KV.urn:
            return coder_id, coder_id
        return coder.component_coder_ids[0], coder.component_coder_ids[1]

    def coder(self, coder_id: str) -> str:
        """A coder by what it is (its ids differ from one construction of a pipeline to
        the next), e.g. ``TupleCoder[VarIntCoder, StrUtf8Coder]``."""
        return repr(self.context.coders.get_by_id(coder_id))

    def windowing(self, strategy_id: str) -> Dict[str, str]:
        windowing = self.context.windowing_strategies.get_by_id(strategy_id)
        proto = self.components.windowing_strategies[strategy_id]
        window_fn = windowing.windowfn
        fields = ", ".join(f"{name}={value!r}" for name, value in sorted(getattr(window_fn, "__dict__", {}).items())
                           if not name.startswith("_"))
        return {"window": f"{type(window_fn).__name__}({fields})",
                "trigger": repr(windowing.triggerfn),
                "accumulation mode": beam_runner_api_pb2.AccumulationMode.Enum.Name(
                    proto.accumulation_mode),
                "allowed lateness": repr(windowing.allowed_lateness),
                "timestamp combiner": beam_runner_api_pb2.OutputTime.Enum.Name(
                    proto.output_time)}


#: Properties of a step an update must keep, in the order a refusal names them.
_KEPT = ("key coder", "value coder", "window", "trigger", "accumulation mode",
         "allowed lateness", "timestamp combiner", "events")


class PipelineUpdate:
    """How a checkpoint of one pipeline (its :func:`describe`) carries over to another.

    ``problems`` lists, per step, why its state cannot carry over (empty: compatible); the
    other methods translate the checkpoint's names (stages, keyed steps, buffers) into the
    new pipeline's, None for what has no counterpart (a stateless stage's watermark, which
    the new pipeline recomputes).
    """

    def __init__(self, old: Dict[str, Any], new: Dict[str, Any], mapping: NameMapping) -> None:
        self.old = old
        self.new = new
        self.mapping = mapping
        self.problems: List[str] = []
        self._stages: Dict[str, str] = {}
        self._check_steps()
        self._match_stages()
        names = {name: bytes.fromhex(buffer) for buffer, name in new["buffers"].items()}
        self._buffers = {bytes.fromhex(buffer): names.get(self._rename_buffer(name))
                         for buffer, name in old["buffers"].items()}

    def _rename_buffer(self, name: str) -> str:
        kind, _, rest = name.partition(":")
        return f"{kind}:{self.mapping.rename(rest)}" if rest else name

    def _problem(self, step: str, reason: str) -> None:
        renamed = self.mapping.rename(step)
        self.problems.append(f"step {step!r}" + (f" (now {renamed!r})" if renamed != step else "")
                             + f": {reason}")

    def _check_steps(self) -> None:
        for name, old in sorted(self.old["steps"].items()):
            new = self.new["steps"].get(self.mapping.rename(name))
            kind = old["kind"]
            if new is None:
                if kind != SIDE_INPUT_READER:
                    self._problem(name, f"the {kind}'s {_WHAT[kind]} would be lost: the new "
                                  "pipeline has no such step (map a renamed step with "
                                  "--transform_name_mapping='{\"old\": \"new\"}')")
                continue
            if new["kind"] != kind:
                self._problem(name, f"a {kind} became a {new['kind']}")
                continue
            if kind == STATEFUL_DO_FN and self.mapping.rename(name) != name:
                self._problem(name, "a stateful DoFn cannot be renamed (its state cells are "
                              "keyed by its name); keep its name")
            for field in _KEPT:
                if field in old and old[field] != new.get(field):
                    self._problem(name, f"its {field} changed from {old[field]} to "
                                  f"{new.get(field)}; its state cannot carry over")
            for spec in ("state", "timers"):
                for spec_id, value in sorted(old.get(spec, {}).items()):
                    now = new.get(spec, {}).get(spec_id)
                    if now is None:
                        self._problem(name, f"its {spec} spec {spec_id!r} was removed")
                    elif now != value:
                        self._problem(name, f"its {spec} spec {spec_id!r} changed from {value} "
                                      f"to {now}")

    def _match_stages(self) -> None:
        """Each old stage holding something -> the new stage holding the same steps."""
        by_step = {step: stage for stage, described in self.new["stages"].items()
                   for step in described["anchors"]}
        claimed: Dict[str, str] = {}
        for stage, described in sorted(self.old["stages"].items()):
            targets = {by_step.get(self.mapping.rename(step)) for step in described["anchors"]}
            targets.discard(None)
            if len(targets) > 1:
                self._problem(described["anchors"][0], f"the steps of stage {stage!r} are now "
                              f"in several stages ({sorted(targets)})")
            elif targets:
                target = targets.pop()
                if target in claimed:
                    self._problem(described["anchors"][0], f"stages {claimed[target]!r} and "
                                  f"{stage!r} are now one stage, {target!r}")
                claimed[target] = stage
                self._stages[stage] = target

    def stage(self, old_name: str) -> Optional[str]:
        return self._stages.get(old_name)

    def step(self, old_name: str) -> Optional[str]:
        """A keyed step: a GroupByKey by its name, a stateful stage by its stage's."""
        described = self.old["stages"].get(old_name)
        if described is not None and described["keyed"]:
            return self.stage(old_name)
        return self.mapping.rename(old_name)

    def buffer(self, old_buffer_id: bytes) -> Optional[bytes]:
        return self._buffers.get(old_buffer_id)

    def stage_names(self, names: Dict[int, str]) -> Dict[int, str]:
        """{stage index: name} of the checkpoint's pipeline -> this one's names, for the
        stages that have a counterpart."""
        return {index: self._stages[name] for index, name in names.items()
                if name in self._stages}

    def carried(self) -> List[str]:
        """The new pipeline's names of the steps whose state carries over."""
        return [self.mapping.rename(name) for name, step in self.old["steps"].items()
                if step["kind"] != SIDE_INPUT_READER]

    def translate(self, data: Dict[str, Any]) -> Dict[str, Any]:
        """A checkpoint's driver data (see :mod:`~runners.spark.state.checkpoint`) in
        the new pipeline's names; what has no counterpart is dropped (a stateless stage's
        watermark, a side input no stage reads any more)."""
        def by_stage(values: Dict[str, Any]) -> Dict[str, Any]:
            return {self._stages[name]: value for name, value in values.items()
                    if name in self._stages}

        def by_buffer(values: Dict[bytes, Any]) -> Dict[bytes, Any]:
            return {self._buffers[buffer]: value for buffer, value in values.items()
                    if self._buffers.get(buffer) is not None}

        steps = {}
        for name, snapshot in data["steps"].items():
            new_name = self.step(name)
            if new_name is not None:
                steps[new_name] = snapshot
        watermarks = dict(data["watermarks"], sources=by_buffer(data["watermarks"]["sources"]),
                          stage_outputs=by_stage(data["watermarks"]["stage_outputs"]))
        stage_names = self.stage_names(data["stage_names"])
        residuals = json.loads(data["residuals"].decode("utf-8"))
        residuals["stages"] = {index: carried for index, carried in residuals["stages"].items()
                               if int(index) in stage_names}
        return dict(data, steps=steps, watermarks=watermarks,
                    sources=[dict(source, stage=self._stages.get(source.get("stage"),
                                                                 source.get("stage")))
                             for source in data["sources"]],
                    side_inputs=by_buffer(data["side_inputs"]), held=by_stage(data["held"]),
                    stage_names=stage_names,
                    residuals=json.dumps(residuals, sort_keys=True).encode("utf-8"))

    def check_data(self, data: Dict[str, Any]) -> None:
        """Add the problems of a checkpoint's driver data: the stages holding main elements
        for their side inputs, or a splittable DoFn's residuals, keyed by input port."""
        for stage in data["held"]:
            self.check_ports(stage, "main elements held for their side inputs", True)
        residuals = json.loads(data["residuals"].decode("utf-8")).get("stages", {})
        for index, carried in residuals.items():
            if carried:
                self.check_ports(data["stage_names"][int(index)],
                                 "a splittable DoFn's residuals", False)

    def check_ports(self, stage: str, what: str, side_inputs: bool) -> None:
        """A stage that holds ``what`` keyed by input port (held elements, residuals) must
        keep its inputs (and side inputs) in the same places."""
        new_stage = self.stage(stage)
        if new_stage is None:
            self.problems.append(f"stage {stage!r} holds {what}, and no stage of the new "
                                 "pipeline runs its steps")
            return
        old, new = self.old["stages"][stage], self.new["stages"][new_stage]
        fields = ("inputs", "side_inputs") if side_inputs else ("inputs",)
        for field in fields:
            if len(old[field]) != len(new[field]):
                self.problems.append(
                    f"stage {stage!r} holds {what} for its {field}, which changed from "
                    f"{old[field]} to {new[field]} in stage {new_stage!r}")


_WHAT = {GROUP_BY_KEY: "windows and buffered elements", STATEFUL_DO_FN: "state and timers",
         TEST_STREAM: "position in its events", SPLITTABLE_DO_FN: "positions (its residuals)",
         SIDE_INPUT_READER: "held elements"}
