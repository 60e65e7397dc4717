"""Beam's Job API for the Spark runner: jobs prepared, staged, run, watched and cancelled.

:class:`SparkJobServicer` is Beam's ``AbstractJobServiceServicer`` (the same protocol as
Beam's in-process ``LocalJobServicer``) whose jobs run with :class:`~runners.spark.SparkRunner`
on one Spark owned by the server (a SparkContext, or a Spark Connect session). Each job runs
in a thread of its own, its Spark jobs tagged as its own, so several jobs share Spark
without mixing; a job keeps running when
the client that submitted it goes away, and its state, messages and metrics can be read again.

Environments. The runner executes Python transforms in Spark's own Python workers, so every
environment Beam's Python SDK sends (LOOPBACK, EXTERNAL, PROCESS, DOCKER) is rewritten to the
embedded Python environment before planning. The trade-off: the worker a LOOPBACK client
starts is not used, no container or process is started, and the pipeline's code runs on the
server's interpreter, so it must be importable (or pickled by value) there; staged artifacts are
shipped to executors (:mod:`runners.spark.dependencies.artifacts`). A pipeline needing another
SDK (a Java container, a non-Python environment) is refused at Prepare with INVALID_ARGUMENT,
and so is one built by another Python minor version or Beam version than the server's (its SDK
capability says which), which Beam's SDK harness would refuse in every task. Python is
recognized by the environment's SDK capabilities or its container image name. Jobs, their
messages and staged files are kept for the server's lifetime (GetJobs lists all).

Job states: STOPPED (prepared) -> RUNNING -> DONE, or FAILED (the error is in the message
stream), or CANCELLING -> CANCELLED.

>>> import tempfile
>>> servicer = SparkJobServicer(backend=None, staging_dir=tempfile.mkdtemp())
>>> [option.name for option in servicer.DescribePipelineOptions(None).options][:2]
['spark_parallelism', 'bundle_size']
"""

from __future__ import annotations

import argparse
import os
import queue
import threading
import time
import traceback
from typing import Any, Iterator, Optional

import grpc
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState

from runners.spark import options as spark_options
from runners.spark.backends.base import Backend
from runners.spark.beam_internals import (
    abstract_job_service,
    artifact_service,
    beam_job_api_pb2,
    beam_runner_api_pb2,
    common_urns,
    environment_dependencies,
    environments,
    job_utils,
    known_jobs,
    local_job_service,
    monitoring_infos,
    python_urns,
    remove_job_log_handlers,
    resolve_environment_dependencies,
    validate_pipeline_graph,
)
from runners.spark.dependencies import artifacts
from runners.spark.dependencies import packages as job_packages
from runners.spark.dependencies.worker import JobEnvironment
from runners.spark.planning import execution_plan, support
from runners.spark.runner import SparkRunner

JobState = beam_job_api_pb2.JobState
_TERMINAL = frozenset([JobState.DONE, JobState.FAILED, JobState.CANCELLED, JobState.DRAINED])
_STATES = {
    PipelineState.DONE: JobState.DONE,
    PipelineState.FAILED: JobState.FAILED,
    PipelineState.CANCELLED: JobState.CANCELLED,
}
#: Runner options that configure the server's Spark, not a job (the server's win).
_SERVER_OPTIONS = frozenset(["spark_conf", "spark_remote"])
_PACKAGE_ERRORS = (job_packages.MissingPackageError, job_packages.PackageInstallError)
_OPTION_TYPES = {int: beam_job_api_pb2.PipelineOptionType.INTEGER,
                 float: beam_job_api_pb2.PipelineOptionType.NUMBER}


def _job_option_actions() -> list:
    """The argparse actions of the runner's per-job options (SparkRunnerOptions)."""
    parser = argparse.ArgumentParser(add_help=False)
    spark_options.SparkRunnerOptions._add_argparse_args(parser)
    return [action for action in parser._actions
            if action.dest not in _SERVER_OPTIONS and action.option_strings]


_PYTHON_SDK_CAPABILITY = python_urns.PACKED_COMBINE_FN
_SDK_BASE_PREFIX = "beam:version:sdk_base:"
_DOCKER = common_urns.environments.DOCKER.urn
#: Environments only the Python SDK makes ("default": a Python pipeline built with no runner).
_PYTHON_ONLY = frozenset([python_urns.EMBEDDED_PYTHON, python_urns.EMBEDDED_PYTHON_LOOPBACK,
                          common_urns.environments.DEFAULT.urn])


class InvalidJobError(ValueError):
    """A submitted pipeline the server cannot run; the message says why (INVALID_ARGUMENT)."""


