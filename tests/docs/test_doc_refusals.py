"""The guide's table of refusals (docs/runners.md, *What runs, and what is refused*) is the
runner's: every ``raise UnsupportedPipelineError(...)`` in ``runners/`` has its row, and no
row stands for a refusal the code no longer makes. A new refusal fails here until the table
names it (and :data:`REFUSALS` says which row does) or :data:`NOT_IN_TABLE` says why not."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List

from project import REPO

TABLE_PAGE = REPO / "docs" / "runners.md"
#: A phrase of each refusal's message (as written in the code) -> a phrase of its row.
REFUSALS: Dict[str, str] = {
    "the pipeline requires": "a pipeline requirement other than stateful processing",
    "cross-language transform of another SDK": "a transform in another SDK's environment",
    "which the Spark runner does not implement": "a primitive the runner does not implement",
    "only event and processing time are supported": "a timer in a time domain other than",
    "read each other's outputs in a cycle": "read each other's outputs in a cycle",
    "a Reshuffle redistributes one": "a Reshuffle stage that reads more than one input",
    # support._UNBOUNDED_SOURCE, the message of an unbounded output nothing splittable made
    "_UNBOUNDED_SOURCE": "an unbounded PCollection made by anything but a splittable DoFn",
}
#: Refusals the table leaves out, with why.
NOT_IN_TABLE: Dict[str, str] = {
    "is a TestStream: the Spark runner runs TestStream in streaming only": "no run reaches it: "
        "the runner and the job server run every TestStream in streaming "
        "(support.runs_in_streaming); it guards a caller of check_supported that says batch",
}


def _message_text(call: ast.Call) -> str:
    """The literal text of a refusal's message, and the names it interpolates."""
    parts: List[str] = []
    for node in ast.walk(call):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            parts.append(node.value)
        elif isinstance(node, ast.Name):
            parts.append(node.id)
    return " ".join(parts)


def refusal_messages() -> List[str]:
    """The message text of every ``raise UnsupportedPipelineError(...)`` in ``runners/``."""
    messages = []
    for path in sorted(Path(REPO, "runners").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)
                    and getattr(node.exc.func, "id", None) == "UnsupportedPipelineError"):
                messages.append(_message_text(node.exc))
    return messages


def test_every_refusal_of_the_runner_has_its_row():
    messages = refusal_messages()
    assert messages, "no raise UnsupportedPipelineError(...) found: did the refusals move?"
    unmapped = [message for message in messages
                if not any(phrase in message for phrase in {**REFUSALS, **NOT_IN_TABLE})]
    assert unmapped == [], (
        "refusals with no row in docs/runners.md's table: add a row, and the message's "
        f"phrase -> the row's phrase to REFUSALS: {unmapped}")


def test_every_row_stands_for_a_refusal_the_runner_makes():
    messages = refusal_messages()
    table = TABLE_PAGE.read_text()
    gone = [phrase for phrase in {**REFUSALS, **NOT_IN_TABLE}
            if not any(phrase in message for message in messages)]
    assert gone == [], f"REFUSALS names messages the runner no longer has: {gone}"
    missing = [row for row in REFUSALS.values() if row not in table]
    assert missing == [], f"rows missing from {TABLE_PAGE.name}'s table: {missing}"
