"""The guide's blocks that need OpenEnv or SkyRL-gym run here, in their venv (tests/test_docs.py
runs the others); and the examples that need them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs_blocks import BLOCK_TIMEOUT, ROOT, Block, python_blocks, run_block

AGENT_BLOCKS = [block for block in python_blocks() if "agents" in block.tags]
EXAMPLES = ["openenv_tasks.py", "skyrl_gsm8k.py"]


def test_the_guide_has_blocks_for_the_agent_frameworks() -> None:
    assert AGENT_BLOCKS, "no block is tagged <!-- docs-test: agents -->"


@pytest.mark.timeout(BLOCK_TIMEOUT + 30)  # the block's own limit fires first, with its output
@pytest.mark.parametrize("block", AGENT_BLOCKS, ids=lambda block: block.id)
def test_agent_framework_block_runs(block: Block, tmp_path: Path) -> None:
    run_block(block, tmp_path)


@pytest.mark.timeout(BLOCK_TIMEOUT + 30)
@pytest.mark.parametrize("example", EXAMPLES)
def test_agent_framework_example_runs(example: str) -> None:
    finished = subprocess.run([sys.executable, str(ROOT / "examples" / example)],
                              capture_output=True, text=True, timeout=BLOCK_TIMEOUT,
                              check=False, cwd=ROOT)
    assert finished.returncode == 0, f"{finished.stdout}\n{finished.stderr}"
    assert "Traceback" not in finished.stderr, finished.stderr
    assert "every episode counted" in finished.stdout, finished.stdout
