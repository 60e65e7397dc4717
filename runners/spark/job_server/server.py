"""A Beam job server for Spark on PySpark: Beam's Job API, jobs run by our SparkRunner.

Start it, then submit pipelines with Beam's own portable client::

    python -m runners.spark.job_server --port 8099 --spark_master_url local[2]
    python -m runners.spark.job_server --port 8099 --spark_remote sc://127.0.0.1:15002
    python -m apache_beam.examples.wordcount --input in.txt --output counts \\
        --runner=PortableRunner --job_endpoint=localhost:8099 --environment_type=LOOPBACK

One gRPC port serves the JobService (Prepare, Run, GetState, GetStateStream,
GetMessageStream, GetJobMetrics, Cancel, GetJobs, GetPipeline, DescribePipelineOptions) and
the ArtifactStagingService. The server binds 127.0.0.1 unless ``--host`` says otherwise;
``--port 0`` picks a free port. The Job API has no authentication and whoever submits a job
runs code on the cluster, so a ``--host`` other than loopback (127.0.0.0/8, ::1, localhost)
is refused unless ``--allow_remote_clients`` is given too (and then logged as a WARNING).
From another machine, reach a loopback server through an SSH tunnel
(``ssh -L 8099:localhost:8099 HOST``) or an authenticating proxy (docs/SECURITY.md). It prints ``Job server listening on HOST:PORT`` once ready.
Every job runs on the server's Spark: a SparkContext it creates (``--spark_master_url``,
``--spark_conf``), or a Spark Connect session (``--spark_remote``); see
:mod:`runners.spark.job_server.service` for environments, states and what a job may set.

A job's dependencies come with it, staged by Beam's client: ``--extra_package`` (wheels,
source distributions) and ``--requirements_file`` with the packages of ``--requirements_cache``
are installed offline for that job alone, ``--save_main_session`` is loaded in every Python
worker; nothing is downloaded at run time (see :mod:`runners.spark.dependencies.artifacts`).

A request that is not a valid message (garbage, a truncated pipeline) is answered with
INVALID_ARGUMENT and the parser's reason; the server keeps serving.

In process:

>>> server = SparkJobServer(port=0).start()  # doctest: +SKIP
>>> server.endpoint  # doctest: +SKIP
'localhost:40123'
>>> server.stop()  # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import socket
import shutil
import signal
import sys
import tempfile
import threading
from concurrent import futures
from typing import Any, Callable, List, Optional, Sequence

import grpc
from apache_beam.options.pipeline_options import PipelineOptions
from google.protobuf.message import DecodeError

from runners.spark import backends
from runners.spark import options as spark_options
from runners.spark.backends.base import Backend
from runners.spark.beam_internals import (
    beam_artifact_api_pb2_grpc,
    beam_job_api_pb2,
    endpoints_pb2,
    known_jobs,
)
from runners.spark.job_server.service import SparkJobServicer

_LOGGER = logging.getLogger(__name__)
_JOB_SERVICE = beam_job_api_pb2.DESCRIPTOR.services_by_name["JobService"]
#: Unlimited message sizes (pipelines with large pickled DoFns), keep-alives tolerated.
_GRPC_OPTIONS = [
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", -1),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.http2.max_ping_strikes", 0),
]
#: Threads serving RPCs: every open state or message stream holds one while its job runs.
DEFAULT_MAX_WORKERS = 64


class _MalformedRequest:
    """What a request that failed to parse becomes; its handler answers INVALID_ARGUMENT."""

    def __init__(self, message_type: str, reason: str) -> None:
        self.text = f"malformed {message_type}: {reason}"


def _lenient_parser(message_class: Any) -> Callable[[bytes], Any]:
    def parse(data: bytes) -> Any:
        try:
            return message_class.FromString(data)
        except (DecodeError, RuntimeError, ValueError) as error:
            return _MalformedRequest(message_class.DESCRIPTOR.full_name, str(error) or
                                     type(error).__name__)
    return parse


def _checked(behavior: Callable[..., Any]) -> Callable[..., Any]:
    def handle(request: Any, context: Any) -> Any:
        if isinstance(request, _MalformedRequest):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.text)
        return behavior(request, context)
    return handle


def job_service_handler(servicer: SparkJobServicer) -> grpc.GenericRpcHandler:
    """Beam's JobService over ``servicer``, with requests parsed leniently (see module doc)."""
    handlers = {}
    for method in _JOB_SERVICE.methods:
        request_class = getattr(beam_job_api_pb2, method.input_type.name)
        response_class = getattr(beam_job_api_pb2, method.output_type.name)
        factory = (grpc.unary_stream_rpc_method_handler if method.server_streaming
                   else grpc.unary_unary_rpc_method_handler)
        handlers[method.name] = factory(
            _checked(getattr(servicer, method.name)),
            request_deserializer=_lenient_parser(request_class),
            response_serializer=response_class.SerializeToString)
    return grpc.method_handlers_generic_handler(_JOB_SERVICE.full_name, handlers)


