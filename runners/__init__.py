"""Where pipelines run: runner-name resolution, and our Beam runner on PySpark (``runners.spark``)."""

from runners.resolution import resolve_runner

__all__ = ["resolve_runner"]
