"""The import graph of the product code: no cycles, imports pointing one way, Beam's
internals in one module.

The layers, from the top::

    bench/                      may import everything below
    beam_spark/                 the launcher (beam-spark): runs the runner, starts services
    pipelines/  (jobs, live demo)
    pictures/                   draws plain data (matplotlib); runs nothing
    transforms/   triggers/     the model's library: Beam only
    runners/                    Beam and Spark; never the library or the jobs
    services/                   local broker and cluster; the demo and tests start them

Inside the runner, its packages stand on floors (:data:`RUNNER_FLOORS`), from the top::

    job_server/  graph  daemon      what users and Spark start: Beam's Job API, the picture,
                                    the Python workers' daemon
    runner                          SparkRunner: plans, then runs in batch or streaming
    streaming/                      the micro-batch loop (only runner.py starts it)
    state/       execution/         keyed state; running a plan's stages (driver side)
    backends/                       classic Spark or Spark Connect, behind one contract
    worker/                         what runs in a task's Python worker
    dependencies/                   code and packages shipped to the workers
    planning/                       from a pipeline to a plan of fused stages
    text_io/                        Beam's text IO as the runner's own operations
    chains/                         element-only steps as the runner's own operations
    options  beam_internals         the runner's options; Beam's private APIs, in one module
    fast_paths  executor_identity   Beam's hot paths, installed by beam_internals; which
                                    executor a Python worker belongs to

A module imports its own package and the floors below its own, never a floor above nor
another package of its own floor. The graph is read from the source with :mod:`ast`, every
``import`` counted, also those inside functions (an import done late is still a
dependency). ``from package import module`` counts as an import of the module.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

import pytest

from project import REPO

PACKAGES = ("beam_spark", "bench", "pictures", "pipelines", "transforms", "triggers", "runners",
            "services")

#: Module-name prefix -> the prefixes its imports may name (besides its own package).
ALLOWED: Dict[str, Tuple[str, ...]] = {
    "bench": ("pictures", "pipelines", "transforms", "triggers", "runners", "services"),
    # The launcher runs a user's pipeline on the runner and starts the project's services.
    "beam_spark": ("runners", "services"),
    # A job accepts the runner's options and names it, and draws the runner's stage graph
    # (--graph); the demo starts local services.
    "pipelines": ("pictures", "transforms", "triggers", "runners.resolution",
                  "runners.spark.options", "runners.spark.graph", "services"),
    "pictures": (),
    "transforms": (),
    "triggers": (),
    "runners": (),
    "services": (),
}

#: The runner's packages (and top-level modules), floor by floor from the top (see above).
RUNNER_FLOORS: Tuple[Tuple[str, ...], ...] = tuple(
    tuple(f"runners.spark.{name}" for name in floor) for floor in (
        ("job_server", "graph", "daemon"),
        ("runner",),
        ("streaming",),
        ("state", "execution"),
        ("backends",),
        ("worker",),
        ("dependencies",),
        ("planning",),
        ("text_io",),
        ("chains",),
        ("options", "beam_internals"),
        ("fast_paths", "executor_identity"),
    ))

#: Beam modules that are not public API: only ``runners/spark/beam_internals.py`` imports them.
PRIVATE_BEAM_MODULES = (
    "apache_beam.internal",
    "apache_beam.coders.coder_impl",
    "apache_beam.metrics.cells",
    "apache_beam.metrics.execution",
    "apache_beam.metrics.monitoring_infos",
    "apache_beam.portability",
    "apache_beam.runners",
)
#: ... except these, which Beam documents for users.
PUBLIC_BEAM_MODULES = (
    "apache_beam.runners.runner",
    "apache_beam.runners.direct.direct_runner",
)
BEAM_INTERNALS = "runners.spark.beam_internals"


def product_modules() -> Dict[str, Path]:
    """Dotted module name -> source file, for every module of the product packages."""
    modules = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            name = ".".join(path.relative_to(REPO).with_suffix("").parts)
            modules[name.removesuffix(".__init__")] = path
    return modules


def imported_names(tree: ast.AST) -> Iterator[Tuple[str, List[str]]]:
    """``(module, names)`` of every absolute import in ``tree`` (names empty for ``import m``)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module, [alias.name for alias in node.names]


