"""Beam's own tests of IO, the DataFrame API, RunInference and more, on our runner.

``python tests/beam_suite/run.py`` (``make test-beam-suite``) runs Beam's test files of
:data:`FILES` (from the installed ``apache_beam``) with pytest once per runner: Beam's
DirectRunner (the baseline), our SparkRunner on classic Spark (``local[2]``) and through
Spark Connect (a server on ``local[2]``); each runner in a process of its own that starts its
Spark once, the files one after the other (see :mod:`harness`). It prints, per file and
runner, the tests that passed, failed and were skipped, and those that do not apply (none
of their pipelines ran on that runner: Beam's tests that build ``beam.Pipeline()`` or name
a runner of Beam's); then every test that passes on the DirectRunner and fails on one of
ours, with its cause when :mod:`known` explains it. It exits non-zero when a difference is
unexplained.

Every report found there is in the table (the baseline of an earlier run too). Reports go
to ``out/beam-suite/<runner>.jsonl`` (one line per test, see :mod:`harness`) and
``out/beam-suite/summary.md``. Options::

    --runners direct,classic,connect   the runners (default: all three)
    --files PATH ...                   Beam test files, relative to apache_beam/ (default: FILES)
    --summary-only                     no run: the table from the reports already written
    --default-runner                   beam.Pipeline() runs on our runner too (Beam's default
                                       runner is the DirectRunner; the DataFrame API's tests
                                       build their pipelines so): reports <runner>-default-runner
    -- ARGS                            more pytest arguments (e.g. -- -k Quantiles -x, or
                                       -- --beam-suite-options=--spark_parallelism=1)

Integration tests (Beam's ``it_postcommit`` marker: Google Cloud Storage, a Dataflow
job) are deselected: they need Google Cloud on every runner.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Sequence

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path[:0] = [str(HERE)]

from known import explain  # noqa: E402

#: Beam's test files of the sweep, relative to the apache_beam package.
FILES = ("io/textio_test.py", "io/fileio_test.py", "dataframe/transforms_test.py",
         "ml/inference/base_test.py", "transforms/deduplicate_test.py",
         "transforms/periodicsequence_test.py", "transforms/stats_test.py")
RUNNERS = ("direct", "classic", "connect")
#: Beam's integration tests: Google Cloud on every runner.
DESELECT = "not it_postcommit"
OUT = REPO / "out" / "beam-suite"
#: The reports of runs with --default-runner (beam.Pipeline() on our runner too).
DEFAULT_RUNNER_SUFFIX = "-default-runner"


def report_name(runner: str, default_runner: bool) -> str:
    """The name of a runner's report (and column): ``classic``, ``classic-default-runner``."""
    return runner + (DEFAULT_RUNNER_SUFFIX if default_runner and runner != "direct" else "")


def run_runner(runner: str, files: Sequence[str], pytest_args: Sequence[str],
               default_runner: bool = False) -> Path:
    """One pytest process: every file on ``runner``; the path of its report."""
    import apache_beam

    beam = Path(apache_beam.__file__).resolve().parent
    report = OUT / f"{report_name(runner, default_runner)}.jsonl"
    report.unlink(missing_ok=True)
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(HERE), str(REPO / "tests")] + ([environment["PYTHONPATH"]]
                                           if environment.get("PYTHONPATH") else []))
    command = [sys.executable, "-m", "pytest", "-c", str(HERE / "pytest.ini"),
               "--rootdir", str(HERE), "-p", "harness", "-q", "-rN", "--disable-warnings",
               f"--beam-suite-runner={runner}", f"--beam-suite-report={report}",
               "-m", DESELECT, *(["--beam-suite-default-runner"] if default_runner else []),
               *pytest_args, *[str(beam / file) for file in files]]
    print(f"== {runner}: {' '.join(files)}", flush=True)
    subprocess.run(command, cwd=REPO, env=environment, check=False)
    return report


def read_report(path: Path) -> Dict[str, dict]:
    if not path.exists():
        return {}
    with open(path, encoding="utf-8") as report:
        return {record["test"]: record for record in map(json.loads, report)}


def counts(records: Dict[str, dict]) -> Dict[str, Dict[str, int]]:
    """Per file: passed, failed, skipped, and not applicable (n/a; of which ``no pipeline``
    ran none at all)."""
    table: Dict[str, Dict[str, int]] = collections.defaultdict(collections.Counter)
    for record in records.values():
        row = table[record["file"]]
        if record["outcome"] == "skipped":
            row["skipped"] += 1
        elif not record["applies"]:
            row["n/a"] += 1
            row["no pipeline"] += not record["runners"]
        else:
            row[record["outcome"]] += 1
    return table


