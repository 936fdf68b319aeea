"""The examples run as a user would run them: as scripts, in a fresh interpreter."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

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


def run_example(*args: str) -> str:
    completed = subprocess.run([sys.executable, *args], capture_output=True, text=True,
                               timeout=120, check=True)
    assert "Traceback" not in completed.stderr, completed.stderr
    return completed.stdout


def test_first_ready_example_reports_both_rates() -> None:
    out = run_example(str(EXAMPLES / "first_ready.py"), "--num-envs", "8", "--batch-size", "4",
                      "--seconds", "0.5")
    rates = [float(match.replace(",", "")) for match in re.findall(r"([\d,]+) steps/s", out)]
    assert len(rates) == 2 and all(rate > 0 for rate in rates), out
    assert "backend='async'" in out


@pytest.mark.parametrize("loop", ["asyncio", "trio"])
def test_tcp_example_honours_max_concurrency(loop: str) -> None:
    out = run_example(str(EXAMPLES / "async_env_tcp.py"), "--num-envs", "12", "--steps", "30",
                      "--max-concurrency", "4", "--loop", loop)
    served = re.search(r"server: (\d+) requests, at most (\d+) at once", out)
    assert served is not None, out
    requests, peak = int(served.group(1)), int(served.group(2))
    assert requests == 12 * (30 + 1)  # one reset and 30 steps each, nothing lost or repeated
    assert 1 <= peak <= 4, out
