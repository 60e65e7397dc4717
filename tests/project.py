"""Where the project is, and the Python that runs it, for tests that start processes.

>>> (REPO / "setup.py").exists()
True
"""

from __future__ import annotations

import sys
from pathlib import Path

#: The repository's root.
REPO = Path(__file__).resolve().parents[1]
#: The project's virtualenv Python when there is one (make test), else this interpreter.
PYTHON = str(REPO / ".venv" / "bin" / "python") if (REPO / ".venv").exists() else sys.executable
#: Spark settings of a short-lived test driver (a process of its own): its JVMs gain
#: nothing from the optimizing JIT, and the quick one with the serial collector halves
#: their start-up CPU.
QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
QUICK_JVM_OPTIONS = [f"--spark_conf=spark.driver.extraJavaOptions={QUICK_JVM}",
                     f"--spark_conf=spark.executor.extraJavaOptions={QUICK_JVM}"]
