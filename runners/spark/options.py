"""Pipeline options of the Spark runner, and the Spark settings they imply.

The master comes from Beam's own ``--spark_master_url`` (defined by Beam's
``SparkRunnerOptions``, so pipelines written for Beam's Spark runner keep working); the
other settings are ours:

``--spark_remote URL``       run on a Spark Connect server (``sc://host:port``; default: the
                             ``SPARK_REMOTE`` environment variable, as PySpark reads it)
``--spark_conf KEY=VALUE``   a Spark setting, repeatable (``--spark_conf spark.executor.memory=2g``)
``--spark_parallelism N``    partitions of every shuffle (default: Spark's default parallelism)
``--bundle_size N``          at most N elements per bundle (default: one bundle per partition)
``--chain_simple_steps B``   run each run of element-only steps of a stage (Map, Filter, ...)
                             as one loop (default true; see :mod:`runners.spark.chains.planning`)
``--bulk_text_io B``         read and write Beam's text files (ReadFromText, ReadAllFromText,
                             WriteToText, ...) a chunk at a time with Beam's semantics
                             (default true; see :mod:`runners.spark.text_io`)
``--write_stages_in_driver B``  run the one-element stages of Beam's file writes (initialize,
                             pre-finalize, finalize) in the driver where the workers run
                             beside it (default true; see
                             :mod:`runners.spark.text_io.sink_stages`)

Streaming (``--streaming``; see :mod:`runners.spark.streaming`):

``--batch_interval_seconds S``     seconds between micro-batches on the wall clock (default 1)
``--max_batches N``                stop after N micro-batches (default: until the sources end)
``--streaming_timeout_seconds S``  stop after S seconds (default: no limit)
``--streaming_report FILE``        append one JSON line per micro-batch to FILE (progress,
                                   watermarks, state; format in :mod:`runners.spark.streaming.loop`)
``--checkpoint_dir DIR``           checkpoint the loop to DIR and resume from it on restart
                                   (see :mod:`runners.spark.state.checkpoint`)
``--checkpoint_interval_batches N``  micro-batches between checkpoints (default 10)
``--storage_retry_seconds S``      how long one operation of the checkpoint location retries
                                   transient errors before the batch fails (default 180)
``--streaming_compact_rounds B``   on a local master, run a round that holds little in one
                                   task (default true; see :mod:`runners.spark.streaming.
                                   compact_round`)

>>> from apache_beam.options.pipeline_options import PipelineOptions
>>> options = PipelineOptions(["--spark_conf", "spark.ui.enabled=false", "--bundle_size", "1000"])
>>> spark_settings(options)["spark.ui.enabled"]
'false'
>>> options.view_as(SparkRunnerOptions).bundle_size
1000
"""

from __future__ import annotations

import sys
from typing import Dict, Optional

from apache_beam.options.pipeline_options import PipelineOptions

#: Master used when ``--spark_master_url`` is left at Beam's default: every local core.
DEFAULT_MASTER = "local[*]"

#: Settings every session the runner creates gets, unless ``--spark_conf`` overrides them.
BASE_SETTINGS = {
    "spark.app.name": "beam-on-spark",
    "spark.ui.showConsoleProgress": "false",
    # Executors run the driver's interpreter, which has Beam and the project installed.
    "spark.pyspark.python": sys.executable,
    "spark.pyspark.driver.python": sys.executable,
    # Python workers fork from a daemon that has Beam imported already (seconds per worker).
    "spark.python.daemon.module": "runners.spark.daemon",
}


