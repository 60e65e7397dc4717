"""Staged artifacts reach the job server's Spark executors.

Beam's client stages a job's dependencies through the ArtifactStagingService; the server
installs the job's packages offline into a folder of the job's own, which its Spark workers
put on their path, and loads its pickled main session in each worker:

* ``--extra_package``: a wheel and a source distribution, both built here;
* ``--requirements_file`` with ``--requirements_cache``: the client stages the packages of
  its cache (a wheel built here; the client's ``pip download`` runs offline, from the cache);
  a requirement the server already has is not installed again; one neither staged nor
  installed fails the job with its name and what to do;
* ``--save_main_session``: a script run as ``__main__`` whose elements use a logical type
  and a RowCoder registration made at the script's module level (Beam restores those
  registries from the pickled main session; without it the worker cannot decode them).

The test process itself never imports the staged packages.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tarfile
import textwrap
import zipfile

import apache_beam as beam
import pytest
from apache_beam.runners.runner import PipelineState

from test_job_server import job_endpoint, portable_options, read_lines  # noqa: F401 (fixture)

pytestmark = pytest.mark.timeout(900)


def build_wheel(directory, module: str, source: str, requires=()) -> str:
    """A minimal pure-Python wheel holding one package, ``module``."""
    path = directory / f"{module}-1.0-py3-none-any.whl"
    info = f"{module}-1.0.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {module}\nVersion: 1.0\n"
    metadata += "".join(f"Requires-Dist: {requirement}\n" for requirement in requires)
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(f"{module}/__init__.py", source)
        wheel.writestr(f"{info}/METADATA", metadata)
        wheel.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: tests\n"
                                        "Root-Is-Purelib: true\nTag: py3-none-any\n")
        wheel.writestr(f"{info}/RECORD", "")
    return str(path)


def build_sdist(directory, module: str, source: str) -> str:
    """A minimal setuptools source distribution holding one package, ``module``."""
    root = directory / f"{module}-1.0"
    (root / module).mkdir(parents=True)
    (root / module / "__init__.py").write_text(source)
    (root / "setup.py").write_text(
        f"from setuptools import setup\nsetup(name={module!r}, version='1.0', "
        f"packages=[{module!r}])\n")
    (root / "PKG-INFO").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 1.0\n")
    path = directory / f"{module}-1.0.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        archive.add(root, arcname=root.name)
    return str(path)


@pytest.fixture
def offline_pip(monkeypatch):
    """Beam's client runs ``pip download`` for --requirements_file: here it finds packages
    in the requirements cache only (no index, no machine-wide pip settings)."""
    for name in list(os.environ):
        if name.upper().startswith("PIP_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")


def test_staged_packages_are_installed_for_the_job(job_endpoint, tmp_path,  # noqa: F811
                                                    offline_pip):
    names = {"wheel": "job_server_staged_wheel", "sdist": "job_server_staged_sdist",
             "requirement": "job_server_required_wheel"}
    for name in names.values():
        assert importlib.util.find_spec(name) is None, f"{name} must exist only as a package"
    wheel = build_wheel(tmp_path, names["wheel"], "def shout(word):\n    return word.upper()\n")
    sdist = build_sdist(tmp_path, names["sdist"], "def mark(word):\n    return word + '!'\n")
    cache = tmp_path / "requirements-cache"
    cache.mkdir()
    build_wheel(cache, names["requirement"], "def wrap(word):\n    return f'<{word}>'\n",
                requires=["kafka-python>=3"])  # a dependency the server has: not staged
    requirements = tmp_path / "requirements.txt"
    # apache-beam is on the server (and left out of the cache by Beam's client).
    requirements.write_text(f"{names['requirement']}==1.0\napache-beam\n")
    output = str(tmp_path / "decorated")

    def decorate(word):
        import importlib as loader
        shout = loader.import_module(names["wheel"]).shout
        mark = loader.import_module(names["sdist"]).mark
        wrap = loader.import_module(names["requirement"]).wrap
        return wrap(mark(shout(word)))

    pipeline = beam.Pipeline(options=portable_options(
        job_endpoint, f"--extra_package={wheel}", f"--extra_package={sdist}",
        f"--requirements_file={requirements}", f"--requirements_cache={cache}"))
    _ = (pipeline | beam.Create(["spark", "beam"]) | beam.Map(decorate)
         | beam.io.WriteToText(output))
    assert pipeline.run().wait_until_finish() == PipelineState.DONE
    assert sorted(read_lines(output)) == ["<BEAM!>", "<SPARK!>"]


def test_a_requirement_neither_staged_nor_installed_fails_the_job(
        job_endpoint, tmp_path, offline_pip):  # noqa: F811
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("kafka-python>=3\njob-server-never-staged==1.0\n")
    pipeline = beam.Pipeline(options=portable_options(
        job_endpoint, f"--requirements_file={requirements}", "--requirements_cache=skip"))
    _ = pipeline | beam.Create([1]) | beam.Map(lambda number: number)
    result = pipeline.run()
    with pytest.raises(RuntimeError) as failed:
        result.wait_until_finish()
    assert result.state == PipelineState.FAILED
    message = str(failed.value)
    assert "job-server-never-staged" in message
    assert "--requirements_cache" in message
    assert "kafka-python" not in message  # installed on the server: not a problem


MAIN_SCRIPT = textwrap.dedent('''
    """A user's script: types registered at module level, pickled with the main session."""
    import re
    import sys
    import typing

    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.typehints.schemas import LogicalType, NoArgumentLogicalType

    SEPARATOR = re.compile(r"[,;]")


    class Temperature:
        def __init__(self, celsius):
            self.celsius = celsius


    @LogicalType.register_logical_type
    class TemperatureType(NoArgumentLogicalType[Temperature, float]):
        @classmethod
        def urn(cls):
            return "beam:logical_type:job_server_test_temperature:v1"

        @classmethod
        def language_type(cls):
            return Temperature

        @classmethod
        def representation_type(cls):
            return float

        def to_representation_type(self, value):
            return value.celsius

        def to_language_type(self, value):
            return Temperature(value)


    class Reading(typing.NamedTuple):
        city: str
        temperature: Temperature


    beam.coders.registry.register_coder(Reading, beam.coders.RowCoder)


    def parse(text):
        city, celsius = text.split("=")
        return Reading(city, Temperature(float(celsius)))


    def fahrenheit(reading):
        return f"{reading.city}: {reading.temperature.celsius * 9 / 5 + 32:.0f} F"


    if __name__ == "__main__":
        output, *flags = sys.argv[1:]
        with beam.Pipeline(options=PipelineOptions(flags)) as pipeline:
            _ = (pipeline
                 | beam.Create(["oslo=-5;lima=20"])
                 | beam.FlatMap(SEPARATOR.split)
                 | beam.Map(parse).with_output_types(Reading)
                 | beam.Reshuffle()  # the next stage decodes Readings with a RowCoder
                 | beam.Map(fahrenheit)
                 | beam.io.WriteToText(output))
''')


def test_the_main_session_of_the_submitting_script_is_loaded(job_endpoint, tmp_path):  # noqa: F811
    script = tmp_path / "readings.py"
    script.write_text(MAIN_SCRIPT)
    output = str(tmp_path / "fahrenheit")
    completed = subprocess.run(
        [sys.executable, str(script), output, "--runner=PortableRunner",
         f"--job_endpoint={job_endpoint}", "--environment_type=LOOPBACK",
         "--save_main_session"],
        cwd=str(tmp_path), capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert sorted(read_lines(output)) == ["lima: 68 F", "oslo: 23 F"]
