"""Pieces every benchmark script shares: its arguments, timing loops, medians and spread, a
report's header (machine, versions, revision), target lines, a watchdog for hung contenders,
error cells, and the reading of a report's markdown tables back."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import platform
import random
import re
import resource
import signal
import statistics
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Protocol, TypeVar

import numpy as np

__all__ = ["CellTimeout", "Check", "Plan", "Timed", "Timing", "arguments", "closing_sections",
           "describe", "header", "interleaved", "machine", "median_range", "number",
           "publish", "ratio_cell", "read_tables",
           "revision", "spread", "spread_cell", "stamped", "stamped_async", "time_steps",
           "time_steps_async", "together", "versions", "watchdog"]

T = TypeVar("T")


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
    """How long to warm up and to time a contender (``Plan``, or a script's own)."""

    @property
    def warmup_steps(self) -> int: ...
    @property
    def warmup_seconds(self) -> float: ...
    @property
    def seconds(self) -> float: ...
    @property
    def min_steps(self) -> int: ...


@dataclass(frozen=True)
class Plan:
    """How long each measurement runs (a ``Timed``); each script sets its own figures."""

    seconds: float  # timed stepping per measurement (wall time)
    warmup_steps: int = 30  # warm up with at most this many vector steps...
    warmup_seconds: float = 0.3  # ...or for this long, whichever ends first (at least 2 steps)
    min_steps: int = 3  # timed vector steps, at least
    cell_timeout: float = 90.0  # a measurement taking longer than this is an error


@dataclass(frozen=True)
class Timing:
    """One measurement of one contender."""

    steps_per_second: float  # sub-env steps per wall second
    repeat: int = 0  # which repeat measured it
    latency: float | None = None  # median seconds per vector step
    cpu_percent: float | None = None  # this process's user+sys CPU over wall time, % of a core


def interleaved(items: Iterable[T], repeat: int | str) -> list[T]:
    """``items`` in this repeat's shuffled order (the same for a given ``repeat``): every
    contender once per repeat, so that drift of a shared machine hits all alike."""
    order = list(items)
    random.Random(repeat).shuffle(order)
    return order


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


class _CpuMeter:
    """This process's CPU seconds over the timed window (``stamped``'s ``timing`` hook)."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __call__(self, starting: bool) -> None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        now = usage.ru_utime + usage.ru_stime
        self.seconds = now if starting else now - self.seconds


def _timing(stamps: list[float], num_envs: int, cpu_seconds: float) -> Timing:
    elapsed = stamps[-1] - stamps[0]
    return Timing(steps_per_second=num_envs * (len(stamps) - 1) / elapsed,
                  latency=float(np.median(np.diff(stamps))),
                  cpu_percent=100.0 * cpu_seconds / elapsed)


def time_steps(step: Callable[[Any], object], actions: Sequence[Any], num_envs: int,
               plan: Timed) -> Timing:
    """``stamped``, as a ``Timing``: sub-env steps/s, the median step and the CPU it took."""
    cpu = _CpuMeter()
    return _timing(stamped(step, actions, plan, cpu), num_envs, cpu.seconds)


async def time_steps_async(step: Callable[[Any], Awaitable[object]], actions: Sequence[Any],
                           num_envs: int, plan: Timed) -> Timing:
    """``time_steps`` for ``await step(actions)``."""
    cpu = _CpuMeter()
    return _timing(await stamped_async(step, actions, plan, cpu), num_envs, cpu.seconds)


def together(target: Callable[..., None], arguments: Sequence[tuple[Any, ...]], seconds: float,
             timeout: float) -> float:
    """Spawned processes started together, one per ``arguments``, each running
    ``target(*its arguments, start, results)``: it waits on the ``start`` barrier once warmed
    up, then puts ``(steps, elapsed seconds)`` on ``results``. Their steps per second, summed
    (the reference of independent loops: no IPC between them)."""
    import multiprocessing as mp
    import threading

    context = mp.get_context("spawn")
    start, results = context.Barrier(len(arguments) + 1), context.Queue()
    children = [context.Process(target=target, daemon=True, args=(*own, start, results))
                for own in arguments]
    try:
        for child in children:
            child.start()
        try:
            start.wait(timeout=timeout)
        except threading.BrokenBarrierError:
            raise RuntimeError("a child failed before the start (its traceback is on stderr) "
                               f"or {timeout:g} s passed") from None
        outcomes = [results.get(timeout=seconds + timeout) for _ in children]
    finally:
        for child in children:
            child.join(timeout=10.0)
            if child.is_alive():
                child.terminate()
                child.join()
    return float(sum(steps / elapsed for steps, elapsed in outcomes))


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
    """The commit of the aiovec being measured (the checkout it is imported from; ``-dirty``
    with uncommitted changes), or ``unknown``."""
    import importlib.util

    spec = importlib.util.find_spec("aiovec")
    if spec is None or spec.origin is None:
        return "unknown"
    return subprocess.run(["git", "describe", "--always", "--dirty"],
                          cwd=Path(spec.origin).resolve().parents[1], capture_output=True,
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
    #: How to write the value, the target and each repeat (default: by ``unit``).
    show: Callable[[float], str] | None = None

    def line(self) -> str:
        if self.value is None:
            return f"n/a   {self.label}: no result"
        passed = self.value <= self.target if self.at_most else self.value >= self.target
        sign = "≤" if self.at_most else "≥"
        if self.show is not None:
            shown, target = self.show(self.value), self.show(self.target)
            repeats = [self.show(r) for r in self.per_repeat]
        elif self.unit == "%":
            shown, target = f"{self.value:.0%}", f"{self.target:.0%}"
            repeats = [f"{r:.0%}" for r in self.per_repeat]
        else:
            shown, target = f"{self.value:.2f}{self.unit}", f"{self.target:g}{self.unit}"
            repeats = [f"{r:.2f}" for r in self.per_repeat]
        line = f"{'PASS' if passed else 'MISS'}  {self.label}: {shown} (target {sign} {target})"
        if len(repeats) > 1:
            line += "; per repeat: " + " ".join(repeats)
        return line


def publish(text: str, output: Path, default: Path, partial: bool) -> None:
    """Print a report; write it to ``output``, unless a partial run (smaller, or of a subset)
    would overwrite the full run's report at ``default``."""
    print("\n" + text, flush=True)
    if partial and output == default:
        print(f"not a full run: {default.name} left as it was (--output writes it elsewhere)")
        return
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text)
    print(f"wrote {output}", flush=True)


