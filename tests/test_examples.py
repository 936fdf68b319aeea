"""The examples run as a user would run them: as scripts, in a fresh interpreter."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_quickstart_runs_and_reports_throughput() -> None:
    completed = subprocess.run(
        [sys.executable, str(EXAMPLES / "quickstart.py"), "--num-envs", "3", "--steps", "200"],
        capture_output=True, text=True, timeout=120, check=True,
    )
    lines = [line for line in completed.stdout.splitlines() if "steps/s" in line]
    assert len(lines) == 6, completed.stdout
    for line in lines:
        rate = float(re.search(r"([\d,]+) steps/s", line).group(1).replace(",", ""))  # type: ignore[union-attr]
        assert rate > 0
