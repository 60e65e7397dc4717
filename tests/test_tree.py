"""The tree tells the architecture: no folder of more than 15 modules of its own, and the few
modules kept only so that a published name keeps working are nothing but that.

A folder that grows past :data:`MAX_MODULES` is a package holding several ideas: split it
into packages, one idea each (as ``runners/spark/`` was split into ``planning/``,
``execution/``, ``worker/``, ``chains/``, ``state/``). A *shim* is a module that moved and
whose old name users, README or scripts may still import or run; it is listed in
:data:`SHIMS` and holds nothing but imports from its new home (and a ``__main__`` block for
a command).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List

from test_layers import PACKAGES, imported_names, product_modules

from project import REPO

#: The most modules a folder may hold besides its ``__init__.py``, its ``conftest.py``
#: (pytest's configuration of the folder) and shims.
MAX_MODULES = 15
#: A folder's own files that configure it rather than hold one of its ideas.
FOLDER_FILES = ("__init__.py", "conftest.py")
#: Old module name -> where it lives now (kept for code, notebooks and commands that use it).
SHIMS: Dict[str, str] = {
    "runners.spark.streaming.state_table": "runners.spark.state.table.reader",
    "runners.spark.streaming.state_table_cli": "runners.spark.state.table.cli",
}


def crowded_folders(root: Path, folders: List[Path], shims: Dict[str, str]) -> List[str]:
    """``folder: n modules`` for each folder holding more than :data:`MAX_MODULES` modules of
    its own (:data:`FOLDER_FILES` and shims not counted).

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> for index in range(MAX_MODULES + 1):
    ...     _ = (folder / f"m{index}.py").write_text("")
    >>> crowded_folders(folder.parent, [folder], {})[0].endswith(": 16 modules")
    True
    >>> crowded_folders(folder.parent, [folder], {f"{folder.name}.m0": "elsewhere"})
    []
    """
    crowded = []
    for folder in folders:
        names = [".".join(path.relative_to(root).with_suffix("").parts)
                 for path in folder.glob("*.py") if path.name not in FOLDER_FILES]
        own = [name for name in names if name not in shims]
        if len(own) > MAX_MODULES:
            crowded.append(f"{folder.relative_to(root)}: {len(own)} modules")
    return crowded


def _folders(top: Path) -> List[Path]:
    return sorted(path for path in [top, *top.rglob("*")]
                  if path.is_dir() and "__pycache__" not in path.parts
                  and not any(part.startswith(".") for part in path.parts)
                  and any(path.glob("*.py")))


def test_no_folder_holds_more_than_fifteen_modules_of_its_own():
    folders = [folder for package in PACKAGES for folder in _folders(REPO / package)]
    folders += _folders(REPO / "tests")
    assert crowded_folders(REPO, folders, SHIMS) == []


def test_a_shim_only_imports_from_where_its_module_went():
    modules = product_modules()
    for shim, home in SHIMS.items():
        tree = ast.parse(modules[shim].read_text())
        statements = [node for node in tree.body
                      if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))]
        for node in statements:
            if isinstance(node, ast.If):  # `if __name__ == "__main__":` of a command
                assert ast.unparse(node.test) == "__name__ == '__main__'", shim
                continue
            assert isinstance(node, (ast.Import, ast.ImportFrom)), (
                f"{shim} holds more than imports: line {node.lineno}")
        assert {module for module, _ in imported_names(tree)} == {home}, shim
        assert home in modules, f"{shim} points to {home}, which does not exist"
