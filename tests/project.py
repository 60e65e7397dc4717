"""Where the project is, and the Python that runs it, for tests that start processes.

>>> (REPO / "setup.py").exists()
True
"""

from __future__ import annotations

import sys
from pathlib import Path

#: The repository's root.
REPO = Path(__file__).resolve().parents[1]
#: The interpreter running the tests (the virtualenv's of make test, or of make test-python):
#: a job started from a test runs on the Python the suite runs on, never on .venv's when the
#: suite runs on another (its workers, given this Python by the Spark fixtures, would differ).
PYTHON = sys.executable
#: JVM options of every Spark JVM the tests start: a test driver runs many small jobs and
#: gains nothing from the optimizing JIT; the quick one with the serial collector halves a
#: short-lived driver's start-up CPU, and cut the shared sessions' model tests by 22-32%
#: (193 s -> 131-151 s for four model files on both Spark runners, two test processes).
QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
QUICK_JVM_OPTIONS = [f"--spark_conf=spark.driver.extraJavaOptions={QUICK_JVM}",
                     f"--spark_conf=spark.executor.extraJavaOptions={QUICK_JVM}"]
