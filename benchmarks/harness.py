"""Pieces every benchmark script shares: its arguments, timing loops, medians and spread, a
report's header (machine, versions, revision), target lines, a watchdog for hung contenders,
error cells, and the reading of a report's markdown tables back."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import platform
import re
import signal
import statistics
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

__all__ = ["CellTimeout", "Check", "Timed", "arguments", "describe", "header", "machine",
           "median_range", "number", "read_tables", "revision", "spread", "stamped",
           "stamped_async", "versions", "watchdog"]


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


def arguments(doc: str | None, *, repeats: int | None = None, seconds: float | None = None,
              quick: bool = False, output: Path | None = None) -> argparse.ArgumentParser:
    """A script's parser, its description the first line of ``doc``, with the options every
    script spells the same way: ``--repeats`` and ``--seconds`` (per measurement), ``--quick``
    (its smallest settings) and ``--output`` (where the report goes), each where given."""
    parser = argparse.ArgumentParser(description=(doc or "").strip().splitlines()[0])
    if repeats is not None:
        parser.add_argument("--repeats", type=int, default=repeats,
                            help=f"interleaved repeats (default {repeats})")
    if seconds is not None:
        parser.add_argument("--seconds", type=float, default=seconds,
                            help=f"seconds of stepping per measurement (default {seconds:g})")
    if quick:
        parser.add_argument("--quick", action="store_true",
                            help="a smoke run: the smallest settings")
    if output is not None:
        parser.add_argument("--output", type=Path, default=output,
                            help=f"where the report goes (default {output})")
    return parser


def spread(values: Sequence[float]) -> float | None:
    """(max - min) / median over repeats; ``None`` for fewer than two or a zero median."""
    if len(values) < 2 or not statistics.median(values):
        return None
    return (max(values) - min(values)) / statistics.median(values)


def median_range(values: Sequence[float], scale: float = 1.0, digits: int = 1) -> str:
    """``median (min-max)`` of ``values`` times ``scale``: a cell for repeats of one figure."""
    low, middle, high = (scale * v for v in (min(values), statistics.median(values),
                                             max(values)))
    return f"{middle:.{digits}f} ({low:.{digits}f}-{high:.{digits}f})"


def versions(*packages: str) -> str:
    """Python's version and each installed package's (a missing one is left out)."""
    from importlib import metadata

    found = [f"Python {platform.python_version()}"]
    for package in ("numpy", "gymnasium", *packages):
        with contextlib.suppress(metadata.PackageNotFoundError):
            found.append(f"{package} {metadata.version(package)}")
    return ", ".join(found)


def header(title: str, method: str, *, packages: Sequence[str] = (),
           more: Sequence[str] = ()) -> list[str]:
    """A report's first lines: its title, then the machine, the versions with aiovec's revision,
    the date and load, how it was measured and any ``more`` lines."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return [f"# {title}", "",
            f"- machine: {machine()}",
            f"- versions: {versions(*packages)}; aiovec {revision()}",
            f"- date: {now}; load average (1 min) {os.getloadavg()[0]:.2f} at the start",
            f"- method: {method}",
            *(f"- {line}" for line in more), ""]


_NUMBER = re.compile(r"[-+]?[\d,]*\.?\d+")


def number(cell: str) -> float | None:
    """The first number in a table cell ("4,516", "83%", "1.71x", "**1.2x**"), or ``None``."""
    match = _NUMBER.search(cell)
    return float(match.group().replace(",", "")) if match else None


def read_tables(text: str) -> dict[str, list[dict[str, str]]]:
    """A markdown report's tables by the ``#`` heading above them: one dict per row, keyed by
    the column headings (how scripts read their own or another run's report back)."""
    tables: dict[str, list[dict[str, str]]] = {}
    section, columns = "", list[str]()
    for line in text.splitlines():
        if line.startswith("#"):
            section, columns = line.lstrip("#").strip(), []
        elif not line.startswith("|"):
            columns = []
        else:
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if not columns:
                columns = cells
            elif not set("".join(cells)) <= set("-: "):
                tables.setdefault(section, []).append(dict(zip(columns, cells)))
    return tables