def is_python_environment(environment: beam_runner_api_pb2.Environment) -> bool:
    """Whether Beam's Python SDK made this environment (so our Python workers can run it)."""
    if environment.urn in _PYTHON_ONLY:
        return True
    if environment.urn == _DOCKER:
        image = beam_runner_api_pb2.DockerPayload.FromString(environment.payload).container_image
        return "python" in image
    sdk_bases = [c for c in environment.capabilities if c.startswith(_SDK_BASE_PREFIX)]
    if sdk_bases:
        return all("python" in c for c in sdk_bases)
    return _PYTHON_SDK_CAPABILITY in environment.capabilities


def embedded_pipeline(pipeline: beam_runner_api_pb2.Pipeline) -> beam_runner_api_pb2.Pipeline:
    """A copy of ``pipeline`` whose Python environments run embedded in Spark's workers.

    Raises InvalidJobError naming an environment of another SDK, or an empty pipeline.
    """
    if not pipeline.root_transform_ids:
        raise InvalidJobError("the pipeline has no transforms (root_transform_ids is empty)")
    rewritten = beam_runner_api_pb2.Pipeline()
    rewritten.CopyFrom(pipeline)
    for environment_id, environment in rewritten.components.environments.items():
        choices = environments.expand_anyof_environments(environment)
        python = [choice for choice in choices if is_python_environment(choice)]
        if not python:
            raise InvalidJobError(
                f"environment {environment_id!r} ({_describe(environment)}) is not one of "
                "the Python SDK: the Spark job server runs Python transforms only, in its own "
                "Python workers. Pipelines needing another SDK (e.g. Java cross-language "
                "transforms) cannot run here.")
        chosen = python[0]
        _check_built_by_this_python(environment_id, chosen)
        embedded = beam_runner_api_pb2.Environment(
            urn=python_urns.EMBEDDED_PYTHON,
            capabilities=chosen.capabilities,
            dependencies=chosen.dependencies,
            resource_hints=chosen.resource_hints,
        )
        environment.CopyFrom(embedded)
    try:
        validate_pipeline_graph(rewritten)
    except Exception as error:
        raise InvalidJobError(f"the pipeline graph is invalid: {error}") from error
    return rewritten


def _check_built_by_this_python(environment_id: str,
                                environment: beam_runner_api_pb2.Environment) -> None:
    """Refuse at Prepare what Beam's SDK harness refuses in every task: an environment whose
    SDK (Python minor version, Beam version) is not the one the server's workers run, since
    the pipeline's code is pickled by its Python. Same rule as the harness: equal, or the
    submitted version a release candidate of the server's."""
    ours = environments.sdk_base_version_capability()
    for capability in environment.capabilities:
        if (capability.startswith(_SDK_BASE_PREFIX) and capability != ours
                and not ("rc" in capability and ours in capability)):
            raise InvalidJobError(
                f"environment {environment_id!r} was built by "
                f"{capability[len(_SDK_BASE_PREFIX):]}, but this job server runs "
                f"{ours[len(_SDK_BASE_PREFIX):]}: submit the pipeline from the Python minor "
                "version and Beam version of the server, or start the server with yours")


def _describe(environment: beam_runner_api_pb2.Environment) -> str:
    if environment.urn == _DOCKER:
        image = beam_runner_api_pb2.DockerPayload.FromString(environment.payload).container_image
        return f"{environment.urn}, image {image!r}"
    return environment.urn or "no URN"


def job_options(options: Any) -> PipelineOptions:
    """The pipeline options of a job, from the Struct the client sent.

    Integers arrive as strings (Beam's client encodes them so); the runner's numeric options
    are converted back (a malformed one raises InvalidJobError naming it).
    """
    values = {}
    for key, value in job_utils.struct_to_dict(options).items():
        if key.startswith("beam:option:") and key.endswith(":v1"):
            values[key[len("beam:option:"):-len(":v1")]] = value
    for action in _job_option_actions():
        name, convert = action.dest, action.type
        if convert in _OPTION_TYPES and values.get(name) is not None:
            try:
                values[name] = convert(values[name])
            except (TypeError, ValueError):
                kind = "a whole number" if convert is int else "a number"
                raise InvalidJobError(f"--{name}={values[name]!r}: give {kind}") from None
    return PipelineOptions(**values)