def closing_sections(checks: Sequence[Check], notes: Sequence[str]) -> list[str]:
    """A report's last sections: its target checks (if any) and its notes."""
    lines: list[str] = []
    if checks:
        lines += ["## Target checks (reported, never asserted)", "", "```",
                  *(check.line() for check in checks), "```", ""]
    return [*lines, "## Notes", "", *(f"- {note}" for note in notes), ""]


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
              quick: str = "", output: Path | None = None) -> argparse.ArgumentParser:
    """A script's parser, its description the first line of ``doc``, with the options every
    script spells the same way, each where given: ``--repeats`` and ``--seconds`` (per
    measurement) with their defaults, ``--quick`` (its smallest settings, which ``quick``
    says) and ``--output`` (where the report goes)."""
    parser = argparse.ArgumentParser(description=(doc or "").strip().splitlines()[0])
    if repeats is not None:
        parser.add_argument("--repeats", type=int, default=repeats,
                            help=f"interleaved repeats (default {repeats})")
    if seconds is not None:
        parser.add_argument("--seconds", type=float, default=seconds,
                            help=f"seconds of stepping per measurement (default {seconds:g})")
    if quick:
        parser.add_argument("--quick", action="store_true", help=f"a smoke run: {quick}")
    if output is not None:
        parser.add_argument("--output", type=Path, default=output,
                            help=f"where the report goes (default {output})")
    return parser


def spread(values: Sequence[float]) -> float | None:
    """(max - min) / median over repeats; ``None`` for fewer than two or a zero median."""
    if len(values) < 2 or not statistics.median(values):
        return None
    return (max(values) - min(values)) / statistics.median(values)


def spread_cell(values: Sequence[float]) -> str:
    """``spread`` for a table: ``12%``, or ``—`` where there is none."""
    value = spread(values)
    return "—" if value is None else f"{100 * value:.0f}%"


def ratio_cell(value: float | None, base: float | None) -> str:
    """``value / base`` for a table (``1.23x``), or ``—`` where either is missing."""
    return "—" if value is None or not base else f"{value / base:.2f}x"


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
            f"- date: {now}; load average (1 min) {os.getloadavg()[0]:.2f} when written",
            f"- method: {method}",
            *(f"- {line}" for line in more), ""]


#: A number as the reports write it ("4,516", "-0.5").
NUMBER = re.compile(r"[-+]?[\d,]*\.?\d+")


def number(cell: str) -> float | None:
    """The first number in a table cell ("4,516", "83%", "1.71x", "**1.2x**"), or ``None``."""
    match = NUMBER.search(cell)
    return float(match.group().replace(",", "")) if match else None


def read_tables(text: str) -> dict[str, list[dict[str, str]]]:
    """A markdown report's tables by the line above each (a heading, or the sentence that
    introduces it, ``#`` stripped): one dict per row, keyed by the column headings. How
    ``compare.py`` and ``headline.py`` read a run's report back."""
    tables: dict[str, list[dict[str, str]]] = {}
    section, columns = "", list[str]()
    for line in text.splitlines():
        if not line.startswith("|"):
            columns = []
            if line.strip():
                section = line.lstrip("# ").strip()
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not columns:
            columns = cells
        elif not set("".join(cells)) <= set("-: "):
            tables.setdefault(section, []).append(dict(zip(columns, cells)))
    return tables