class SparkRunnerOptions(PipelineOptions):
    """Options of ``runners.spark.SparkRunner`` (the master is Beam's ``--spark_master_url``)."""

    @classmethod
    def _add_argparse_args(cls, parser) -> None:
        parser.add_argument(
            "--spark_remote",
            default=None,
            metavar="URL",
            help="Run on a Spark Connect server, e.g. sc://127.0.0.1:15002 (Spark 4's thin "
            "client; Databricks serverless and standard access mode). Default: the "
            "SPARK_REMOTE environment variable; without either, classic Spark "
            "(--spark_master_url).",
        )
        parser.add_argument(
            "--spark_conf",
            action="append",
            default=None,
            metavar="KEY=VALUE",
            help="A Spark setting for the session the runner creates; repeatable.",
        )
        parser.add_argument(
            "--spark_parallelism",
            type=int,
            default=None,
            help="Partitions of every shuffle (GroupByKey, Reshuffle, stateful input). "
            "Default: the SparkContext's default parallelism.",
        )
        parser.add_argument(
            "--bundle_size",
            type=int,
            default=None,
            help="At most this many elements per bundle. Default: one bundle per partition "
            "(bundles cost a few milliseconds each; larger is faster).",
        )
        parser.add_argument(
            "--chain_simple_steps",
            type=_boolean,
            default=True,
            metavar="true|false",
            help="Run each run of simple steps (Map, FlatMap, Filter, MapTuple, ..., DoFns "
            "whose process takes the element and maybe its timestamp, window or pane, with "
            "their bundle methods and metrics, WindowInto of a standard non-merging "
            "WindowFn) inside a fused stage as one loop that calls "
            "the functions directly, instead of one Beam operation per step. Same elements, "
            "timestamps, windows, panes, errors and metrics. Default: true; false gives "
            "every step Beam's own operation.",
        )
        parser.add_argument(
            "--bulk_text_io",
            type=_boolean,
            default=True,
            metavar="true|false",
            help="Read the ranges of Beam's own text source (ReadFromText, "
            "ReadFromTextWithFilename, ReadAllFromText) a chunk at a time instead of a line "
            "at a time through its range tracker, and write Beam's own text sink "
            "(WriteToText) a block of records at a time: the same lines, bytes, "
            "timestamps, windows, errors and metrics. A source or sink of another class "
            "keeps Beam's. Default: true; false reads and writes every text file through "
            "Beam's own operations.",
        )
        parser.add_argument(
            "--write_stages_in_driver",
            type=_boolean,
            default=True,
            metavar="true|false",
            help="In batch, run the one-element stages around a write of Beam's own file "
            "sinks (WriteToText, ...: initialize, pre-finalize, finalize) in the driver "
            "instead of a Spark job each, when every task would run on the driver's host "
            "in its directory (a local master whose workers see the driver's directory): "
            "the same Beam code on the same files. A user's own sink class, remote "
            "storage, and a cluster keep Spark jobs. Default: true.",
        )
        parser.add_argument(
            "--batch_interval_seconds",
            type=float,
            default=1.0,
            help="Streaming: seconds between micro-batches when the clock is the wall clock "
            "(a TestStream drives its own clock).",
        )
        parser.add_argument(
            "--max_batches",
            type=int,
            default=None,
            help="Streaming: stop after this many micro-batches (of this run: one resumed "
            "from a checkpoint counts from there). Default: run until every "
            "source is done and the watermark is at the end of time.",
        )
        parser.add_argument(
            "--streaming_timeout_seconds",
            type=float,
            default=None,
            help="Streaming: stop after this many seconds. Default: no limit.",
        )
        parser.add_argument(
            "--streaming_report",
            default=None,
            metavar="FILE",
            help="Streaming: append one JSON line per micro-batch to FILE (input count and "
            "rate, batch time, watermarks per step, watermark lag, state keys and bytes).",
        )
        parser.add_argument(
            "--checkpoint_dir",
            default=None,
            metavar="DIR",
            help="Streaming: checkpoint the micro-batch loop (sources' positions, state, "
            "watermarks) to DIR; a job started again with the same DIR and pipeline resumes "
            "from the latest checkpoint. Default: no checkpoints.",
        )
        parser.add_argument(
            "--checkpoint_interval_batches",
            type=int,
            default=10,
            help="Streaming: micro-batches between checkpoints (and one when the loop stops "
            "by itself). Default: 10.",
        )
        parser.add_argument(
            "--storage_retry_seconds",
            type=float,
            default=180.0,
            help="Streaming: how long one read or write of --checkpoint_dir (a state file, a "
            "checkpoint) retries transient errors (throttling, server errors, resets, "
            "timeouts), with exponential backoff, before the batch fails. Default: 180.",
        )
        parser.add_argument(
            "--streaming_compact_rounds",
            type=_boolean,
            default=True,
            metavar="true|false",
            help="Streaming, local masters: run a round whose sources hold little (TestStream "
            "events) in one Spark task instead of a Spark stage per fused stage and shuffle "
            "(a round then costs ~0.1 s instead of ~0.7 s). Default: true.",
        )
        parser.add_argument(
            "--on_signal",
            choices=["none", "drain"],
            default="none",
            help="Streaming: what SIGTERM does to a run started from the process's main "
            "thread. drain: drain the job (final panes, commits, a final checkpoint, then "
            "DONE; a second SIGTERM cancels). Default: none (the signal's own action). "
            "Ctrl-C (SIGINT) is left alone either way.",
        )


