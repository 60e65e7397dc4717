"""Every documented example in the tree runs and gives what it says: the product's modules,
and the test helpers' (a test module's own examples are tests of the helpers it defines)."""

import doctest
import importlib
import importlib.util
import pkgutil
import sys
from pathlib import Path

import pytest

PACKAGES = ["beam_spark", "bench", "pictures", "pipelines", "transforms", "triggers", "runners",
            "services"]
TESTS = Path(__file__).resolve().parent
OPTIONS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _modules():
    for package_name in PACKAGES:
        package = importlib.import_module(package_name)
        yield package_name
        for info in pkgutil.walk_packages(package.__path__, prefix=package_name + "."):
            if info.name.endswith("__main__"):
                continue
            yield info.name


def _test_files_with_examples():
    for path in sorted(TESTS.rglob("*.py")):
        if ">>> " in path.read_text() and path.name != Path(__file__).name:
            yield str(path.relative_to(TESTS))


@pytest.mark.parametrize("module_name", sorted(_modules()))
def test_documented_examples_run(module_name):
    module = importlib.import_module(module_name)
    result = doctest.testmod(module, optionflags=OPTIONS)
    assert result.failed == 0, f"{result.failed} documented example(s) failed in {module_name}"


@pytest.mark.parametrize("relative_path", list(_test_files_with_examples()))
def test_documented_examples_of_the_tests_run(relative_path):
    # Loaded under a name of its own, so a test module is not imported twice as itself.
    path = TESTS / relative_path
    name = "doctest_of_" + relative_path.replace("/", "_").removesuffix(".py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    # Registered while it runs: a dataclass of a module with postponed annotations looks its
    # module up in sys.modules.
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        result = doctest.testmod(module, optionflags=OPTIONS)
    finally:
        sys.modules.pop(name, None)
    assert result.attempted > 0, f"no example found in {relative_path}"
    assert result.failed == 0, f"{result.failed} documented example(s) failed in {relative_path}"
