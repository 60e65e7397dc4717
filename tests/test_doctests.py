"""Every documented example in the project's modules runs and gives what it says."""

import doctest
import importlib
import pkgutil

import pytest

PACKAGES = ["bench", "pictures", "pipelines", "transforms", "triggers", "runners", "services"]


def _modules():
    for package_name in PACKAGES:
        package = importlib.import_module(package_name)
        yield package_name
        for info in pkgutil.walk_packages(package.__path__, prefix=package_name + "."):
            if info.name.endswith("__main__"):
                continue
            yield info.name


@pytest.mark.parametrize("module_name", sorted(_modules()))
def test_documented_examples_run(module_name):
    module = importlib.import_module(module_name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} documented example(s) failed in {module_name}"
