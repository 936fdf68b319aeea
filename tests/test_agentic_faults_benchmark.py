"""``benchmarks/agentic_faults.py`` measures what it says: its faults are the same for every
contender and each episode's truth (lost or not) is what happens when it runs; a smoke run
reports every contender, the targets, and aiovec leaking no lease after a SIGINT or any of
its SIGKILL trials. No figure is asserted."""

from __future__ import annotations

import asyncio
import importlib
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
MODULES = ("agentic_faults", "agentic_faults_contenders", "agentic_faults_workload",
           "agentic_workload", "agentic_contenders", "harness")


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, ModuleType]]:
    """The benchmark's modules, imported as its scripts import each other (by plain name)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    yield {name: importlib.import_module(name) for name in MODULES}
    for name in (*MODULES, "async_native_core", "bench_envs"):
        sys.modules.pop(name, None)


def test_an_episode_is_lost_exactly_when_its_truth_says(bench: dict[str, ModuleType]) -> None:
    """Played with the faults' deadline and retry, an episode fails (``ToolFailed``) exactly
    when ``episode_truth`` says it is lost; faults are a function of the episode alone."""
    workload_module, faults_module = bench["agentic_workload"], bench["agentic_faults_workload"]
    workload = workload_module.Workload(num_groups=2, tool_median=0.0005)
    faults = faults_module.Faults(hang=0.15, error=0.15, tool_deadline=0.05)
    action = workload_module.ACTIONS[0]

    async def play(slot: int, k: int) -> bool:
        tracked = faults_module.TrackedEpisode(workload, slot, k)
        done = False
        try:
            while not done:
                _, done = await faults_module.call_tool(tracked, action, faults)
        except faults_module.ToolFailed:
            return True
        return False

    outcomes = {(slot, k): asyncio.run(play(slot, k)) for slot in range(16) for k in range(2)}
    truth = {key: faults_module.episode_truth(workload, faults, *key)[0] for key in outcomes}
    assert outcomes == truth
    assert 0 < sum(outcomes.values()) < len(outcomes)  # both kinds were played
    assert faults_module.tool_fault(faults, 3, 1, 2, 0) == faults_module.tool_fault(
        faults, 3, 1, 2, 0)
    assert 0.9 < faults_module.p_ok(workload, faults_module.Faults()) < 1.0


@pytest.mark.slow
@pytest.mark.timeout(460)  # past the run's own bound (400 s; it takes ~60 s alone)
def test_a_smoke_run_reports_every_contender_and_aiovec_leaks_nothing(
        bench: dict[str, ModuleType], tmp_path: Path) -> None:
    report = tmp_path / "agentic_faults.md"
    # The other contenders' SIGKILL trials are the full run's (each waits out its leases).
    subprocess.run([sys.executable, str(BENCHMARKS / "agentic_faults.py"), "--quick",
                    "--deadline", "1", "--kill-trials", "3", "--kill-trials-others", "0",
                    "--output", str(report)],
                   capture_output=True, text=True, timeout=400, check=True)
    text = report.read_text()
    rows = next(table for title, table in bench["harness"].read_tables(text).items()
                if title.startswith("Measured"))
    assert [row["contender"] for row in rows] == list(bench["agentic_faults"].CONTENDERS)
    for row in rows:
        goodput = float(row["goodput"].replace(",", ""))  # not an error row
        # No ratio only where a loaded machine ended no episode in the window.
        assert row["p99 ratio"].endswith("x") or (goodput == 0 and row["p99 ratio"] == "—")
    aiovec = rows[-1]
    assert aiovec["misreported"] == aiovec["not counted once"] == "0"
    assert aiovec["orphaned leases"] == "0"
    assert aiovec["leaked after SIGINT"] == aiovec["leaked after SIGINT, fault-free"] == (
        "0 over 1 runs")
    assert aiovec["leaked after SIGKILL"] == "0 over 3 trials"
    # --deadline: each attempt's deadline, the healthy calls capped below it.
    assert "(1 s deadline, 1 retry)" in text and "tool calls capped at 0.5 s" in text
    checks = re.findall(r"^(PASS|MISS|n/a) +faults: ", text, re.M)
    assert len(checks) == 5 and "n/a" not in checks


def test_a_deadline_near_the_tools_cap_caps_the_healthy_calls_below_it(
        bench: dict[str, ModuleType]) -> None:
    """A 1 s deadline would race the workload's 1 s calls (20 medians of 50 ms): only faults
    may miss a deadline, so the calls are capped at half of it; 10 s leaves them alone."""
    workload_module, faults_module = bench["agentic_workload"], bench["agentic_faults_workload"]
    workload = workload_module.Workload(num_groups=4)
    assert workload_module.tool_cap(workload) == 1.0
    ten = faults_module.Faults()
    assert faults_module.under_deadline(workload, ten) is workload
    one = faults_module.Faults(tool_deadline=1.0)
    capped = faults_module.under_deadline(workload, one)
    assert capped.tool_cap == 0.5
    waits = workload_module.task_pool(capped).waits
    assert waits.max() == 0.5 and (waits < workload_module.task_pool(workload).waits).any()
