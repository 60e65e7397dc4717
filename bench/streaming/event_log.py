"""The server's side of :mod:`bench.streaming.phases`: Spark Connect's operations, the Spark
jobs and stages, with their times, read from Spark's event log (``spark.eventLog.enabled``)."""

from __future__ import annotations

import dataclasses
import glob
import json
import os
from typing import Dict, List, Optional, Tuple


@dataclasses.dataclass
class Operation:
    """A Spark Connect operation as the server's event log has it (seconds)."""

    operation: str
    started: float
    analyzed: Optional[float] = None
    ready: Optional[float] = None
    finished: Optional[float] = None


@dataclasses.dataclass
class Stage:
    """A Spark stage as the event log has it: when it ran (seconds) and its tasks' times
    (launch, finish, seconds; Python's own time, ms, where Spark SQL measured it)."""

    stage: int
    submitted: float
    completed: float
    tasks: List[Tuple[float, float, float]] = dataclasses.field(default_factory=list)


def read_event_log(directory: str) -> Tuple[Dict[str, Operation], List[Tuple[float, float]],
                                            List[Stage]]:
    """The Connect operations (by id), the Spark jobs (submitted, completed) and the stages
    of the event logs in ``directory``."""
    operations: Dict[str, Operation] = {}
    submitted: Dict[int, float] = {}
    jobs: List[Tuple[float, float]] = []
    tasks: Dict[int, List[Tuple[float, float, float]]] = {}
    stages: List[Stage] = []
    suffix = "service.SparkListenerConnectOperation"
    for path in glob.glob(os.path.join(directory, "*")):
        with open(path, encoding="utf-8") as log:
            for line in log:
                event = json.loads(line)
                name = event["Event"]
                if name == "SparkListenerTaskEnd":
                    info = event["Task Info"]
                    python = sum(float(entry.get("Update", 0)) for entry in
                                 info.get("Accumulables", ())
                                 if entry.get("Name") == "time to execute Python code")
                    tasks.setdefault(event["Stage ID"], []).append(
                        (info["Launch Time"] / 1000, info["Finish Time"] / 1000, python))
                elif name == "SparkListenerStageCompleted":
                    info = event["Stage Info"]
                    if "Submission Time" in info:
                        stages.append(Stage(info["Stage ID"], info["Submission Time"] / 1000,
                                            info["Completion Time"] / 1000,
                                            tasks.pop(info["Stage ID"], [])))
                elif name == "SparkListenerJobStart":
                    submitted[event["Job ID"]] = event["Submission Time"] / 1000
                elif name == "SparkListenerJobEnd" and event["Job ID"] in submitted:
                    jobs.append((submitted.pop(event["Job ID"]), event["Completion Time"] / 1000))
                elif suffix in name:
                    what = name.rsplit(suffix, 1)[1]
                    at = event["eventTime"] / 1000
                    if what == "Started":
                        operations[event["operationId"]] = Operation(event["operationId"], at)
                    elif event["operationId"] in operations:
                        operation = operations[event["operationId"]]
                        if what == "Analyzed":
                            operation.analyzed = at
                        elif what == "ReadyForExecution":
                            operation.ready = at
                        elif what == "Finished":
                            operation.finished = at
    return operations, sorted(jobs), sorted(stages, key=lambda stage: stage.submitted)
