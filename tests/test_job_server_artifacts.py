"""Staged artifacts reach the job server's Spark executors.

A pipeline whose DoFn imports a package that exists only as a wheel on the client side
(``--extra_package``) runs on the job server: Beam's client stages the wheel through the
ArtifactStagingService, the server ships it to its executors (``SparkContext.addPyFile``),
and the DoFn imports it there. The test process itself never imports the package.
"""

from __future__ import annotations

import importlib.util
import zipfile

import apache_beam as beam
from apache_beam.runners.runner import PipelineState

from test_job_server import job_endpoint, portable_options, read_lines  # noqa: F401 (fixture)

MODULE = "job_server_staged_helpers"


def build_wheel(directory, module: str, source: str) -> str:
    """A minimal pure-Python wheel holding one package, ``module``."""
    path = directory / f"{module}-1.0-py3-none-any.whl"
    info = f"{module}-1.0.dist-info"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(f"{module}/__init__.py", source)
        wheel.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {module}\nVersion: 1.0\n")
        wheel.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: tests\n"
                                        "Root-Is-Purelib: true\nTag: py3-none-any\n")
        wheel.writestr(f"{info}/RECORD", "")
    return str(path)


def test_an_extra_package_is_importable_in_the_executors(job_endpoint, tmp_path):  # noqa: F811
    assert importlib.util.find_spec(MODULE) is None, "the package must exist only as a wheel"
    wheel = build_wheel(tmp_path, MODULE, "def shout(word):\n    return word.upper() + '!'\n")
    output = str(tmp_path / "shouted")

    def shout(word):
        import importlib as loader
        return loader.import_module(MODULE).shout(word)

    pipeline = beam.Pipeline(options=portable_options(job_endpoint, f"--extra_package={wheel}"))
    _ = (pipeline | beam.Create(["spark", "beam"]) | beam.Map(shout)
         | beam.io.WriteToText(output))
    assert pipeline.run().wait_until_finish() == PipelineState.DONE
    assert sorted(read_lines(output)) == ["BEAM!", "SPARK!"]
