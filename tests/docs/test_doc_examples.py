"""Every example of the pages runs, page by page, in order, as a reader runs it
(:mod:`doc_examples`): the *fast* ones in ``make test``, on the test run's shared Spark
session where they are Python; the *slow* ones (``make run``, a Spark cluster, a Spark
Connect server, Kafka) with the fast ones of their page, in ``make test-docs``
(``tests/suite_scope.py`` leaves them out of the core suite)."""

from __future__ import annotations

from typing import List

import pytest

from doc_examples import run_page
from doc_pages import PYTHON_LANGUAGES, Page, pages


def _pages_with(mode: str) -> List[Page]:
    return [page for page in pages()
            if any(block.is_example and block.mode == mode for block in page.blocks)]


def _needs_spark_here(page: Page) -> bool:
    return any(block.mode == "fast" and block.language in PYTHON_LANGUAGES
               for block in page.blocks)


@pytest.mark.parametrize("page", _pages_with("fast"), ids=lambda page: page.path)
def test_the_fast_examples_of_a_page_run(page, tmp_path, request):
    if _needs_spark_here(page):
        request.getfixturevalue("spark_session")
    run_page(page, tmp_path, ["fast"])


# A page of slow examples starts several services and jobs one after the other (each example
# has its own limit, doc_examples.TIMEOUTS): the page's limit is their sum, not pytest's 600 s.
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("page", _pages_with("slow"), ids=lambda page: page.path)
def test_every_example_of_a_page_runs(page, tmp_path, request):
    if _needs_spark_here(page):
        request.getfixturevalue("spark_session")
    run_page(page, tmp_path, ["fast", "slow"])
