"""The guide's RLlib blocks run here, in RLlib's venv (tests/test_docs.py runs the others)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.docs_blocks import BLOCK_TIMEOUT, Block, python_blocks, run_block
from tests.ray_runtime import joining_environment

RLLIB_BLOCKS = [block for block in python_blocks() if "rllib" in block.tags]


def test_the_guide_has_rllib_blocks() -> None:
    assert RLLIB_BLOCKS, "no block is tagged <!-- docs-test: rllib -->"


@pytest.mark.timeout(BLOCK_TIMEOUT + 30)  # the block's own limit fires first, with its output
@pytest.mark.parametrize("block", RLLIB_BLOCKS, ids=lambda block: block.id)
def test_rllib_block_runs(block: Block, tmp_path: Path, ray_runtime: Any) -> None:
    """The block's RLlib joins this module's Ray runtime by its address (``RAY_ADDRESS``)."""
    run_block(block, tmp_path, joining_environment())
