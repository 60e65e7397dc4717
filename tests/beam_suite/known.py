"""Why a Beam test that passes on the DirectRunner fails on our runner, when we know.

Each entry names a test (a prefix of its id, ``apache_beam/<file>::<class>::<test>``), the
runners it fails on, and the cause; :mod:`run` prints it beside the failure. A cause is one
of: a known problem being fixed elsewhere (``known: ...``), or a test that assumes Beam's
in-process runner (``one process: ...``, ``one bundle: ...``, ``one stage: ...``), where the
runner is right and the test could not pass on any distributed runner. An entry of a known problem goes
when the problem is fixed (an entry may match a whole class where the problem can strike
any of its tests). The problems of issue 44 are fixed: no job sees another's result, Beam's
CSV and JSON IO keep their elements' types, and relative paths mean the driver's working
directory.

>>> explain("apache_beam/nothing_test.py::T::test_x", "classic") is None
True
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

BOTH = ("classic", "connect")
TEXTIO = "apache_beam/io/textio_test.py::"
INFERENCE = "apache_beam/ml/inference/base_test.py::RunInferenceBaseTest::"
#: Test id prefix -> (runners, cause).
KNOWN: Dict[str, Tuple[Tuple[str, ...], str]] = {
    # One bundle: the test counts on Beam's in-process runner reading Create's few
    # elements as one bundle; ours splits them over local[2]'s two partitions.
    TEXTIO + "CsvTest::test_csv_read_with_filename": (BOTH, "one bundle: asserts WriteToCsv "
        "wrote one file, without num_shards (the runner's choice: one shard per bundle)"),
    INFERENCE + "test_run_inference_loads_different_models": (BOTH, "one bundle: an "
        "incrementing model numbers the elements of its bundle; [1, 2, 3] needs the three "
        "in one bundle (ours: [1, 2] and [1])"),
    INFERENCE + "test_runinference_loads_same_model_with_identifier_multi_process_shared": (
        BOTH, "one bundle: one incrementing model shared by two steps and two processes; "
        "[4, 5, 6] needs one bundle through both steps in order"),
    INFERENCE + "test_timing_metrics": (BOTH, "one bundle: asserts 3 inference batches (and "
        "one model load) for 4 elements: BatchElements' batches grow within a bundle, two "
        "bundles of 2 make 4 batches and a load each"),
    INFERENCE + "test_run_inference_impl_with_keyed_examples_many_mhs_max_models_hint": (
        BOTH, "one bundle: asserts more than 2 model loads, which needs one worker to see "
        "the keys of both models alternate in Create's order; with a model shared across "
        "processes, two bundles load each model once"),
    INFERENCE + "test_run_inference_timeout_does_garbage_collection": (BOTH, "one bundle: "
        "the timed-out model is deleted 10 s (twice the timeout) later, when the same worker "
        "processes a later element: the test gives it the 15 one-second elements after the "
        "slow one, split over two bundles they end sooner and the file is never written"),
    # One stage: the test needs a keyed step to run inside its producer's stage, between two
    # of a splittable DoFn's residuals, as Beam's in-process runner fuses it (no shuffle by
    # key in one process). A distributed runner shuffles by key before a stateful step, and
    # in batch a stage runs to its end before the next; with --streaming (micro-batches)
    # both tests pass on ours, classic and Connect.
    TEXTIO + "TextSourceTest::test_read_all_continuously_": (BOTH, "one stage: the stateful "
        "DoFn that writes new files runs after a shuffle by key; in batch the continuous "
        "match (2 s of ticks) ends before it runs, so no tick sees the new files. Passes with "
        "--streaming, where each micro-batch runs every stage"),
    # One process: the test reads in the test process what the pipeline did in workers.
    INFERENCE + "test_env_vars_set_correctly": (BOTH, "one process: asserts the model "
        "handler's env_vars set os.environ of the test process; they are set in the Python "
        "workers that run the model"),
}


def explain(test: str, runner: str) -> Optional[str]:
    """The cause of ``test``'s failure on ``runner``, if known."""
    for prefix, (runners, cause) in KNOWN.items():
        if test.startswith(prefix) and runner in runners:
            return cause
    return None
