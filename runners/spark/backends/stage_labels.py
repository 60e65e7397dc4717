"""What Spark's own tools call the runner's jobs and stages: Beam's steps, not PySpark's.

A stage's label lists the fused Beam steps it runs, and for a stage that ends in a shuffle
the step it shuffles for. Each backend puts the labels where its Spark shows them: classic
Spark in job descriptions and call sites (:mod:`~runners.spark.backends.classic_names`),
Spark Connect in job tags (:mod:`~runners.spark.backends.connect_names`).

>>> stage_label(["Parse", "Sum/GroupByKey/Write"], then="Sum/GroupByKey")
'Beam: Parse + Sum/GroupByKey/Write -> Sum/GroupByKey'
>>> stage_label([], then=None)
'Beam'
"""

from __future__ import annotations

from typing import Optional, Sequence

#: Longest stage name: Spark's UI shows it in a table cell.
MAX_SHORT_NAME = 200


def stage_label(steps: Sequence[str], then: Optional[str] = None) -> str:
    """A Spark stage's name: the Beam steps it runs, and the step its output is shuffled
    for (a shuffle map stage), at most :data:`MAX_SHORT_NAME` characters."""
    listed = " + ".join(dict.fromkeys(steps))  # in order, once each
    label = "Beam" + (f": {listed}" if listed else "") + (f" -> {then}" if then else "")
    if len(label) > MAX_SHORT_NAME:
        label = label[:MAX_SHORT_NAME - 3] + "..."
    return label
