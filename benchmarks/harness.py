"""Pieces every benchmark script shares: timing loops, a watchdog for hung contenders,
error cells."""

from __future__ import annotations

import contextlib
import os
import platform
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

__all__ = ["CellTimeout", "Check", "Timed", "describe", "stamped", "stamped_async", "watchdog"]


class CellTimeout(Exception):
    """A contender gave no result in time."""


@contextlib.contextmanager
def watchdog(seconds: float) -> Iterator[None]:
    """Best effort against a hung sync contender: raise ``CellTimeout`` after ``seconds``."""

    def fire(signum: int, frame: FrameType | None) -> None:
        raise CellTimeout(f"no result after {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def describe(error: BaseException) -> str:
    """One line for a table cell: the type and the first line of the message."""
    lines = str(error).strip().splitlines()
    text = f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
    return text[:160].replace("|", "\\|")


class Timed(Protocol):
    """How long to warm up and to time a contender (each script's ``Plan``)."""

    warmup_steps: int
    warmup_seconds: float
    seconds: float
    min_steps: int


def stamped(step: Callable[[Any], object], actions: Sequence[Any], plan: Timed,
            timing: Callable[[bool], None] | None = None) -> list[float]:
    """Warm up, then call ``step`` for ``plan.seconds``: the wall time after every vector
    step, the first one being the start. ``timing(True)``/``timing(False)`` bracket the
    timed window."""
    count = len(actions)
    warmup_deadline = time.perf_counter() + plan.warmup_seconds
    for index in range(plan.warmup_steps):
        step(actions[index % count])
        if index >= 1 and time.perf_counter() >= warmup_deadline:
            break
    if timing:
        timing(True)
    stamps = [time.perf_counter()]
    deadline = stamps[0] + plan.seconds
    while stamps[-1] < deadline or len(stamps) <= plan.min_steps:
        step(actions[len(stamps) % count])
        stamps.append(time.perf_counter())
    if timing:
        timing(False)
    return stamps


async def stamped_async(step: Callable[[Any], Awaitable[object]], actions: Sequence[Any],
                        plan: Timed, timing: Callable[[bool], None] | None = None,
                        ) -> list[float]:
    """``stamped`` for ``await step(actions)``."""
    count = len(actions)
    warmup_deadline = time.perf_counter() + plan.warmup_seconds
    for index in range(plan.warmup_steps):
        await step(actions[index % count])
        if index >= 1 and time.perf_counter() >= warmup_deadline:
            break
    if timing:
        timing(True)
    stamps = [time.perf_counter()]
    deadline = stamps[0] + plan.seconds
    while stamps[-1] < deadline or len(stamps) <= plan.min_steps:
        await step(actions[len(stamps) % count])
        stamps.append(time.perf_counter())
    if timing:
        timing(False)
    return stamps


def machine() -> str:
    """The CPU model and core count, for a results table's header."""
    try:
        model = next(line.split(":", 1)[1].strip()
                     for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name"))
    except (OSError, StopIteration):
        model = platform.processor() or "unknown CPU"
    return f"{model}, {os.cpu_count()} cores"


def revision() -> str:
    """The checked-out aiovec commit, short."""
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, check=False).stdout.strip() or "unknown"


@dataclass(frozen=True)
class Check:
    """One target: a measured value against what the issue asks, as a PASS/MISS line."""

    label: str
    value: float | None
    target: float
    unit: str = "x"
    at_most: bool = False
    per_repeat: Sequence[float] = ()  # the same ratio within each repeat, to judge the noise

    def line(self) -> str:
        if self.value is None:
            return f"n/a   {self.label}: no result"
        passed = self.value <= self.target if self.at_most else self.value >= self.target
        sign = "≤" if self.at_most else "≥"
        shown = f"{self.value:.0%}" if self.unit == "%" else f"{self.value:.2f}{self.unit}"
        target = f"{self.target:.0%}" if self.unit == "%" else f"{self.target:g}{self.unit}"
        line = f"{'PASS' if passed else 'MISS'}  {self.label}: {shown} (target {sign} {target})"
        if len(self.per_repeat) > 1:
            line += "; per repeat: " + " ".join(
                f"{r:.0%}" if self.unit == "%" else f"{r:.2f}" for r in self.per_repeat)
        return line


def start_server(script: str | Path) -> tuple[subprocess.Popen[str], str]:
    """Run ``script --serve`` (a benchmark's own server: ``aiovec.serve.run(...,
    announce=True)``) → the process and its URL, once it says ``serving on URL``."""
    import sys

    process = subprocess.Popen([sys.executable, str(script), "--serve"],
                               stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("serving on "):
        process.kill()
        raise SystemExit(f"the server did not start: {line!r}")
    return process, line.split()[-1]
