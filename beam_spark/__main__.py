"""``beam-spark`` (``python -m beam_spark``): the launcher's command line
(:mod:`beam_spark.commands`). ``beam-spark submit`` has spark-submit run this file."""

import sys

from beam_spark.commands import main

if __name__ == "__main__":
    sys.exit(main())
