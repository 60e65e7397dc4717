"""The documentation holds together: every example is marked (run, or why not), every link
and anchor leads somewhere, every picture under docs/ is shown, and every test, file, module,
make target and option the pages name exists.

Anchors are computed as GitHub computes them (:func:`doc_pages.github_anchor`); links to
other sites are not followed (the tests run offline), only checked to be ``https://``.
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
from pathlib import Path
from typing import Dict, List, Optional, Set

import pytest

from doc_pages import MODES, Page, page_paths, pages
from doc_reference import REFERENCE, makefile_entries
from project import REPO

#: Picture files a page may show.
IMAGE_SUFFIXES = (".png", ".svg", ".jpg", ".jpeg", ".gif")
#: Top-level folders whose paths the pages name in code spans.
TREE = (".ci", "beam_spark", "bench", "docs", "examples", "pictures", "pipelines", "runners",
        "services", "tests", "transforms", "triggers")
PACKAGES = ("beam_spark", "bench", "pictures", "pipelines", "transforms", "triggers", "runners",
            "services")
#: Options the pages name that are not the project's nor Beam's pipeline options: other
#: programs' (spark-submit, pip, pytest, ssh, PySpark's Connect server), and why.
OTHER_PROGRAMS_OPTIONS = {
    "--master", "--name", "--conf", "--deploy-mode", "--py-files", "--archives",  # spark-submit
    "--verbose", "--help", "--version",
    "--no-deps", "--wheel-dir", "--quiet", "--user", "--upgrade",  # pip
    "--collect-only", "--rootdir", "--tb", "--durations", "--maxfail",  # pytest
    "--beam-suite-options",  # tests/beam_suite's pytest option
    "--cert", "--key", "--authentication",  # the tansu broker's (docs/SECURITY.md)
}
#: Paths the pages name that a run makes (ignored by git).
MADE_BY_RUNS = {"bench/results", "out", "out/beam-suite"}


@pytest.fixture(scope="module")
def all_pages() -> List[Page]:
    return pages()


def test_the_pages_exist():
    assert all(path.exists() for path in page_paths()), [
        str(path) for path in page_paths() if not path.exists()]


def test_every_code_block_names_its_language_and_every_example_how_it_is_tested(all_pages):
    wrong = []
    for page in all_pages:
        for block in page.blocks:
            if not block.language:
                wrong.append(f"{block.where}: a code block without a language (```text for "
                             "a screen or an output, ```python or ```sh for an example)")
            elif block.is_example and block.mode is None:
                wrong.append(f"{block.where}: an example without <!-- example: fast|slow|"
                             "file NAME|not run: REASON --> on the line before it")
            elif block.is_example and block.mode not in MODES:
                wrong.append(f"{block.where}: unknown example mode {block.mode!r}")
            elif block.mode == "not run" and len(block.reason) < 10:
                wrong.append(f"{block.where}: an example not run must say why")
            elif block.mode == "file" and not block.file_name:
                wrong.append(f"{block.where}: `example: file` needs the file's name")
    assert wrong == [], "\n".join(wrong)


def test_every_example_file_is_used_by_an_example_that_runs(all_pages):
    unused = []
    for page in all_pages:
        for index, block in enumerate(page.blocks):
            if block.mode != "file":
                continue
            later = [other for other in page.blocks[index + 1:]
                     if other.mode in ("fast", "slow", "file")]  # a file another file imports
            parts = Path(block.file_name).parts
            module = parts[0] if len(parts) > 1 else Path(block.file_name).stem
            uses = [block.file_name, f"import {module}", f"from {module} "]
            if block.file_name == "conftest.py":  # pytest reads it by itself
                uses.append("pytest")
            if not any(use in other.text for other in later for use in uses):
                unused.append(f"{block.where}: {block.file_name} is run by no later example")
    assert unused == [], "\n".join(unused)


def _anchor_targets(all_pages: List[Page]) -> Dict[Path, Set[str]]:
    return {REPO / page.path: page.anchors for page in all_pages}


def test_every_link_and_anchor_leads_somewhere(all_pages):
    anchors = _anchor_targets(all_pages)
    broken = []
    for page in all_pages:
        folder = (REPO / page.path).parent
        for link in page.links:
            target = link.target
            if re.match(r"^[a-z]+:", target):
                if not target.startswith(("https://", "mailto:")):
                    broken.append(f"{page.path}:{link.line}: {target}: use https://")
                continue
            path_part, _, anchor = target.partition("#")
            path = (folder / path_part).resolve() if path_part else REPO / page.path
            if not path.exists():
                broken.append(f"{page.path}:{link.line}: {target}: no such file")
            elif REPO not in path.parents and path != REPO:
                broken.append(f"{page.path}:{link.line}: {target}: outside the repository")
            elif anchor and anchor not in anchors.get(path, set()):
                known = path in anchors
                broken.append(f"{page.path}:{link.line}: {target}: " + (
                    "no such heading" if known else "an anchor into a file that is no page"))
    assert broken == [], "\n".join(broken)


def test_every_picture_under_docs_is_shown_and_every_shown_picture_exists(all_pages):
    shown: Set[Path] = set()
    for page in all_pages:
        folder = (REPO / page.path).parent
        for link in page.links:
            if not re.match(r"^[a-z]+:", link.target) and link.target.lower().endswith(
                    IMAGE_SUFFIXES):
                shown.add((folder / link.target.partition("#")[0]).resolve())
    pictures = {path.resolve() for path in (REPO / "docs").rglob("*")
                if path.suffix.lower() in IMAGE_SUFFIXES}
    unshown = sorted(str(path.relative_to(REPO)) for path in pictures - shown)
    assert unshown == [], f"pictures under docs/ no page shows (show or delete them): {unshown}"



# ---- what the pages name exists -------------------------------------------------------------

_TEST_CITE = re.compile(r"((?:[a-z_]+/)*)(test_[a-z0-9_]+\.py)(?:::([A-Za-z0-9_]+))?"
                        r"|(?<![\w/.])::(test_[A-Za-z0-9_]+)")


def _defined_names(path: Path) -> Set[str]:
    tree = ast.parse(path.read_text())
    return {node.name for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def _test_file(folder: str, name: str) -> Optional[Path]:
    """The file a cite names: a test under tests/ (the folder relative to it), a file of the
    repository (an example, or a module named like a test such as ``test_stream.py``)."""
    folder = folder.removeprefix("tests/")
    if folder:
        for candidate in (REPO / "tests" / folder / name, REPO / folder / name):
            if candidate.exists():
                return candidate
        return None
    found = [path for top in ("tests", "examples", *PACKAGES)
             for path in (REPO / top).rglob(name)]
    return found[0] if len(found) == 1 else None


def cited_tests(text: str, own_files: Set[str] = frozenset()) -> List[str]:
    """What is wrong with the tests ``text`` cites (``area/test_file.py::test_name``, and a
    bare ``::test_name`` after one: a test of the same file); ``own_files`` are the files
    the page's examples write (a reader's test file).

    >>> cited_tests("`state/test_rescale.py::no_such_test`, `::test_x`")
    ['state/test_rescale.py::no_such_test: no such test in tests/state/test_rescale.py', \
'::test_x: no such test in tests/state/test_rescale.py']
    """
    wrong, current = [], None
    for match in _TEST_CITE.finditer(text):
        folder, name, test, continued = match.groups()
        if continued:
            if current is not None and continued not in _defined_names(current):
                wrong.append(f"::{continued}: no such test in {current.relative_to(REPO)}")
            continue
        if not folder and name in own_files:
            current = None
            continue
        current = _test_file(folder, name)
        if current is None:
            wrong.append(f"{folder}{name}: no such test file (or more than one)")
        elif test and test not in _defined_names(current):
            wrong.append(f"{folder}{name}::{test}: no such test in {current.relative_to(REPO)}")
    return wrong


def test_every_test_the_pages_cite_exists(all_pages):
    wrong = [f"{page.path}: {problem}" for page in all_pages
             for problem in cited_tests(page.text, {block.file_name for block in page.blocks
                                                    if block.mode == "file"})]
    assert wrong == [], "\n".join(wrong)


def _code_spans(page: Page) -> List[str]:
    """The page's inline code and code blocks' lines."""
    spans = re.findall(r"(`+)(.+?)\1", re.sub(r"```.*?```", "", page.text, flags=re.S))
    return [span for _, span in spans] + [line for block in page.blocks
                                          for line in block.text.splitlines()]


def _a_path_that_exists(token: str) -> bool:
    """A path of the repository (a module may be named without ``.py``), a test named from
    tests/, a path a run makes (listed in :data:`MADE_BY_RUNS`), or one of Beam's own test
    files (``make test-beam-suite`` names them from ``apache_beam/``)."""
    import apache_beam

    path = REPO / token
    return (path.exists() or path.with_suffix(".py").exists() or (REPO / "tests" / token).exists()
            or token.rstrip("/") in MADE_BY_RUNS
            or (Path(apache_beam.__file__).parent / token).exists())


def test_every_path_and_module_the_pages_name_exists(all_pages):
    wrong = []
    for page in all_pages:
        if page.path == "docs/reference.md":
            continue  # generated from the code's own help texts
        for span in _code_spans(page):
            for token in re.findall(r"[\w./-]+", span):
                token = token.rstrip(".,:")
                if (token.split("/")[0] in TREE and "/" in token
                        and not re.search(r"\.\.\.|<|\*", token)):
                    if not _a_path_that_exists(token):
                        wrong.append(f"{page.path}: {token}: no such file or folder")
                elif re.fullmatch(r"(%s)(\.\w+)+" % "|".join(PACKAGES), token):
                    problem = _module_problem(token)
                    if problem:
                        wrong.append(f"{page.path}: {token}: {problem}")
    assert sorted(set(wrong)) == [], "\n".join(sorted(set(wrong)))


def _module_problem(dotted: str) -> Optional[str]:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module_name = ".".join(parts[:cut])
        path = REPO.joinpath(*parts[:cut])
        if path.with_suffix(".py").exists() or (path / "__init__.py").exists():
            if cut == len(parts):
                return None
            module = importlib.import_module(module_name)
            value = module
            for attribute in parts[cut:]:
                if not hasattr(value, attribute):
                    return f"{module_name} has no {'.'.join(parts[cut:])}"
                value = getattr(value, attribute)
            return None
    return "no such module"


def test_every_make_target_the_pages_name_exists(all_pages):
    targets, _, _ = makefile_entries((REPO / "Makefile").read_text())
    known = {name for name, _ in targets}
    wrong = []
    for page in all_pages:
        for span in _code_spans(page):
            for target in re.findall(r"(?:^|[;&|(]\s*|\s)make ([a-z][a-z-]*)", span):
                if target not in known:
                    wrong.append(f"{page.path}: make {target}: no such target")
    assert wrong == [], "\n".join(wrong)


def _beam_option_names() -> Set[str]:
    import argparse

    from apache_beam.options.pipeline_options import PipelineOptions

    import runners.spark.options  # noqa: F401: the SparkRunner's options, with Beam's

    parser = argparse.ArgumentParser(add_help=False, conflict_handler="resolve")
    pending, seen = [PipelineOptions], set()
    while pending:
        for sub in pending.pop().__subclasses__():
            if sub not in seen:
                seen.add(sub)
                pending.append(sub)
                sub._add_argparse_args(parser)
    return {name for action in parser._actions for name in action.option_strings}


def test_every_option_the_pages_name_exists(all_pages):
    """An option a page names is in the reference, or Beam's, or another program's (listed
    above): a renamed option leaves no page behind."""
    known = set(re.findall(r"--[a-z][\w-]*", REFERENCE.read_text()))
    known |= _beam_option_names() | OTHER_PROGRAMS_OPTIONS
    wrong = []
    for page in all_pages:
        if page.path == "docs/reference.md":
            continue
        for span in _code_spans(page):
            for option in re.findall(r"(?<![\w-])--[a-z][\w-]*", span):
                if option not in known:
                    wrong.append(f"{page.path}: {option}")
    assert sorted(set(wrong)) == [], "\n".join(sorted(set(wrong)))


def test_the_pages_refer_to_no_file_outside_the_project(all_pages):
    """A reader has the repository only: no notes of the people who built it."""
    names = set()
    for page in all_pages:
        names |= {(page.path, name) for name in re.findall(r"\b[A-Z][A-Z-]+\.md\b", page.text)}
    missing = sorted(f"{path}: {name}" for path, name in names
                     if not list(REPO.glob(f"**/{name}")))
    assert missing == [], "\n".join(missing)
    # A relative path in the text (a link's or prose's) that climbs out of the repository.
    outside = sorted(f"{page.path}: {climb}" for page in all_pages
                     for climb in re.findall(r"(?:\.\./)+[\w.-]+", page.text)
                     if REPO.resolve() not in ((REPO / page.path).parent / climb).resolve().parents)
    assert outside == [], "\n".join(outside)


# ---- figures name where they come from -------------------------------------------------------

BENCHMARKS = REPO / "docs" / "contributing" / "benchmarks.md"
#: A figure's provenance: the commit that recorded it and that commit's date.
_RECORDED = re.compile(r"\b([0-9a-f]{7,40}),\s+(20\d\d-\d\d-\d\d)\b")
_COMMAND = re.compile(r"`(make (?:bench|run)[^`]*|python -m (?:bench|pictures)[^`]*)`")


def test_every_benchmark_section_names_its_command_commit_and_date():
    """Each section of the benchmarks page (figures a reader may rerun) names the command
    that reproduces them and the commit and date that recorded them; the page names the
    machine."""
    text = BENCHMARKS.read_text()
    assert "**The machine**" in text.split("\n## ")[0], "the page's introduction names the machine"
    wrong = []
    for section in re.split(r"(?m)^(?=#{2,3} )", text)[1:]:
        heading, body = section.splitlines()[0], " ".join(section.splitlines())
        if not _COMMAND.search(body):
            wrong.append(f"{heading}: names no command (make bench..., python -m bench...)")
        if not _RECORDED.search(body):
            wrong.append(f"{heading}: names no commit and date (`recorded at abc1234, YYYY-MM-DD`)")
    assert wrong == [], "\n".join(wrong)


def _git(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *arguments], cwd=REPO, capture_output=True, text=True,
                          timeout=60)


def test_every_commit_a_figure_cites_is_in_the_history_with_its_date(all_pages):
    if not (REPO / ".git").exists():
        pytest.skip("no git history here (a source archive): the commits cannot be looked up")
    if _git("rev-parse", "--is-shallow-repository").stdout.strip() == "true":
        pytest.skip("a shallow clone: older commits are not in it (fetch with --unshallow)")
    wrong = []
    for page in all_pages:
        for commit, date in sorted(set(_RECORDED.findall(" ".join(page.text.splitlines())))):
            shown = _git("show", "-s", "--format=%ad", "--date=short", f"{commit}^{{commit}}")
            if shown.returncode != 0:
                wrong.append(f"{page.path}: {commit}: no such commit")
            elif shown.stdout.strip() != date:
                wrong.append(f"{page.path}: {commit} is of {shown.stdout.strip()}, not {date}")
    assert wrong == [], "\n".join(wrong)


#: The README's quickstarts (issue 49: the front door), by their anchors.
README_SECTIONS = ("quickstart-your-own-pipeline", "install", "batch", "streaming-from-kafka",
                   "a-teststream-test-of-your-pipeline", "on-a-cluster-and-through-spark-submit",
                   "on-spark-connect-and-databricks", "what-runs-where-and-what-is-refused",
                   "the-guide")


def test_the_readme_stays_a_front_door(all_pages):
    """Short enough to read (the guide under docs/ holds the rest), with its quickstarts."""
    readme = next(page for page in all_pages if page.path == "README.md")
    size = len(readme.text.encode())
    assert size < 25_000, f"README.md is {size:,} bytes: move detail into a page of docs/"
    missing = [anchor for anchor in README_SECTIONS if anchor not in readme.anchors]
    assert missing == [], f"README.md lacks the sections {missing}"