def import_graph(modules: Dict[str, Path]) -> Dict[str, Set[str]]:
    """Module -> the product modules it imports."""

    def owner(name: str) -> str:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name

    graph: Dict[str, Set[str]] = {}
    for name, path in modules.items():
        edges = graph.setdefault(name, set())
        for module, names in imported_names(ast.parse(path.read_text(), str(path))):
            submodules = [f"{module}.{item}" for item in names if f"{module}.{item}" in modules]
            for target in submodules or [module]:
                found = owner(target)
                if found and found != name:
                    edges.add(found)
    return graph


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm).

    >>> cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}})
    [['a', 'b']]
    """
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph.get(module, ())):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def _matches(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def runner_floor(module: str) -> "Tuple[int, str] | None":
    """``(floor, part)`` of a runner module: its floor in :data:`RUNNER_FLOORS` (0 is the
    top) and the package or module of that floor it belongs to; None outside them.

    >>> runner_floor("runners.spark.state.table.reader")
    (3, 'runners.spark.state')
    >>> runner_floor("runners.resolution") is None
    True
    """
    for floor, parts in enumerate(RUNNER_FLOORS):
        for part in parts:
            if _matches(module, part):
                return floor, part
    return None


def _runner_import_allowed(importer: str, target: str) -> bool:
    if _matches(target, "runners.spark.streaming") and not (
            _matches(importer, "runners.spark.streaming") or importer == "runners.spark.runner"):
        return False  # only the runner starts the streaming engine
    mine, theirs = runner_floor(importer), runner_floor(target)
    if mine is None or theirs is None:
        return True
    return mine[1] == theirs[1] or theirs[0] > mine[0]


def layer_violations(graph: Dict[str, Set[str]]) -> List[str]:
    """``importer -> imported`` for every import against :data:`ALLOWED` and the runner's
    floors."""
    wrong = []
    for importer, targets in sorted(graph.items()):
        package = importer.split(".")[0]
        for target in sorted(targets):
            if target.split(".")[0] == package:
                allowed = _runner_import_allowed(importer, target)
            else:
                allowed = any(_matches(target, prefix) for prefix in ALLOWED[package])
            if not allowed:
                wrong.append(f"{importer} -> {target}")
    return wrong


def test_the_product_code_has_no_import_cycle():
    assert cycles(import_graph(product_modules())) == []


def test_imports_point_down_the_layers():
    assert layer_violations(import_graph(product_modules())) == []


def test_the_checks_catch_a_cycle_and_an_upward_import():
    # The same functions on a graph with the faults the two tests above must catch.
    graph = {"transforms.a": {"pipelines.b"}, "pipelines.b": {"transforms.a"},
             "runners.spark.planning.support": {"runners.spark.job_server.service"},
             "runners.spark.state.rescale": {"runners.spark.streaming.keyed_step",
                                             "runners.spark.execution.result"},
             "runners.spark.job_server.service": {"runners.spark.streaming.loop",
                                                  "runners.spark.runner"},
             "runners.spark.worker.bundles": {"runners.spark.worker.records",
                                              "runners.spark.planning.execution_plan"}}
    assert cycles(graph) == [["pipelines.b", "transforms.a"]]
    assert layer_violations(graph) == [
        "runners.spark.job_server.service -> runners.spark.streaming.loop",
        "runners.spark.planning.support -> runners.spark.job_server.service",
        "runners.spark.state.rescale -> runners.spark.execution.result",
        "runners.spark.state.rescale -> runners.spark.streaming.keyed_step",
        "transforms.a -> pipelines.b"]


def test_every_runner_module_stands_on_a_floor():
    outside = [name for name in product_modules()
               if _matches(name, "runners.spark") and name != "runners.spark"
               and runner_floor(name) is None]
    assert outside == [], "add them to RUNNER_FLOORS"


def _private_beam_module(module: str) -> bool:
    return (any(_matches(module, prefix) for prefix in PRIVATE_BEAM_MODULES)
            and not any(_matches(module, prefix) for prefix in PUBLIC_BEAM_MODULES))


def private_beam_imports(modules: Dict[str, Path]) -> List[str]:
    """``module: beam module[.name]`` for each import of a private Beam module, or of a private
    name from any Beam module, outside :data:`BEAM_INTERNALS`."""
    found = []
    for name, path in sorted(modules.items()):
        if name == BEAM_INTERNALS:
            continue
        for module, names in imported_names(ast.parse(path.read_text(), str(path))):
            if not _matches(module, "apache_beam"):
                continue
            # "from m import x" is judged by what it names (m.x: a module, or a name in m).
            targets = [f"{module}.{item}" for item in names] or [module]
            found.extend(f"{name}: {target}" for target in targets
                         if _private_beam_module(target)
                         or target.rpartition(".")[2].startswith("_"))
    return found


def test_beam_internals_are_imported_in_one_module():
    assert private_beam_imports(product_modules()) == []


@pytest.mark.parametrize("job", ["pipelines.team_scores", "pipelines.page_views",
                                 "pipelines.sensor_average"])
def test_a_job_on_the_direct_runner_does_not_import_pyspark(job):
    script = (f"import sys, {job}\n"
              "loaded = sorted(m for m in sys.modules if m.split('.')[0] == 'pyspark')\n"
              "print(loaded[:5])\n")
    completed = subprocess.run([sys.executable, "-c", script], cwd=REPO,
                               capture_output=True, text=True, timeout=120, check=True)
    assert completed.stdout.strip() == "[]", completed.stdout


def test_the_check_catches_a_private_beam_import(tmp_path):
    source = tmp_path / "example.py"
    source.write_text("from apache_beam.internal import pickler\n"
                      "from apache_beam.runners import runner\n"
                      "from apache_beam.runners.runner import PipelineResult\n"
                      "from apache_beam.transforms.trigger import _CombiningValueStateTag\n")
    assert private_beam_imports({"runners.spark.example": source}) == [
        "runners.spark.example: apache_beam.internal.pickler",
        "runners.spark.example: apache_beam.transforms.trigger._CombiningValueStateTag",
    ]


#: What of PySpark the runner's engine may import outside its backends: what a Python
#: worker has on classic Spark and on Spark Connect alike.
WORKER_SIDE_PYSPARK = ("pyspark.TaskContext", "pyspark.SparkFiles", "pyspark.cloudpickle",
                       "pyspark.daemon")
#: ... and what the Spark Connect backend may import besides (no SparkContext, no RDD).
CONNECT_PYSPARK = ("pyspark.sql", "pyspark.storagelevel")
BACKENDS = "runners.spark.backends"


def spark_imports_out_of_place(modules: Dict[str, Path]) -> List[str]:
    """``module: pyspark name`` for each import of PySpark a runner module may not make:
    classic Spark's API outside the classic backend, anything but the workers' side outside
    the backends (see :data:`WORKER_SIDE_PYSPARK`)."""
    found = []
    for name, path in sorted(modules.items()):
        if not _matches(name, "runners"):
            continue
        if name.startswith(f"{BACKENDS}.classic"):
            continue  # classic Spark's own backend: every API of PySpark
        allowed = WORKER_SIDE_PYSPARK + (CONNECT_PYSPARK if name.startswith(
            f"{BACKENDS}.connect") else ())
        for module, names in imported_names(ast.parse(path.read_text(), str(path))):
            if not _matches(module, "pyspark"):
                continue
            targets = [f"{module}.{item}" for item in names] or [module]
            found.extend(f"{name}: {target}" for target in targets
                         if not any(_matches(target, prefix) for prefix in allowed))
    return found


def test_spark_is_reached_through_the_backends_and_classic_spark_through_its_own():
    assert spark_imports_out_of_place(product_modules()) == []


def test_the_check_catches_a_classic_call_outside_its_backend(tmp_path):
    engine, connect = tmp_path / "engine.py", tmp_path / "connect.py"
    engine.write_text("from pyspark import TaskContext, SparkContext\n")
    connect.write_text("from pyspark.sql.types import BinaryType\nfrom pyspark import RDD\n")
    assert spark_imports_out_of_place({"runners.spark.execution.stage_pass": engine,
                                       f"{BACKENDS}.connect": connect}) == [
        f"{BACKENDS}.connect: pyspark.RDD",
        "runners.spark.execution.stage_pass: pyspark.SparkContext",
    ]
