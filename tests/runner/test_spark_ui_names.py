"""Spark's own tools show Beam's graph: every job and stage the runner starts, as Spark's
event log (what its UI and history server read) records them, is named for its Beam steps.

The runs happen in a driver process of their own (``spark_ui_job.py``): the event log is a
setting of a SparkContext, and the tests' shared one keeps none.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any, Dict, List

import pytest

from project import PYTHON, QUICK_JVM_OPTIONS, REPO

#: One test process runs both tests: they read one event log, whose job takes ~22 s.
pytestmark = pytest.mark.xdist_group("spark_ui_event_log")

#: A limit for the driver's three small runs (its Spark start-up included).
DRIVER_LIMIT_SECONDS = 240


@pytest.fixture(scope="module")
def event_log(tmp_path_factory) -> List[Dict[str, Any]]:
    directory = tmp_path_factory.mktemp("event-log")
    subprocess.run([PYTHON, str(Path(__file__).with_name("spark_ui_job.py")), str(directory),
                    *QUICK_JVM_OPTIONS], cwd=REPO, check=True, timeout=DRIVER_LIMIT_SECONDS,
                   capture_output=True)
    [log] = list(directory.iterdir())
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


def _jobs(events: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    return [event for event in events if event["Event"] == "SparkListenerJobStart"]


def test_every_job_is_described_by_its_run_and_micro_batch(event_log):
    jobs = _jobs(event_log)
    assert len(jobs) >= 5
    descriptions = [job["Properties"]["spark.job.description"] for job in jobs]
    assert all(text.startswith(("Beam pipeline: ", "Beam micro-batch ")) for text in descriptions), \
        descriptions
    batch = [text for text in descriptions if text.startswith("Beam pipeline: ")]
    assert batch and all("Sum/Merge" in text and "Format" in text for text in batch), batch
    # One job group per micro-batch, inside the run's tag (what cancelling it cancels).
    streaming = [job["Properties"] for job in jobs
                 if job["Properties"]["spark.job.description"].startswith("Beam micro-batch")]
    for properties in streaming:
        tag = properties["spark.job.tags"]
        batch_number = int(properties["spark.job.description"].split()[2].rstrip(":"))
        assert properties["spark.jobGroup.id"] == f"{tag}-batch-{batch_number:06d}"
    assert len({properties["spark.jobGroup.id"] for properties in streaming}) >= 4


def test_every_stage_is_named_for_the_beam_steps_it_runs(event_log):
    stages = [stage["Stage Name"] for job in _jobs(event_log) for stage in job["Stage Infos"]]
    assert stages and all(name.startswith("Beam") for name in stages), stages
    assert not [name for name in stages if "threading.py" in name or "copy_local" in name]
    # A shuffle map stage names what it runs and the step it shuffles for; the stage after
    # the shuffle names the GroupByKey and what follows it.
    assert "Beam: Window + Sum/Precombine -> Sum/Group" in stages
    assert any(name.startswith("Beam: Sum/Group + Sum/Merge") and name.endswith("Format")
               for name in stages), stages
    # Maintenance jobs say what they do.
    assert any("keyed state" in name for name in stages)
