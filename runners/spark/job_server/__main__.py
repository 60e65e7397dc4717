"""``python -m runners.spark.job_server``: serve Beam's Job API (see :mod:`.server`)."""

import sys

from runners.spark.job_server.server import main

sys.exit(main())
