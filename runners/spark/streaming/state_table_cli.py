"""``python -m runners.spark.state.table.cli``: the state reader's command under the
name it was first published with; it is :mod:`runners.spark.state.table.cli`."""

from runners.spark.state.table.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
