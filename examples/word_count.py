"""A pipeline of your own: the words of --input counted into --output.

    python word_count.py --input in.txt --output counts.txt             # Beam's DirectRunner
    beam-spark run word_count.py --input in.txt --output counts.txt \\
        --runner SparkRunner --spark_master_url 'local[2]'              # our SparkRunner
"""

import argparse
import sys

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions


def main(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    known, pipeline_args = parser.parse_known_args(argv)
    with beam.Pipeline(options=PipelineOptions(pipeline_args)) as pipeline:
        _ = (pipeline
             | beam.io.ReadFromText(known.input)
             | beam.FlatMap(str.split)
             | beam.combiners.Count.PerElement()
             | beam.MapTuple(lambda word, count: f"{word}: {count}")
             | beam.io.WriteToText(known.output, shard_name_template=""))


if __name__ == "__main__":
    main(sys.argv[1:])
