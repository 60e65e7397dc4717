"""``beam-spark run``: a user's pipeline, run as Python runs it, with ``SparkRunner`` ours.

``beam-spark run FILE ARGS...`` is ``python FILE ARGS...`` and ``beam-spark run -m MODULE
ARGS...`` is ``python -m MODULE ARGS...``, with one difference: Beam's table of runner names
resolves ``SparkRunner`` (``spark``, in any case) to our runner on PySpark
(:func:`runners.resolution.claim_spark_runner_name`), however the pipeline names it (its
command line, ``PipelineOptions(runner=...)``, ``beam.Pipeline(runner=...)``); every other
runner is Beam's, and an unknown name fails as Beam fails.

The program sees what Python would show it: ``__name__ == "__main__"``, ``sys.argv`` (its
path or the module's file first, then ARGS), its own folder first on ``sys.path`` (the
current folder for ``-m``). Its exit status is the launcher's: ``sys.exit(n)`` gives ``n``;
an exception gives 1 and its traceback, from the program's first frame, as Python prints it.
"""

from __future__ import annotations

import builtins
import importlib.machinery
import io
import os
import runpy
import sys
import types
from types import TracebackType
from typing import List, Optional

USAGE = """usage: {prog} FILE [ARGS...]
       {prog} -m MODULE [ARGS...]

Run a Beam pipeline as `python FILE ARGS` (or `python -m MODULE ARGS`) would, with
--runner=SparkRunner (also `spark`, in any case, or a name given in the pipeline's code)
meaning this project's runner on PySpark instead of Beam's Java job-server runner. Every
other runner (DirectRunner, PortableRunner, DataflowRunner, ...) is Beam's.

The runner's options: --spark_master_url URL (classic Spark: local[N], spark://, yarn,
k8s://), --spark_remote sc://HOST:PORT (Spark Connect), --spark_conf KEY=VALUE, --streaming,
--checkpoint_dir DIR, ... (the project's docs/reference.md lists them all).

Example:
  {prog} my_pipeline.py --runner SparkRunner --spark_master_url local[2] --output out/counts
"""

#: The launcher's own files, left out of a failing program's traceback.
_LAUNCHER_FILES = (os.path.abspath(__file__), runpy.__file__, "<frozen runpy>")


def main(argv: Optional[List[str]] = None, prog: str = "beam-spark run") -> int:
    """Run the program ``argv`` names (``FILE ARGS...`` or ``-m MODULE ARGS...``); returns
    its exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE.format(prog=prog), file=sys.stdout if args else sys.stderr)
        return 0 if args else 2
    if args[0] == "-m":
        if len(args) < 2:
            print(f"{prog}: -m needs a module name\n\n{USAGE.format(prog=prog)}",
                  file=sys.stderr)
            return 2
        return run_module(args[1], args[2:])
    if args[0].startswith("-"):
        print(f"{prog}: unknown option {args[0]!r}: give the pipeline's FILE or -m MODULE "
              "first, then its arguments", file=sys.stderr)
        return 2
    return run_file(args[0], args[1:])


def run_file(path: str, args: List[str]) -> int:
    """``python path args...``, with ``SparkRunner`` ours; returns the exit status."""
    if not os.path.exists(path):
        print(f"{sys.executable}: can't open file {os.path.abspath(path)!r}: "
              "No such file or directory", file=sys.stderr)
        return 2
    sys.argv = [path, *args]
    # As Python does: the file's folder first on the path, its __file__ absolute.
    absolute = os.path.abspath(path)
    sys.path[0:1] = [os.path.dirname(absolute)]
    if not os.path.isfile(absolute):  # a folder or zip with a __main__.py: runpy's
        return _run(lambda: runpy.run_path(absolute, run_name="__main__"))
    return _run(lambda: _run_as_main(absolute))


def _run_as_main(path: str) -> None:
    """Run a source file as the ``__main__`` module, as ``python path`` does (runpy's
    ``run_path`` would set ``sys.argv[0]`` to the absolute path, Python leaves it as given)."""
    with io.open_code(path) as source:
        code = compile(source.read(), path, "exec")  # the file's own encoding (PEP 263)
    module = types.ModuleType("__main__")
    module.__file__ = path
    module.__loader__ = importlib.machinery.SourceFileLoader("__main__", path)
    module.__builtins__ = builtins
    sys.modules["__main__"] = module
    exec(code, module.__dict__)


def run_module(module: str, args: List[str]) -> int:
    """``python -m module args...``, with ``SparkRunner`` ours; returns the exit status."""
    sys.argv = ["-m", *args]  # runpy puts the module's file in place of "-m"
    sys.path[0:1] = [os.getcwd()]
    return _run(lambda: runpy.run_module(module, run_name="__main__", alter_sys=True))


def _run(program) -> int:
    from runners.resolution import claim_spark_runner_name

    claim_spark_runner_name()
    try:
        program()
    except (SystemExit, KeyboardInterrupt):
        raise  # its exit status (or Python's answer to an interrupt), as Python gives it
    except BaseException as error:  # the program failed: shown as Python shows it
        error = error.with_traceback(_programs_frames(error.__traceback__))
        sys.excepthook(type(error), error, error.__traceback__)
        sys.stderr.flush()
        return 1
    return 0


def _programs_frames(frames: Optional[TracebackType]) -> Optional[TracebackType]:
    """The traceback from the program's first frame on (None: it failed before its first
    line ran, e.g. a syntax error or a module that is not there: Python shows no frame)."""
    while frames is not None and frames.tb_frame.f_code.co_filename.startswith(_LAUNCHER_FILES):
        frames = frames.tb_next
    return frames


__all__ = ["main", "run_file", "run_module"]
