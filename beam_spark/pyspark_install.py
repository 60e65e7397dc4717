"""Whether the installed PySpark is the full one (Spark's jars and scripts) or only its
Spark Connect client (``pip install pyspark-client``, or ``pyspark[connect]`` on a machine
that reaches Spark through a Connect server), for the commands that start a JVM.

>>> import tempfile
>>> thin = tempfile.mkdtemp()
>>> print(full_pyspark_problem(thin))  # doctest: +ELLIPSIS
needs the full PySpark (Spark's jars and its bin/spark-submit), but the pyspark at ... lacks
them: it is PySpark's Spark Connect client. Install the full PySpark (pip install
'beam-spark-dataflow[spark]', in an environment without pyspark-client), or run pipelines on a
Spark Connect server: beam-spark run my_pipeline.py --runner SparkRunner --spark_remote
sc://HOST:15002
"""

from __future__ import annotations

import importlib.util
import os
from typing import Optional

_CONNECT_INSTEAD = ("run pipelines on a Spark Connect server: beam-spark run my_pipeline.py "
                    "--runner SparkRunner --spark_remote sc://HOST:15002")


def pyspark_folder() -> Optional[str]:
    """The installed ``pyspark`` package's folder (found without importing it), or None."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def full_pyspark_problem(folder: Optional[str] = None) -> str:
    """Why the full PySpark is not there ('' when it is): ``folder`` is the pyspark package's
    (default: the installed one's)."""
    folder = folder or pyspark_folder()
    if folder is None:
        return ("needs PySpark, which is not installed: pip install 'beam-spark-dataflow[spark]'")
    if (os.path.isdir(os.path.join(folder, "jars"))
            and os.path.isfile(os.path.join(folder, "bin", "spark-submit"))):
        return ""
    return (f"needs the full PySpark (Spark's jars and its bin/spark-submit), but the pyspark "
            f"at {folder} lacks them: it is PySpark's Spark Connect client. Install the full "
            f"PySpark (pip install 'beam-spark-dataflow[spark]', in an environment without "
            f"pyspark-client), or {_CONNECT_INSTEAD}")
