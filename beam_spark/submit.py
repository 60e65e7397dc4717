"""``beam-spark submit``: a pipeline through PySpark's own ``spark-submit``, with the same
name resolution as ``beam-spark run``.

``beam-spark submit [SPARK-SUBMIT OPTIONS] FILE [ARGS...]`` (or ``-m MODULE``) runs
``spark-submit [SPARK-SUBMIT OPTIONS] <the launcher> run FILE [ARGS...]``: spark-submit's
driver is the launcher, which runs the pipeline as ``beam-spark run`` does, so
``--runner=SparkRunner`` is ours there too. The runner then runs on the SparkContext that
spark-submit configured (its ``--master``, ``--name``, ``--conf``; ``--spark_master_url`` is
not needed) and ships the project's packages to its executors itself.
The driver's and executors' Python is this interpreter unless ``PYSPARK_PYTHON``,
``PYSPARK_DRIVER_PYTHON`` or ``--conf spark.pyspark.python=...`` says otherwise.

>>> split_application(["--master", "local[2]", "--verbose", "--conf=a=b", "job.py", "--x"])
(['--master', 'local[2]', '--verbose', '--conf=a=b'], ['job.py', '--x'])
>>> split_application(["--name", "n", "-m", "my_package.job", "--runner", "spark"])
(['--name', 'n'], ['-m', 'my_package.job', '--runner', 'spark'])
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import List, Optional, Sequence, Tuple

from beam_spark.pyspark_install import pyspark_folder

USAGE = """usage: {prog} [SPARK-SUBMIT OPTIONS] FILE [ARGS...]
       {prog} [SPARK-SUBMIT OPTIONS] -m MODULE [ARGS...]

Run a Beam pipeline through PySpark's spark-submit, as `{run}` runs it: --runner=SparkRunner
means this project's runner, on the SparkContext spark-submit configures (its --master,
--name, --conf). spark-submit's options come first (spark-submit --help lists them), then
the pipeline's FILE or -m MODULE, then the pipeline's own arguments. Needs the full PySpark.

Example:
  {prog} --master spark://HOST:7077 my_pipeline.py --runner SparkRunner --output out/counts
"""

#: spark-submit's options that take no value (every other option takes one).
FLAG_OPTIONS = ("--verbose", "-v", "--supervise", "--help", "-h", "--version", "--usage-error")


def split_application(args: Sequence[str]) -> Tuple[List[str], List[str]]:
    """``(spark-submit's options, [FILE or -m MODULE, ARGS...])``."""
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "-m" or not arg.startswith("-"):
            break
        index += 1 if arg in FLAG_OPTIONS or "=" in arg else 2
    return list(args[:index]), list(args[index:])


def launcher_script() -> str:
    """The file spark-submit runs as its Python application: the launcher's ``__main__``."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "__main__.py")


def submit_command(args: Sequence[str]) -> List[str]:
    """The spark-submit command line for ``beam-spark submit args...``."""
    options, application = split_application(args)
    if not application or application == ["-m"]:
        raise ValueError("give the pipeline's FILE or -m MODULE after spark-submit's options")
    folder = pyspark_folder()
    spark_submit = os.path.join(folder or "", "bin", "spark-submit")
    return [spark_submit, *options, launcher_script(), "run", *application]


def main(argv: Optional[List[str]] = None, prog: str = "beam-spark submit") -> int:
    """Run spark-submit; returns its exit status (the pipeline's)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE.format(prog=prog, run="beam-spark run"),
              file=sys.stdout if args else sys.stderr)
        return 0 if args else 2
    try:
        command = submit_command(args)
    except ValueError as error:
        print(f"{prog}: {error}\n\n{USAGE.format(prog=prog, run='beam-spark run')}",
              file=sys.stderr)
        return 2
    environment = dict(os.environ)
    # spark-submit starts the driver with PYSPARK_DRIVER_PYTHON, else PYSPARK_PYTHON, else
    # "python3" from the PATH, which may lack Beam: this interpreter has it.
    environment.setdefault("PYSPARK_PYTHON", sys.executable)
    environment.setdefault("PYSPARK_DRIVER_PYTHON", environment["PYSPARK_PYTHON"])
    print(f"{prog}: {' '.join(command)}", file=sys.stderr, flush=True)
    status = subprocess.call(command, env=environment)
    return status if status >= 0 else 128 - status  # killed by a signal: as a shell says
