"""The README and the user guide say what runs: every python block runs as a script, as a
reader would paste it, and every relative link points to a file that exists.

RLlib's blocks run in RLlib's own venv, by tests/rllib/test_docs_rllib.py (``make rllib``); those
of the agent frameworks in theirs, by tests/agents/test_docs_agents.py (``make agents``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.docs_blocks import (
    BLOCK_TIMEOUT,
    DOCUMENTS,
    ROOT,
    TAGS,
    Block,
    fenced_blocks,
    python_blocks,
    run_block,
)
from tests.ray_runtime import joining_environment

BLOCKS = python_blocks()


def _marks(block: Block) -> list[pytest.MarkDecorator]:
    """``slow`` as asked; ``ray`` puts the test in the Ray group (tests/conftest.py), and its
    autouse fixture starts the session's runtime, which the block joins."""
    return [getattr(pytest.mark, tag) for tag in sorted(block.tags & {"slow", "ray"})]


@pytest.mark.timeout(BLOCK_TIMEOUT + 30)  # the block's own limit fires first, with its output
@pytest.mark.parametrize(
    "block", [pytest.param(block, id=block.id, marks=_marks(block))
              for block in BLOCKS if not block.tags & {"rllib", "agents"}])
def test_python_block_runs(block: Block, tmp_path: Path) -> None:
    # The block's ray.init(address="auto") joins this session's runtime by its address.
    run_block(block, tmp_path, joining_environment() if "ray" in block.tags else {})


def test_blocks_are_found_and_tagged_correctly() -> None:
    """The collection above is not empty by accident, and a misspelt tag is no silent no-op."""
    assert len(BLOCKS) >= 10
    assert {block.path.name for block in BLOCKS} >= {"README.md", "failures.md", "backends.md"}
    for block in BLOCKS:
        assert block.tags <= TAGS, f"{block.id}: unknown docs-test tags {block.tags - TAGS}"
    if any("rllib" in block.tags for block in BLOCKS):  # run there, in RLlib's venv
        assert (ROOT / "tests" / "rllib" / "test_docs_rllib.py").exists()
    if any("agents" in block.tags for block in BLOCKS):  # run there, in the frameworks' venv
        assert (ROOT / "tests" / "agents" / "test_docs_agents.py").exists()
    for path in DOCUMENTS:
        for line_number, line in enumerate(path.read_text().splitlines(), start=1):
            if "docs-test:" in line:
                following = fenced_blocks(path)
                assert any(block.line == line_number + 1 for block in following), (
                    f"{path.relative_to(ROOT)}:{line_number}: a docs-test comment not directly "
                    "above a code fence")


_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_FENCED = re.compile(r"```.*?```", re.DOTALL)
_CODE = re.compile(r"```.*?```|`[^`\n]*`", re.DOTALL)


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda path: str(path.relative_to(ROOT)))
def test_relative_links_resolve(path: Path) -> None:
    """Links between files (README into the guide, the guide to its pages) work on GitHub and in
    the site; a link inside code is not a link."""
    text = _CODE.sub("", path.read_text())
    targets = [target for target in _LINK.findall(text)
               if not re.match(r"[a-z][a-z0-9+.-]*:", target) and not target.startswith("#")]
    missing = [target for target in targets
               if not (path.parent / target.split("#")[0]).exists()]
    assert not missing, f"{path.relative_to(ROOT)}: links to missing files {missing}"
    for target in targets:
        file, _, anchor = target.partition("#")
        if anchor and file.endswith(".md"):
            assert anchor in _anchors(path.parent / file), f"{path.relative_to(ROOT)}: {target}"


def _anchors(path: Path) -> set[str]:
    """The anchors of a Markdown file's headings, as GitHub and mkdocs both make them."""
    headings = re.findall(r"^#+\s+(.*)$", _FENCED.sub("", path.read_text()), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading.lower()).strip().replace(" ", "-")
            for heading in headings}


#: A file or folder of this repository named in a code span, e.g. `aiovec/_core/_backend.py`.
_REPOSITORY_PATH = re.compile(r"`((?:aiovec|tests|examples|benchmarks|tools|docs)/[\w./-]*)`")
#: Paths the prose names as examples of a file for the reader to write.
_PLACEHOLDERS = {"aiovec/_backends/_yours.py"}  # docs/architecture.md, "Adding a backend"


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda path: str(path.relative_to(ROOT)))
def test_named_repository_paths_exist(path: Path) -> None:
    """The prose names modules, tests and examples by path; a move or rename must update it."""
    named = set(_REPOSITORY_PATH.findall(path.read_text())) - _PLACEHOLDERS
    missing = sorted(name for name in named if not (ROOT / name).exists())
    assert not missing, f"{path.relative_to(ROOT)}: names paths that do not exist {missing}"


#: What a reader cannot open: the project's issue numbers, the slices work was done in, and the
#: notes that closed them ("a slice of an array" is fine).
_PRIVATE_REFERENCE = re.compile(r"\bissues?\s*#?\d|\bslices?\s+\d|closing notes?", re.IGNORECASE)


def _docstrings(path: Path) -> list[tuple[int, str]]:
    """Every module, class and function docstring in ``path``, with its line."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            docstring = ast.get_docstring(node, clean=False)
            if docstring is not None:
                found.append((node.body[0].lineno, docstring))
    return found


def test_users_are_pointed_to_nothing_they_cannot_read() -> None:
    """The README, the docs, the benchmarks' README and the package's docstrings name no
    issue, slice of work or closing note: they say what the thing is instead."""
    texts = [(path, 1, path.read_text())
             for path in (*DOCUMENTS, ROOT / "benchmarks" / "README.md")]
    texts += [(path, line, docstring) for path in sorted((ROOT / "aiovec").rglob("*.py"))
              for line, docstring in _docstrings(path)]
    found = [f"{path.relative_to(ROOT)}:{first + text[:match.start()].count(chr(10))}: "
             f"{match.group()!r}"
             for path, first, text in texts for match in _PRIVATE_REFERENCE.finditer(text)]
    assert not found, found


def test_the_readme_names_every_extra_a_user_installs() -> None:
    """The install section's table of extras is pyproject's, less the contributors' own."""
    # The section's keys, read as text: tomllib is not in Python 3.10, which aiovec supports.
    section = (ROOT / "pyproject.toml").read_text().split("[project.optional-dependencies]")[1]
    declared = set(re.findall(r"^([\w-]+) = \[", section.split("\n[")[0], re.MULTILINE))
    declared -= {"dev", "bench", "test-core"}
    listed = set(re.findall(r"^\| `([\w-]+)` \|", (ROOT / "README.md").read_text(), re.MULTILINE))
    assert listed == declared
