"""``python -m pipelines.live`` (``make run``): the live demo (see :mod:`.demo`)."""

import sys

from pipelines.live.demo import main

sys.exit(main())
