"""The documentation's pages as data: their code blocks (with what each example needs),
headings (as GitHub anchors them), links and images.

The pages are ``README.md``, ``CHANGELOG.md`` and every ``*.md`` under ``docs/``. Every
fenced code block names its language; a block in Python or a shell is an *example*, and the
HTML comment on the line before it says how the tests treat it (GitHub does not show the
comment)::

    <!-- example: fast -->               run by make test (tests/docs/test_doc_examples.py)
    <!-- example: slow -->               run by make test-docs (a Spark cluster, Kafka, ...)
    <!-- example: fast, checkout -->     ... run in the repository's folder, not a new one
    <!-- example: file my_job.py -->     written to the example folder as my_job.py, for a
                                         later example of the page that runs it
    <!-- example: not run: REASON -->    not run by any test, and why

A block in another language (``text``: a screen, an error, a tree) is not an example.

>>> page = Page.parse("guide.md", '''# A guide
... ## Running it
... <!-- example: file job.py -->
... ```python
... print("hello")
... ```
... See [running](#running-it) and ![a figure](figure.png).
... <!-- example: fast -->
... ```sh
... python job.py
... ```
... ''')
>>> [(block.language, block.mode, block.file_name, block.line) for block in page.blocks]
[('python', 'file', 'job.py', 4), ('sh', 'fast', None, 9)]
>>> sorted(page.anchors)
['a-guide', 'running-it']
>>> [(link.target, link.image) for link in page.links]
[('#running-it', False), ('figure.png', True)]
"""

from __future__ import annotations

import bisect
import dataclasses
import re
from pathlib import Path
from typing import List, Optional, Set, Tuple

from project import REPO

#: Languages whose blocks are examples: Python, and a shell.
PYTHON_LANGUAGES = ("python", "py")
SHELL_LANGUAGES = ("sh", "bash", "shell")
#: The modes an example's comment may name.
MODES = ("fast", "slow", "file", "not run")

_FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([^\s`]*)(.*)$")
_EXAMPLE = re.compile(r"^\s*<!--\s*example:\s*(.*?)\s*-->\s*$")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
# [text](target) and ![alt](target), not inside inline code; a target has no spaces.
_LINK = re.compile(r"(!?)\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HTML_TARGET = re.compile(r"<(?:img|a)\s[^>]*?(src|href)=\"([^\"]+)\"", re.IGNORECASE)
_INLINE_CODE = re.compile(r"(`+)(.+?)\1")


@dataclasses.dataclass
class Block:
    """A fenced code block: its language, its text, and what the tests do with it."""

    page: str
    line: int  # of the opening fence, 1-based
    language: str
    text: str
    mode: Optional[str] = None  # fast, slow, file, not run; None: no comment (refused)
    checkout: bool = False
    file_name: Optional[str] = None
    reason: str = ""

    @property
    def is_example(self) -> bool:
        return self.language in PYTHON_LANGUAGES + SHELL_LANGUAGES

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


@dataclasses.dataclass
class Link:
    """A link or an image of a page (outside code)."""

    page: str
    line: int
    target: str
    image: bool


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: its text without markup, lower case, punctuation
    dropped (letters, digits, spaces, ``-`` and ``_`` kept), spaces made hyphens.

    >>> github_anchor("Our SparkRunner, Beam's DirectRunner and `Beam's` Spark runner")
    'our-sparkrunner-beams-directrunner-and-beams-spark-runner'
    >>> github_anchor("What `make run` shows: [a demo](x.md)")
    'what-make-run-shows-a-demo'
    """
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = re.sub(r"<[^>]+>", "", text)  # HTML tags
    text = text.replace("`", "").replace("*", "")
    text = "".join(character for character in text.lower()
                   if character.isalnum() or character in " -_")
    return text.replace(" ", "-")


def _parse_comment(block: Block, comment: str) -> None:
    """Fill ``block``'s mode from the text of its ``<!-- example: ... -->`` comment."""
    if comment.startswith("not run"):
        block.mode = "not run"
        block.reason = comment[len("not run"):].lstrip(":").strip()
        return
    parts = [part.strip() for part in comment.split(",")]
    head = parts[0].split(None, 1)
    block.mode = head[0]
    if block.mode == "file":
        block.file_name = head[1] if len(head) > 1 else None
    block.checkout = "checkout" in parts[1:]
    unknown = [part for part in parts[1:] if part != "checkout"]
    if block.mode not in MODES or unknown:
        block.mode = f"unknown: {comment}"


@dataclasses.dataclass
class Page:
    """A documentation page, parsed."""

    path: str  # relative to the repository
    text: str
    blocks: List[Block]
    anchors: Set[str]
    links: List[Link]

    @classmethod
    def parse(cls, path: str, text: str) -> "Page":
        blocks: List[Block] = []
        anchors: Set[str] = set()
        links: List[Link] = []
        lines = text.splitlines()
        fence: Optional[str] = None
        current: Optional[Block] = None
        body: List[str] = []
        prose: List[Tuple[int, str]] = []  # (line number, line) outside code blocks
        indent = 0
        for number, line in enumerate(lines, start=1):
            if fence is not None:
                if line.strip().startswith(fence) and set(line.strip()) == {fence[0]}:
                    current.text = "\n".join(body) + "\n"
                    blocks.append(current)
                    fence, current = None, None
                else:
                    # A fence indented inside a list item: its lines lose that indent only.
                    body.append(line[min(indent, len(line) - len(line.lstrip(" "))):])
                continue
            opening = _FENCE.match(line)
            if opening:
                indent, fence, language = len(opening.group(1)), opening.group(2), opening.group(3)
                current = Block(path, number, language.lower(), "")
                body = []
                previous = lines[number - 2] if number > 1 else ""
                comment = _EXAMPLE.match(previous)
                if comment:
                    _parse_comment(current, comment.group(1))
                continue
            heading = _HEADING.match(line)
            if heading:
                anchor = github_anchor(heading.group(2))
                unique, count = anchor, 1
                while unique in anchors:  # GitHub numbers repeated headings
                    unique, count = f"{anchor}-{count}", count + 1
                anchors.add(unique)
            for explicit in re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", line):
                anchors.add(explicit)
            prose.append((number, line))
        return cls(path, text, blocks, anchors, _links(path, prose))

    @classmethod
    def read(cls, path: Path) -> "Page":
        return cls.parse(str(path.relative_to(REPO)), path.read_text(encoding="utf-8"))


def _links(path: str, prose: List[Tuple[int, str]]) -> List[Link]:
    """The links and images of a page's prose (a link's text may span lines), without what
    inline code holds."""
    lines = [_INLINE_CODE.sub("", line) for _, line in prose]
    text = "\n".join(lines)
    starts, offset = [], 0
    for line in lines:
        starts.append(offset)
        offset += len(line) + 1
    found = []
    for pattern, target_group, is_image in ((_LINK, 3, lambda m: bool(m.group(1))),
                                            (_HTML_TARGET, 2,
                                             lambda m: m.group(1).lower() == "src")):
        for match in pattern.finditer(text):
            index = max(0, bisect.bisect_right(starts, match.start()) - 1)
            found.append(Link(path, prose[index][0], match.group(target_group), is_image(match)))
    return sorted(found, key=lambda link: link.line)


def page_paths() -> List[Path]:
    """README.md, CHANGELOG.md and every Markdown page under docs/, in a stable order."""
    return [REPO / "README.md", REPO / "CHANGELOG.md"] + sorted((REPO / "docs").rglob("*.md"))


def pages() -> List[Page]:
    return [Page.read(path) for path in page_paths()]


def examples(mode: str) -> List[Block]:
    """Every example of the pages in ``mode`` (fast, slow, file, not run)."""
    return [block for page in pages() for block in page.blocks
            if block.is_example and block.mode == mode]