def create_backend(master: str, spark_conf: Optional[Sequence[str]] = None,
                   spark_remote: Optional[str] = None) -> Backend:
    """The server's Spark: a Spark Connect session to ``spark_remote``, or a SparkContext
    for ``master``, with the runner's settings (``--spark_conf`` overrides)."""
    flags = ["--spark_remote", spark_remote] if spark_remote else ["--spark_master_url", master]
    flags += ["--spark_conf", "spark.app.name=beam-spark-job-server"]
    for entry in spark_conf or []:
        flags += ["--spark_conf", entry]
    return backends.open_backend(None, PipelineOptions(flags))


def is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine only: 127.0.0.0/8, ::1 or ``localhost``. Any other
    name counts as remote (it may resolve to an address other machines reach).

    >>> [is_loopback(host) for host in ("127.0.0.1", "127.1.2.3", "[::1]", "localhost",
    ...                                 "0.0.0.0", "::", "192.168.1.5", "myhost")]
    [True, True, True, True, False, False, False, False]
    """
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _check_port_free(host: str, port: int) -> None:
    """OSError now, before Spark starts, if a given port is taken (0: any port, fine)."""
    if not port:
        return
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host.strip("[]"), port))
        except OSError as error:
            raise OSError(f"cannot listen on {host}:{port} ({error.strerror or error}); "
                          "pick another --port (0: any free one)") from None


class SparkJobServer:
    """Beam's Job API on a gRPC port, jobs running on one Spark.

    Args:
      port: the port to listen on (0: a free one; see :attr:`port` once started).
      host: the address to bind (loopback by default; ``0.0.0.0`` for every interface).
      spark: the Spark jobs run on (a SparkSession, classic or Spark Connect, or a
        SparkContext); by default one is made for ``spark_remote`` (Spark Connect) or
        ``spark_master_url`` and ``spark_conf``, and stopped with the server.
      spark_remote: a Spark Connect server (``sc://host:port``) to run jobs on.
      staging_dir: where staged artifacts go (default: a temporary folder, removed on stop).
      allow_remote_clients: needed to bind anything but loopback (see :func:`is_loopback`):
        the Job API authenticates no one, and whoever submits a job runs code on the
        cluster. Without it such a ``host`` is a ValueError; with it, a WARNING at start.
    """

    def __init__(self, port: int = 8099, host: str = "127.0.0.1",
                 spark_master_url: str = spark_options.DEFAULT_MASTER,
                 spark_conf: Optional[Sequence[str]] = None, spark: Any = None,
                 staging_dir: Optional[str] = None,
                 max_workers: int = DEFAULT_MAX_WORKERS,
                 allow_remote_clients: bool = False,
                 spark_remote: Optional[str] = None) -> None:
        if not 0 <= port <= 65535:
            raise ValueError(f"port={port}: give a TCP port between 0 and 65535 (0: any free one)")
        if not is_loopback(host) and not allow_remote_clients:
            raise ValueError(
                f"--host {host} would serve the Job API beyond this machine, and it "
                "authenticates no one: whoever connects runs code on the cluster. Keep the "
                "default (127.0.0.1) and reach it through an SSH tunnel (ssh -L "
                "8099:localhost:8099 HOST) or an authenticating proxy, or pass "
                "--allow_remote_clients (allow_remote_clients=True) to bind it anyway")
        self.allow_remote_clients = allow_remote_clients
        spark_options.parse_spark_conf(list(spark_conf or []))  # fail early on a bad entry
        self.host = host
        self.requested_port = port
        self.port: Optional[int] = None
        self._master = spark_master_url
        self._spark_remote = spark_remote
        self._spark_conf = list(spark_conf or [])
        self._spark = spark
        self._backend: Optional[Backend] = None
        self._owns_spark = spark is None
        self._owns_staging = staging_dir is None
        self._staging_dir = staging_dir
        self._max_workers = max_workers
        self._server: Optional[grpc.Server] = None
        self.servicer: Optional[SparkJobServicer] = None

    @property
    def endpoint(self) -> str:
        """The address clients pass as ``--job_endpoint``."""
        host = "localhost" if self.host in ("127.0.0.1", "0.0.0.0", "::", "[::]") else self.host
        return f"{host}:{self.port}"

    def start(self) -> "SparkJobServer":
        """Check the port (OSError if taken), reach Spark (creating it if needed), bind, serve.

        Spark comes before the gRPC server: PySpark launches its JVM with fork (it sets a
        signal mask in the child), and forking a process whose gRPC threads are running
        can break the server (seen: "epoll_wait error: Bad file descriptor", then a JVM
        that never starts)."""
        if self._staging_dir is None:
            self._staging_dir = tempfile.mkdtemp(prefix="beam-spark-staging-")
        if not is_loopback(self.host):
            _LOGGER.warning(
                "The job server binds %s (--allow_remote_clients): anyone who can reach this "
                "port can submit a job, and so run code on the Spark cluster, with no "
                "authentication. Allow only trusted networks to it (a firewall), or bind "
                "127.0.0.1 and use an SSH tunnel or an authenticating proxy", self.host)
        _check_port_free(self.host, self.requested_port)
        if self._backend is None:
            self._backend = (backends.open_backend(self._spark, PipelineOptions([]))
                             if self._spark is not None else
                             create_backend(self._master, self._spark_conf, self._spark_remote))
        self.servicer = SparkJobServicer(self._backend, self._staging_dir)
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=self._max_workers), options=_GRPC_OPTIONS)
        self._server.add_generic_rpc_handlers([job_service_handler(self.servicer)])
        beam_artifact_api_pb2_grpc.add_ArtifactStagingServiceServicer_to_server(
            self.servicer.artifact_service, self._server)
        address = f"{self.host}:{self.requested_port}"
        reason = "the port is in use"
        try:
            self.port = self._server.add_insecure_port(address)
        except RuntimeError as error:  # how recent grpc versions report a port in use
            self.port, reason = 0, str(error)
        if not self.port:
            self._server = None
            raise OSError(f"cannot listen on {address} ({reason}); "
                          "pick another --port (0: any free one)")
        self.servicer.artifact_staging_endpoint = endpoints_pb2.ApiServiceDescriptor(
            url=self.endpoint)
        self._server.start()
        return self

    def wait(self) -> None:
        """Block until the server stops."""
        if self._server is not None:
            self._server.wait_for_termination()

    def stop(self, grace_seconds: float = 1.0) -> None:
        """Stop serving, cancel running jobs, stop the Spark the server made."""
        if self._server is not None:
            self._server.stop(grace_seconds).wait()
            self._server = None
        if self.servicer is not None:
            for job in list(known_jobs(self.servicer).values()):
                job.cancel(timeout=30)
        if self._owns_spark and self._backend is not None:
            try:
                self._backend.stop()
            except Exception as error:  # e.g. the JVM was stopped by the same signal
                _LOGGER.warning("Stopping Spark failed: %s", error)
        self._backend = None
        if self._owns_staging and self._staging_dir and os.path.isdir(self._staging_dir):
            shutil.rmtree(self._staging_dir, ignore_errors=True)


def _parser(prog: str = "python -m runners.spark.job_server") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Beam job server: runs pipelines submitted through Beam's Job API "
                    "(--runner=PortableRunner --job_endpoint=HOST:PORT) on Spark.")
    parser.add_argument("--port", type=int, default=8099,
                        help="Port of the Job API and artifact staging (0: a free one). "
                             "Default: 8099.")
    parser.add_argument("--host", default="127.0.0.1",
                        help="Address to bind. Default: 127.0.0.1 (this machine only); "
                             "anything but loopback needs --allow_remote_clients.")
    parser.add_argument("--allow_remote_clients", action="store_true",
                        help="Allow a --host other machines reach. The Job API authenticates "
                             "no one: whoever connects runs code on the cluster. Prefer an "
                             "SSH tunnel or an authenticating proxy to a loopback server.")
    parser.add_argument("--spark_master_url", default=spark_options.DEFAULT_MASTER,
                        help="Spark master every job runs on. Default: local[*].")
    parser.add_argument("--spark_remote", default=os.environ.get("SPARK_REMOTE"),
                        metavar="URL",
                        help="Run every job on this Spark Connect server instead "
                             "(sc://host:port). Default: the SPARK_REMOTE environment "
                             "variable.")
    parser.add_argument("--spark_conf", action="append", default=[], metavar="KEY=VALUE",
                        help="A Spark setting of the server's Spark (a SparkContext's, or "
                             "a Spark Connect session's runtime settings); repeatable.")
    parser.add_argument("--staging_dir", default=None,
                        help="Where staged artifacts are kept (default: a temporary folder "
                             "removed at exit).")
    return parser


def main(argv: Optional[List[str]] = None,
         prog: str = "python -m runners.spark.job_server") -> int:
    """Run the job server until SIGINT or SIGTERM (``prog``: the command's name in its
    help)."""
    args = _parser(prog).parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        server = SparkJobServer(port=args.port, host=args.host,
                                spark_master_url=args.spark_master_url,
                                spark_conf=args.spark_conf, staging_dir=args.staging_dir,
                                allow_remote_clients=args.allow_remote_clients,
                                spark_remote=args.spark_remote)
    except ValueError as error:
        _parser(prog).error(str(error))
    try:
        server.start()
    except OSError as error:
        print(f"error: {error}", file=sys.stderr)
        server.stop()
        return 1
    stopping = threading.Event()

    def request_stop(signum, frame) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    print(f"Job server listening on {server.endpoint}", flush=True)
    stopping.wait()
    _LOGGER.info("Stopping the job server")
    server.stop()
    return 0