def _boolean(text: str) -> bool:
    """``true``/``false`` (also yes/no, 1/0) as a bool; anything else is refused.

    >>> _boolean("false"), _boolean("Yes")
    (False, True)
    """
    lowered = str(text).strip().lower()
    if lowered in ("true", "yes", "1"):
        return True
    if lowered in ("false", "no", "0"):
        return False
    raise ValueError(f"{text!r}: give true or false")


def validated(options: PipelineOptions) -> "SparkRunnerOptions":
    """The runner's options view, after checking every value (ValueError names a bad one)."""
    view = options.view_as(SparkRunnerOptions)
    for flag in ("spark_parallelism", "bundle_size", "max_batches",
                 "checkpoint_interval_batches"):
        value = getattr(view, flag)
        if value is not None and value < 1:
            raise ValueError(f"--{flag}={value}: give a positive whole number, or leave it unset")
    for flag in ("batch_interval_seconds", "streaming_timeout_seconds",
                 "storage_retry_seconds"):
        value = getattr(view, flag)
        if value is not None and value <= 0:
            raise ValueError(f"--{flag}={value}: give a positive number of seconds")
    parse_spark_conf(view.spark_conf)
    return view


def parse_spark_conf(entries: Optional[list]) -> Dict[str, str]:
    """``["k=v", ...]`` as a dict; a malformed entry raises ValueError naming it."""
    settings: Dict[str, str] = {}
    for entry in entries or []:
        key, separator, value = entry.partition("=")
        if not separator or not key.strip():
            raise ValueError(
                f"--spark_conf {entry!r}: give KEY=VALUE, "
                "e.g. --spark_conf spark.executor.memory=2g"
            )
        settings[key.strip()] = value
    return settings


def is_local_master(master: str) -> bool:
    """True for ``local`` and ``local[...]`` (one executor, in the driver's JVM); False for
    clusters (``spark://``, ``yarn``, ``k8s://``, ``local-cluster[...]``).

    >>> is_local_master("local[2]"), is_local_master("local"), is_local_master("yarn")
    (True, True, False)
    """
    return master == "local" or master.startswith("local[")


def explicit_master_url(options: PipelineOptions) -> Optional[str]:
    """The ``--spark_master_url`` the user gave, or None."""
    return options.get_all_options(drop_default=True).get("spark_master_url") or None


def master_url(options: PipelineOptions) -> str:
    """The master the user asked for, or :data:`DEFAULT_MASTER` when left at Beam's default."""
    return explicit_master_url(options) or DEFAULT_MASTER


def spark_settings(options: PipelineOptions) -> Dict[str, str]:
    """Every Spark setting for a session created for ``options`` (master included)."""
    settings = dict(BASE_SETTINGS)
    settings["spark.master"] = master_url(options)
    settings.update(parse_spark_conf(options.view_as(SparkRunnerOptions).spark_conf))
    return settings


__all__ = ["SparkRunnerOptions", "is_local_master", "master_url", "spark_settings", "validated"]
