"""The state reader's functions under the name they were first published with.

They live in :mod:`runners.spark.state.table.reader` (keyed state is a package of its own,
:mod:`runners.spark.state`); code and notebooks that import them from here keep working.

>>> from runners.spark.state.table.reader import state_rows
>>> state_rows.__module__
'runners.spark.state.table.reader'
"""

from runners.spark.state.table.reader import *  # noqa: F401,F403
from runners.spark.state.table.reader import __all__  # noqa: F401