def summary(reports: Dict[str, Dict[str, dict]]) -> str:
    """The table of counts, then every difference from the DirectRunner."""
    runners = list(reports)
    files = sorted({record["file"] for records in reports.values()
                    for record in records.values()})
    tables = {runner: counts(records) for runner, records in reports.items()}
    lines = ["| file | " + " | ".join(runners) + " |",
             "|---|" + "---|" * len(runners),
             ]
    for file in files:
        cells = []
        for runner in runners:
            row = tables[runner].get(file)
            cells.append("-" if row is None else f"{row['passed']}/{row['failed']}/"
                         f"{row['skipped']}/{row['n/a']}")
        lines.append(f"| {file} | " + " | ".join(cells) + " |")
    lines += ["", "Cells: passed/failed/skipped/not applicable (n/a: no pipeline of the test "
              "ran on that runner; it built beam.Pipeline(), named a runner of Beam's, or "
              "ran no pipeline at all); -: not run.", ""]
    for runner in runners:
        rows = tables[runner].values()
        not_applicable = sum(row["n/a"] for row in rows)
        none = sum(row["no pipeline"] for row in rows)
        lines.append(f"- {runner}: {sum(row['passed'] for row in rows)} passed, "
                     f"{sum(row['failed'] for row in rows)} failed, "
                     f"{sum(row['skipped'] for row in rows)} skipped, {not_applicable} not "
                     f"applicable ({none} ran no pipeline, {not_applicable - none} ran on "
                     "Beam's runners only)")
    baseline = reports.get("direct", {})
    unexplained = 0
    for runner in runners:
        if runner == "direct":
            continue
        differences = [record for test, record in sorted(reports[runner].items())
                       if record["applies"] and record["outcome"] == "failed"
                       and baseline.get(test, {}).get("outcome") == "passed"]
        also = [record for test, record in sorted(reports[runner].items())
                if record["applies"] and record["outcome"] == "failed"
                and baseline.get(test, {}).get("outcome") != "passed"]
        lines += ["", f"## {runner}: {len(differences)} test(s) pass on the DirectRunner "
                  "and fail here"]
        for record in differences:
            cause = explain(record["test"], runner.removesuffix(DEFAULT_RUNNER_SUFFIX))
            unexplained += cause is None
            lines.append(f"- `{record['test']}`: {cause or 'UNEXPLAINED'}")
            if cause is None and record.get("failure"):
                lines += ["  ```", *("  " + line for line in record["failure"].splitlines()),
                          "  ```"]
        if also:
            lines += ["", f"Failing here and not passing on the DirectRunner ({len(also)}):"]
            lines += [f"- `{record['test']}` (DirectRunner: "
                      f"{baseline.get(record['test'], {}).get('outcome', 'not run')})"
                      for record in also]
    lines += ["", f"Unexplained differences: {unexplained}"]
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    argv = list(argv)
    pytest_args: List[str] = []
    if "--" in argv:
        pytest_args = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runners", default=",".join(RUNNERS),
                        help="the runners, comma-separated (default: all three)")
    parser.add_argument("--files", nargs="+", default=list(FILES),
                        help="Beam test files, relative to apache_beam/")
    parser.add_argument("--summary-only", action="store_true",
                        help="no run: the table from the reports already written")
    parser.add_argument("--default-runner", action="store_true",
                        help="beam.Pipeline() runs on our runner too (the DataFrame API's "
                             "tests build their pipelines so): reports <runner>-default-runner")
    arguments = parser.parse_args(argv)
    runners = [runner.strip() for runner in arguments.runners.split(",") if runner.strip()]
    unknown = sorted(set(runners) - set(RUNNERS))
    if unknown:
        parser.error(f"--runners: unknown {unknown}; known: {', '.join(RUNNERS)}")
    OUT.mkdir(parents=True, exist_ok=True)
    empty = []
    if not arguments.summary_only:
        for runner in runners:
            report = run_runner(runner, arguments.files, pytest_args, arguments.default_runner)
            if not read_report(report):
                empty.append(runner)
    # Every report there is: the baseline of an earlier run too.
    names = [report_name(runner, default) for default in (False, True) for runner in RUNNERS]
    reports = {name: read_report(OUT / f"{name}.jsonl") for name in dict.fromkeys(names)}
    reports = {name: records for name, records in reports.items() if records}
    text = summary(reports)
    (OUT / "summary.md").write_text(text + "\n", encoding="utf-8")
    print(text)
    if empty:  # a sweep that ran nothing must not read as one that found nothing
        print(f"No test ran on {', '.join(empty)}: pytest collected none of the files "
              "(see its output above).", file=sys.stderr)
        return 2
    return 1 if "Unexplained differences: 0" not in text else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