class SparkBeamJob(abstract_job_service.AbstractBeamJob):
    """One submitted pipeline: its states, messages, artifacts and run on Spark."""

    def __init__(self, job_id: str, job_name: str, pipeline: Any, options: Any,
                 servicer: "SparkJobServicer") -> None:
        super().__init__(job_id, job_name, pipeline, options)
        self._servicer = servicer
        self._executable = embedded_pipeline(pipeline)
        self._options = job_options(options)
        try:
            spark_options.validated(self._options)
            support.check_supported(
                self._executable, support.runs_in_streaming(self._executable, self._options))
        except (ValueError, execution_plan.UnsupportedPipelineError) as error:
            raise InvalidJobError(str(error)) from error
        self._lock = threading.Lock()
        self._state_queues: list = []
        self._log_queues = local_job_service.JobLogQueues()
        self._cancel_requested = False
        self._thread: Optional[threading.Thread] = None
        self._environment = JobEnvironment()
        self.result: Any = None

    def prepare(self) -> None:
        self._servicer.artifact_service.register_job(
            self._job_id,
            environment_dependencies(self._executable.components.environments))

    def artifact_staging_endpoint(self) -> Any:
        return self._servicer.artifact_staging_endpoint

    def set_state(self, new_state: int) -> Any:
        with self._lock:
            current = self._state_history[-1][0]
            if current in _TERMINAL or (current in (JobState.CANCELLING, JobState.DRAINING)
                                        and new_state not in _TERMINAL):
                # A cancelled or draining job does not go back to RUNNING; an ended one stays
                return None
            timestamp = super().set_state(new_state)
            if timestamp is not None:
                for state_queue in self._state_queues:
                    state_queue.put((new_state, timestamp))
        return timestamp

    def run(self) -> None:
        with self._lock:
            if self._thread is not None:
                raise InvalidJobError(f"job {self._job_id!r} was already run")
            self._thread = threading.Thread(
                target=self._run_job, name=f"job-{self._job_id}", daemon=True)
        self._thread.start()

    def _message(self, text: str, importance: int) -> None:
        self._log_queues.put(beam_job_api_pb2.JobMessage(
            message_id=f"{self._job_id}-{time.monotonic_ns()}",
            time=time.strftime("%Y-%m-%d %H:%M:%S"),
            importance=importance,
            message_text=text))

    def _run_job(self) -> None:
        try:
            self._run_with_log_capture()
        finally:
            remove_job_log_handlers(self._log_queues)

    def _run_with_log_capture(self) -> None:
        with local_job_service.JobLogHandler(self._log_queues):
            try:
                self._stage_artifacts()
                runner = SparkRunner(self._servicer.backend)
                with self._lock:
                    cancelled = self._cancel_requested
                if not cancelled:
                    self.result = runner.run_portable_pipeline(
                        self._executable, self._options, self._environment)
                    self.set_state(JobState.RUNNING)
                    with self._lock:
                        cancelled = self._cancel_requested
                    if cancelled:
                        self.result.cancel()
                    self.result.wait_until_finish()
                self.set_state(_STATES.get(self.result.state if self.result else None,
                                           JobState.CANCELLED))
            except Exception as error:  # reported to the client through the message stream
                with self._lock:
                    cancelled = self._cancel_requested
                if cancelled:
                    self.set_state(JobState.CANCELLED)
                else:
                    # A package problem is the user's to act on: its message says what to
                    # do; a traceback of the server would only hide it.
                    text = (f"{type(error).__name__}: {error}" if isinstance(
                        error, _PACKAGE_ERRORS) else traceback.format_exc())
                    self._message(text, beam_job_api_pb2.JobMessage.JOB_MESSAGE_ERROR)
                    self.set_state(JobState.FAILED)

    def _stage_artifacts(self) -> None:
        try:
            resolved = self._servicer.artifact_service.resolved_deps(self._job_id, timeout=0)
        except Exception:  # nothing was staged (a raw client); the pipeline runs as is
            return
        resolve_environment_dependencies(self._executable.components.environments, resolved)
        files = artifacts.staged_files(self._executable.components.environments.values())
        work_dir = os.path.join(self._servicer.staging_dir, self._job_id, "shipped")
        shipped = artifacts.ship_to_executors(
            self._servicer.backend, files, work_dir, self._job_id)
        for line in shipped.report:
            self._message(f"staged artifact {line}", beam_job_api_pb2.JobMessage.JOB_MESSAGE_BASIC)
        self._environment = shipped.environment()  # every task of the job carries it

    def cancel(self, timeout: float = 120.0) -> None:
        """Stop the job's Spark jobs; returns once the job has reached a terminal state."""
        with self._lock:
            if self.state in _TERMINAL:
                return
            self._cancel_requested = True
            thread = self._thread
        self.set_state(JobState.CANCELLING)
        if thread is None:  # prepared, never run
            self.set_state(JobState.CANCELLED)
            return
        if self.result is not None:
            self.result.cancel()
        thread.join(timeout)

    def drain(self) -> None:
        """Drain a streaming job (final panes, commits, a final checkpoint, then DONE: see
        ``SparkPipelineResult.drain``); returns at once, in state DRAINING. A job not
        running yet has nothing in flight: it is cancelled. A batch job ends by itself."""
        with self._lock:
            if self.state in _TERMINAL:
                return
            result = self.result
        if result is None:
            self.cancel()
            return
        self.set_state(JobState.DRAINING)
        result.drain(0)

    def get_state_stream(self) -> Iterator[Any]:
        yield from self._stream(include_messages=False)

    def get_message_stream(self) -> Iterator[Any]:
        yield from self._stream(include_messages=True)

    def _stream(self, include_messages: bool) -> Iterator[Any]:
        events: queue.Queue = queue.Queue()
        with self._lock:
            history = list(self._state_history)
            self._state_queues.append(events)
            if include_messages:
                cached = self._log_queues.cache()
                self._log_queues.append(events)
        try:
            pending = (cached if include_messages else []) + history
            while True:
                event = pending.pop(0) if pending else events.get()
                yield event
                if isinstance(event, tuple) and event[0] in _TERMINAL:
                    return
        finally:
            with self._lock:
                self._state_queues.remove(events)

    def metrics(self) -> list:
        """The job's user metrics, as MonitoringInfos (empty before it starts)."""
        if self.result is None:
            return []
        infos = self.result.monitoring_metrics().monitoring_infos()
        return [info for info in infos if monitoring_infos.is_user_monitoring_info(info)]


