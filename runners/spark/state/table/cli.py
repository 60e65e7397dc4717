"""The command line of the state reader: a job's keyed state as an aligned text table.

``beam-spark state --checkpoint_dir DIR [--batch N] [--step NAME]... [--changes START END]
[--version_changes START END] [--limit N]`` (or ``python -m runners.spark.state.table.cli``) prints
the rows of :func:`~runners.spark.state.table.reader.state_rows` (or, with ``--changes``,
the change feed between batches START and END: :func:`~runners.spark.state.table.reader.
batch_changes`; with ``--version_changes``, of store versions ``(START, END]``:
:func:`~runners.spark.state.table.reader.state_changes`), read on this machine without
Spark; ``--limit`` stops after N rows. Keys, windows and values are decoded with the step's
coders; a cell no coder could decode safely shows its bytes, and why is said once below the
table.

>>> print(format_table([("a", 1), ("bbb", None)], ["name", "n"]))
name  n
----  -
a     1
bbb
"""

from __future__ import annotations

import argparse
import collections
import itertools
import re
import sys
from typing import Any, Iterable, List, Optional, Sequence

from runners.spark.state.table.reader import (
    StateReadError,
    batch_changes,
    checkpoint_info,
    state_changes,
    state_rows,
)

#: The columns printed (the raw bytes are left to the Python and DataFrame readers).
COLUMNS = ("step", "partition", "key", "window", "kind", "name", "value", "timestamp", "hold",
           "version")
#: A cell is cut to this many characters (fused stage names and long values).
_WIDTH = 48


def _cell(value: Any) -> str:
    if value is None:
        return ""
    shown = value if isinstance(value, str) and value.isprintable() else (
        repr(value) if isinstance(value, (str, bytes)) else str(value))
    return shown if len(shown) <= _WIDTH else shown[:_WIDTH - 1] + "…"


_NOT_DECODED = re.compile(r"<not decoded: (.*)>$", re.S)


def not_decoded_reasons(rows: Iterable[Sequence[Any]]) -> "collections.Counter[str]":
    """How many cells each reason left undecoded (a reader's ``<not decoded: why>``).

    >>> not_decoded_reasons([("k", "b'x' <not decoded: no coder>"), ("<not decoded: no coder>",)])
    Counter({'no coder': 2})
    """
    found: "collections.Counter[str]" = collections.Counter()
    for row in rows:
        for value in row:
            match = _NOT_DECODED.search(value) if isinstance(value, str) else None
            if match:
                found[match.group(1)] += 1
    return found


def format_table(rows: Iterable[Sequence[Any]], columns: Sequence[str]) -> str:
    """Rows as left-aligned columns under a header."""
    cells = [[_cell(value) for value in row] for row in rows]
    widths = [max([len(name)] + [len(row[index]) for row in cells])
              for index, name in enumerate(columns)]

    def line(values: Sequence[str]) -> str:
        return "  ".join(value.ljust(width) for value, width in zip(values, widths)).rstrip()

    return "\n".join([line(columns), line(["-" * width for width in widths])]
                     + [line(row) for row in cells])


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Print a streaming job's keyed state, read from its checkpoint.")
    parser.add_argument("--checkpoint_dir", required=True,
                        help="The job's --checkpoint_dir (a path or a Beam filesystem URL).")
    parser.add_argument("--batch", type=int, default=None,
                        help="The checkpoint's batch (default: the latest).")
    parser.add_argument("--step", action="append", default=None, metavar="NAME",
                        help="Only this keyed step (repeatable).")
    parser.add_argument("--changes", type=int, nargs=2, default=None,
                        metavar=("START", "END"),
                        help="What the batches after START up to END changed, instead.")
    parser.add_argument("--version_changes", type=int, nargs=2, default=None,
                        metavar=("START", "END"),
                        help="The change feed of store versions (START, END] instead.")
    parser.add_argument("--limit", type=int, default=None, help="At most this many rows.")
    return parser


def main(argv: Optional[List[str]] = None,
         prog: str = "python -m runners.spark.state.table.cli") -> int:
    """Print the table; returns the exit status (1: the state cannot be read as asked).
    ``prog`` is the command's name in its help."""
    args = _parser(prog).parse_args(argv)
    try:
        info = checkpoint_info(args.checkpoint_dir, args.batch)
        if args.changes:
            start, end = args.changes
            rows: Iterable[Any] = batch_changes(args.checkpoint_dir, start, end, args.step)
            columns = COLUMNS + ("change_type",)
            title = f"changes after batch {start} up to batch {end}"
        elif args.version_changes:
            start, end = args.version_changes
            rows = state_changes(args.checkpoint_dir, start, end, args.step)
            columns = COLUMNS + ("change_type",)
            title = f"changes of versions ({start}, {end}]"
        else:
            rows = state_rows(args.checkpoint_dir, args.batch, args.step)
            columns = COLUMNS
            title = f"state at batch {info.batch} (version {info.version})"
        picked = [[getattr(row, name) for name in columns]
                  for row in itertools.islice(rows, args.limit)]
    except (StateReadError, ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"{info.path}: {title}, {len(picked)} row(s)")
    print(format_table(picked, columns))
    for reason, count in sorted(not_decoded_reasons(picked).items()):
        print(f"{count} cell(s) shown as bytes, not decoded: {reason}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
