"""docs/reference.md is the code's: regenerated, it is the same page; every option, command
and make target in it has a description; every module that runs as a command is in it. A
command that is gone fails the generator itself (it imports every command it documents)."""

from __future__ import annotations

import json
import subprocess

import pytest

from doc_examples import base_environment
from doc_reference import NOT_COMMANDS, REFERENCE, command_modules
from project import PYTHON, REPO

GENERATOR = REPO / "tests" / "docs" / "doc_reference.py"
_REPORT = """
import json, sys
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/tests", sys.argv[1] + "/tests/docs"]
import doc_reference
text, problems, documented = doc_reference.build()
print(json.dumps({"text": text, "problems": problems, "documented": documented}))
"""


@pytest.fixture(scope="module")
def generated() -> dict:
    """The page as the generator makes it now, in a process of its own with none of this
    suite's settings (a default may come from the environment)."""
    completed = subprocess.run([PYTHON, "-c", _REPORT, str(REPO)], cwd=REPO,
                               env=base_environment(), capture_output=True, text=True,
                               timeout=300)
    assert completed.returncode == 0, completed.stderr[-4000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])


def test_the_reference_is_the_codes(generated):
    current = REFERENCE.read_text() if REFERENCE.exists() else ""
    if current != generated["text"]:
        old, new = current.splitlines(), generated["text"].splitlines()
        changed = [f"- {line}" for line in old if line not in new][:10] + [
            f"+ {line}" for line in new if line not in old][:10]
        pytest.fail("docs/reference.md differs from what the code documents; regenerate it "
                    "with `make docs-reference` (python tests/docs/doc_reference.py) and "
                    "commit it. Lines:\n" + "\n".join(changed))


def test_every_option_command_and_target_has_a_description(generated):
    assert generated["problems"] == []


def test_every_module_that_runs_as_a_command_is_in_the_reference(generated):
    documented = set(generated["documented"]) | set(NOT_COMMANDS)
    missing = sorted(set(command_modules()) - documented)
    assert missing == [], ("modules that run as commands but are not in docs/reference.md: "
                           "add them to doc_reference._other_commands (or NOT_COMMANDS, with "
                           f"why): {missing}")


def test_the_generator_says_how_to_regenerate():
    assert "make docs-reference" in REFERENCE.read_text()
    assert "docs-reference:" in (REPO / "Makefile").read_text()
    completed = subprocess.run([PYTHON, str(GENERATOR), "--check"], cwd=REPO,
                               env=base_environment(), capture_output=True, text=True,
                               timeout=300)
    assert "docs/reference.md is current" in completed.stdout, completed.stdout + completed.stderr
