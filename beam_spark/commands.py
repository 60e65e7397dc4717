"""The launcher's commands: each one the ``main(argv, prog)`` of a module of the project, so
``python -m <module>`` keeps working and ``beam-spark <command>`` is the same command.

>>> sorted(COMMANDS)
['cluster', 'connect-server', 'job-server', 'kafka', 'run', 'state', 'submit']
>>> main(["--help"])  # doctest: +ELLIPSIS
usage: beam-spark COMMAND [ARGS...]
...
0
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence

from beam_spark.pyspark_install import full_pyspark_problem

PROG = "beam-spark"


def _always(args: Sequence[str]) -> bool:
    return True


def _without_a_connect_server(args: Sequence[str]) -> bool:
    """A job server runs on Spark Connect with ``--spark_remote`` (or ``SPARK_REMOTE``)."""
    return not (os.environ.get("SPARK_REMOTE")
                or any(arg == "--spark_remote" or arg.startswith("--spark_remote=")
                       for arg in args))


class Command(NamedTuple):
    """A command: the module whose ``main(argv, prog)`` it runs, a line of help, and when
    it needs the full PySpark (Spark's jars and scripts) rather than its Connect client."""

    module: str
    summary: str
    needs_full_pyspark: Optional[Callable[[Sequence[str]], bool]] = None


COMMANDS: Dict[str, Command] = {
    "run": Command("beam_spark.program",
                   "run a pipeline file or module (-m) with --runner=SparkRunner meaning ours"),
    "submit": Command("beam_spark.submit",
                      "the same through PySpark's spark-submit (its options first)", _always),
    "state": Command("runners.spark.state.table.cli",
                     "print a streaming job's keyed state from its --checkpoint_dir"),
    "job-server": Command("runners.spark.job_server.server",
                          "serve Beam's Job API (--runner=PortableRunner clients)",
                          _without_a_connect_server),
    "connect-server": Command("services.connect_server",
                              "start, stop or show a local Spark Connect server", _always),
    "cluster": Command("services.cluster",
                       "start, stop or show a local Spark standalone cluster", _always),
    "kafka": Command("services.broker",
                     "start, stop or show a local Kafka-protocol broker (embedded)"),
}


def usage() -> str:
    lines = [f"usage: {PROG} COMMAND [ARGS...]", "",
             "Run your own Beam pipeline on the SparkRunner of this project, and its "
             "services.", "", "commands:"]
    lines += [f"  {name:<15} {command.summary}" for name, command in COMMANDS.items()]
    lines += ["", f"{PROG} COMMAND --help describes a command. Examples:",
              f"  {PROG} run my_pipeline.py --runner SparkRunner --spark_master_url local[2]",
              f"  {PROG} run -m my_package.job --runner SparkRunner --spark_remote "
              "sc://HOST:15002",
              f"  {PROG} submit --master spark://HOST:7077 my_pipeline.py --runner SparkRunner"]
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    """Run ``beam-spark COMMAND ARGS...``; returns the command's exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage(), file=sys.stdout if args else sys.stderr)
        return 0 if args else 2
    name, rest = args[0], args[1:]
    command = COMMANDS.get(name)
    if command is None:
        hint = (f" (to run a pipeline file: {PROG} run {name} ...)"
                if name.endswith(".py") or os.path.isfile(name) else "")
        print(f"{PROG}: unknown command {name!r}{hint}; the commands are "
              f"{', '.join(COMMANDS)} ({PROG} --help)", file=sys.stderr)
        return 2
    # After a pipeline's file, --help is the pipeline's: only before it is it the command's.
    own = rest[:1] if name in ("run", "submit") else rest
    wants_help = any(arg in ("-h", "--help") for arg in own)
    if command.needs_full_pyspark and not wants_help and command.needs_full_pyspark(rest):
        problem = full_pyspark_problem()
        if problem:
            print(f"{PROG} {name}: {problem}", file=sys.stderr)
            return 2
    module = importlib.import_module(command.module)
    return module.main(rest, prog=f"{PROG} {name}")
