"""The benchmark scripts ``run.py`` runs after its own table, so that ``make bench`` prints
every target in one run: statistics' cost, coroutine envs against a bare gather, Ray against
the process backend, the multi-agent and SB3 figures, and the agentic runs (with and without
faults).

Each runs as a child process of its own (a fresh interpreter: no state carried between them),
one after another, so none shares the machine with another. Its whole output goes into the
report; its PASS/MISS lines are gathered with ``run.py``'s own.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["COMPANIONS", "Companion", "CompanionRun", "report_lines", "run_companions"]

HERE = Path(__file__).resolve().parent
SCRATCH = HERE.parent / "build" / "bench-companions"
#: What starts a target line in a companion's output (``harness.Check.line``).
TARGET_PREFIXES = ("PASS ", "MISS ", "n/a ")


@dataclass(frozen=True)
class Companion:
    script: str
    title: str
    #: Its arguments in a full run (a quick one passes ``--quick`` instead).
    arguments: tuple[str, ...] = ()
    #: Where it writes its table (``--output``): ``{output}`` stands for the report's
    #: directory, ``{scratch}`` for ``build/bench-companions`` (tables whose file in
    #: ``results/`` holds more than this run measures, or figures of a peer not installed here).
    writes: str | None = None
    timeout: float = 900.0

    def command(self, output: Path, quick: bool) -> list[str]:
        SCRATCH.mkdir(parents=True, exist_ok=True)
        written = (("--output", self.writes.format(output=output, scratch=SCRATCH))
                   if self.writes else ())
        return [sys.executable, str(HERE / self.script),
                *(("--quick",) if quick else self.arguments), *written]


@dataclass(frozen=True)
class CompanionRun:
    companion: Companion
    output: str
    seconds: float
    problem: str | None  # None if it exited 0

    @property
    def target_lines(self) -> list[str]:
        return [line for line in self.output.splitlines() if line.startswith(TARGET_PREFIXES)]


COMPANIONS = (
    Companion("real_envs.py", "Real workloads: Atari Pong, MuJoCo HalfCheetah, CartPole "
              "against the 2-core limit", writes="{output}/real_envs.md", timeout=2400.0),
    Companion("statistics_cost.py", "Statistics: their cost per sub-env step",
              ("--repeats", "5")),
    Companion("async_native.py", "Coroutine envs against a bare gather (section 5)",
              ("--sections", "5", "--repeats", "3"), writes="{scratch}"),
    Companion("ray_overhead.py", "Ray against the process backend, 256 CartPole envs",
              ("--num-envs", "256", "--repeats", "3"), writes="{scratch}/ray_overhead.md"),
    Companion("multiagent.py", "Multi-agent: PettingZoo envs against AgileRL (re-measured)",
              writes="{scratch}/multiagent.md"),
    Companion("sb3.py", "Stable-Baselines3's VecEnv API (re-measured)",
              writes="{output}/sb3.md"),
    Companion("serve_load.py", "aiovec.serve under load: concurrent WebSocket sessions",
              writes="{output}/serve_load.md", timeout=1200.0),
    Companion("agentic.py", "Agentic rollouts: 4,096 chat episodes into a batched policy, "
              "against X*", writes="{output}/agentic.md", timeout=2400.0),
    Companion("agentic_faults.py", "Agentic rollouts through faults: goodput, unaffected "
              "latency, episodes counted once, leases leaked", writes="{output}/agentic_faults.md",
              timeout=3600.0),
)


def run_companions(companions: Sequence[Companion], output: Path,
                   quick: bool = False) -> list[CompanionRun]:
    """Run each companion in turn (printing what it prints) → what each said."""
    runs = []
    for companion in companions:
        command = companion.command(output, quick)
        print(f"\n== {companion.script} {' '.join(command[2:])}", flush=True)
        started = time.perf_counter()
        problem = None
        try:
            finished = subprocess.run(command, cwd=HERE.parent, capture_output=True, text=True,
                                      timeout=companion.timeout, check=False)
            text = finished.stdout
            if finished.returncode:
                problem = (f"exited with status {finished.returncode}: "
                           + " | ".join(finished.stderr.strip().splitlines()[-3:]))
        except subprocess.TimeoutExpired as expired:
            text = expired.stdout.decode() if isinstance(expired.stdout, bytes) else ""
            problem = f"took longer than {companion.timeout:g} s and was stopped"
        print(text, flush=True)
        runs.append(CompanionRun(companion, text, time.perf_counter() - started, problem))
    return runs


def report_lines(runs: Sequence[CompanionRun]) -> list[str]:
    """Each companion's output as a section of the report."""
    lines = []
    for run in runs:
        output = [f"##{line}" if line.startswith("#") else line  # its headings, two levels down
                  for line in run.output.strip().splitlines()]
        lines += [f"## {run.companion.title}", "",
                  f"`benchmarks/{run.companion.script}` ({run.seconds:.0f} s)"
                  + (f"; **{run.problem}**" if run.problem else ""), "", *output, ""]
    return lines
