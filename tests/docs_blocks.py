"""The python code blocks of README.md and docs/, and how to run one as a user would.

A block may carry an HTML comment on the line above its fence, ``<!-- docs-test: TAG ... -->``,
saying what it needs: ``slow`` (a long run), ``ray`` (joins the test session's Ray runtime),
``rllib`` (runs in RLlib's own venv, by tests/rllib), ``agents`` (needs OpenEnv and
SkyRL-gym: runs in their venv, by tests/agents).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The documents whose code blocks must run: the README and every page of the docs site.
DOCUMENTS = (ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")))
#: What a ``docs-test`` comment may ask for.
TAGS = frozenset({"slow", "ray", "rllib", "agents"})
#: A block's time budget: a fresh interpreter, its workers and a short run, on a loaded machine.
BLOCK_TIMEOUT = 180

_FENCE = re.compile(r"^(\s*)```\s*([\w+-]*)")
_TAG_COMMENT = re.compile(r"^\s*<!--\s*docs-test:([^>]*)-->\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced code block: where it is, its language, its code and its docs-test tags."""

    path: Path
    line: int  # of the opening fence, 1-based
    language: str
    code: str
    tags: frozenset[str]

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def fenced_blocks(path: Path) -> list[Block]:
    """Every fenced block of a Markdown file (indented ones, as in lists, dedented)."""
    lines = path.read_text().splitlines()
    blocks = []
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        start = index
        index += 1
        while index < len(lines) and not lines[index].strip().startswith("```"):
            index += 1
        if index == len(lines):
            raise ValueError(f"{path}:{start + 1}: a code block that never closes")
        previous = lines[start - 1] if start > 0 else ""
        tagged = _TAG_COMMENT.match(previous)
        tags = frozenset(tagged.group(1).split()) if tagged else frozenset()
        code = textwrap.dedent("\n".join(lines[start + 1:index])) + "\n"
        blocks.append(Block(path, start + 1, opening.group(2).lower(), code, tags))
        index += 1
    return blocks


def python_blocks() -> list[Block]:
    """The ```python blocks of every document."""
    return [block for path in DOCUMENTS for block in fenced_blocks(path)
            if block.language == "python"]


def run_block(block: Block, directory: Path,
              environment: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run a block as a script of its own, in a fresh interpreter, from ``directory``.

    aiovec is imported from this tree (``PYTHONPATH``), in the script and in its workers.
    """
    script = directory / "doc_block.py"
    script.write_text(block.code)
    finished = subprocess.run(
        [sys.executable, script.name], cwd=directory, capture_output=True, text=True,
        timeout=BLOCK_TIMEOUT, check=False,
        # SB3's logger (a block that calls .learn()) writes under SB3_LOGDIR, else a new
        # folder under /tmp that nobody removes.
        env={**os.environ, "PYTHONPATH": str(ROOT), "SB3_LOGDIR": str(directory / "sb3"),
             **(environment or {})})
    assert finished.returncode == 0, (
        f"{block.id} exited {finished.returncode}\n{finished.stdout}\n{finished.stderr}")
    assert "Traceback" not in finished.stderr, f"{block.id}\n{finished.stderr}"
    return finished