class SparkJobServicer(abstract_job_service.AbstractJobServiceServicer):
    """Beam's JobService, running every job with the SparkRunner on ``backend``.

    Args:
      backend: the Spark every job runs on (shared; each job's Spark jobs tagged its own).
      staging_dir: where staged artifacts are kept, one folder per job.
    """

    def __init__(self, backend: Optional[Backend], staging_dir: str) -> None:
        super().__init__()
        self.backend = backend
        self.staging_dir = staging_dir
        self.artifact_service = artifact_service.ArtifactStagingService(
            artifact_service.BeamFilesystemHandler(staging_dir).file_writer)
        self.artifact_staging_endpoint = None  # set by the server once its port is known

    def create_beam_job(self, preparation_id, job_name, pipeline, options) -> SparkBeamJob:
        return SparkBeamJob(preparation_id, job_name, pipeline, options, self)

    def _job(self, job_id: str, context: Any) -> SparkBeamJob:
        job = known_jobs(self).get(job_id)
        if job is None:
            _abort(context, grpc.StatusCode.NOT_FOUND, f"no job with id {job_id!r}")
        return job

    def Prepare(self, request, context=None, timeout=None):
        try:
            return super().Prepare(request, context, timeout)
        except InvalidJobError as error:
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(error))

    def Run(self, request, context=None, timeout=None):
        job = self._job(request.preparation_id, context)
        try:
            job.run()
        except InvalidJobError as error:
            _abort(context, grpc.StatusCode.FAILED_PRECONDITION, str(error))
        return beam_job_api_pb2.RunJobResponse(job_id=request.preparation_id)

    def GetState(self, request, context=None):
        return abstract_job_service.make_state_event(*self._job(request.job_id, context).get_state())

    def GetPipeline(self, request, context=None, timeout=None):
        pipeline = self._job(request.job_id, context).get_pipeline()
        return beam_job_api_pb2.GetJobPipelineResponse(pipeline=pipeline)

    def Cancel(self, request, context=None, timeout=None):
        job = self._job(request.job_id, context)
        job.cancel()
        return beam_job_api_pb2.CancelJobResponse(state=job.state)

    def Drain(self, request, context=None, timeout=None):
        job = self._job(request.job_id, context)
        job.drain()
        return beam_job_api_pb2.DrainJobResponse(state=job.state)

    def GetStateStream(self, request, context=None, timeout=None):
        self._job(request.job_id, context)
        return super().GetStateStream(request, context, timeout)

    def GetMessageStream(self, request, context=None, timeout=None):
        self._job(request.job_id, context)
        return super().GetMessageStream(request, context, timeout)

    def GetJobMetrics(self, request, context=None):
        """User metrics of successful tasks (Spark's accumulators): reported as committed,
        and as attempted too, since failed attempts are not counted separately."""
        infos = self._job(request.job_id, context).metrics()
        return beam_job_api_pb2.GetJobMetricsResponse(
            metrics=beam_job_api_pb2.MetricResults(committed=infos, attempted=infos))

    def DescribePipelineOptions(self, request, context=None, timeout=None):
        """The runner's per-job options, so Beam's client passes them on (``--bundle_size``
        ...); ``--spark_master_url``, ``--spark_remote`` and ``--spark_conf`` are the
        server's own."""
        return beam_job_api_pb2.DescribePipelineOptionsResponse(options=[
            beam_job_api_pb2.PipelineOptionDescriptor(
                name=action.dest,
                type=_OPTION_TYPES.get(action.type, beam_job_api_pb2.PipelineOptionType.STRING),
                description=action.help or "", group="SparkRunnerOptions")
            for action in _job_option_actions()
        ])


def _abort(context: Any, code: Any, message: str) -> None:
    if context is None:  # called in process, without gRPC
        raise InvalidJobError(message)
    context.abort(code, message)
