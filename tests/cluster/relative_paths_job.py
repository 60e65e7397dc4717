"""Relative paths on a cluster, from a driver process of its own.

    python relative_paths_job.py PRIVATE_DIR SHARED_DIR [beam options ...]

The driver starts its Spark (a first pipeline runs), then changes directory twice: into
``PRIVATE_DIR``, which the cluster's workers do not see (the driver's ``/tmp``: each
isolated worker has one of its own), then into ``SHARED_DIR``, which they do. In each it
reads ``./in.txt`` (a path the pipeline names), reads ``./*.txt`` from a pattern in the
data (``ReadAllFromText``) and writes ``out/words``. It prints one JSON line: what each
run gave (``DONE``, or the error's type and message).
"""

from __future__ import annotations

import json
import os
import sys

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions


def run(build, options: PipelineOptions) -> str:
    from runners.spark import SparkRunner

    try:
        with beam.Pipeline(runner=SparkRunner(), options=options) as pipeline:
            build(pipeline)
    except Exception as error:  # reported to the test, which checks it
        return f"{type(error).__name__}: {error}"
    return "DONE"


def named_path(pipeline) -> None:
    _ = (pipeline | beam.io.ReadFromText("./in.txt") | beam.Map(str.upper)
         | beam.io.WriteToText("out/words"))


def pattern_in_the_data(pipeline) -> None:
    _ = (pipeline | beam.Create(["./*.txt"]) | beam.io.ReadAllFromText()
         | beam.Map(str.upper) | beam.io.WriteToText(os.path.abspath("out/from-data")))


def main() -> None:
    private, shared, *beam_args = sys.argv[1:]
    options = PipelineOptions(beam_args)
    results = {"started": run(lambda p: p | beam.Create([1]) | beam.Map(lambda x: x), options)}
    for name, directory in (("private", private), ("shared", shared)):
        os.chdir(directory)
        with open("in.txt", "w", encoding="utf-8") as file:
            file.write(f"{name}\n")
        results[name] = {"named": run(named_path, options),
                         "in_the_data": run(pattern_in_the_data, options)}
    print(json.dumps(results), flush=True)


if __name__ == "__main__":
    main()
