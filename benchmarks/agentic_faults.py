"""Agentic rollouts through faults: the workload of ``agentic.py`` with a sandbox per episode,
a judge at its end, tool calls that hang or raise, sandbox creations that fail after the
sandbox exists, a SIGINT mid-run and owners SIGKILLed mid-run; every contender against the
physical limit and against itself without faults.

The workload (``agentic_faults_workload.py``): ``agentic.py``'s episodes (N = 2,048 in 256
groups of 8, 1-16 turns, lognormal tools with median 50 ms, a policy serving up to B = 128 in
10 ms + 0.1 ms each), and per episode a sandbox lease (a file in a ledger directory: create 20
ms, at most 1,000 created a second; delete 5 ms) and a judge call at the end (20 ms, 32 at
once). Faults: 1 % of tool-call attempts hang and 1 % raise; each attempt has a 10 s deadline
and a failed call is retried once, after which the episode is lost; 0.1 % of creations raise
after the sandbox exists (retried once). Faults are drawn from a hash of (slot, episode,
turn, attempt): every contender meets the same ones, and each episode's truth (lost or not,
touched by a fault or not) is known.

Contenders (``agentic_faults_contenders.py``): the patterns of ``agentic.py``, with what each
framework does with a failed episode, and aiovec (async backend, a restart policy with a
failure budget, ``aiovec.limit`` for creations and the judge, the lease's delete registered
as a cleanup).

Method: each run is a process of its own (uvloop): it starts, warms up (timed from its start,
for every contender alike), is timed for a window, reports, and is then sent SIGINT mid-run;
the leases left in its ledger once it has exited (and 5 s more for a cleanup keeper) leaked.
Per repeat, each contender runs with faults (each repeat with a fault seed of its own) and
without (the fault-free run: same leases and judge, no faults). In the window: goodput
(episodes not lost and reported as not lost, per second), the latency of episodes no fault
touched (p50, p99), episodes lost and reported lost, misreported (an infrastructure failure
reported as the env's outcome, or the reverse), not counted once (reported twice, or, where a
slot plays its episodes one after another, skipped unreported), leases alive at the window's
end that their owner does not know of (orphans), and the process's CPU time per wall second
(orchestrator CPU: the simulated tools, policy and judge included). Then kill trials: a small
run (N = 256) SIGKILLed at a random moment of the 3 s after its first leases exist; leases
left 5 s after its death leaked.

Targets (aiovec, 2 cores): goodput ≥ 95 % of X* · P(ok) (P(ok): the chance an episode is not
lost, from the fault rates and the tasks' turns), and ≥ 0.95x the hand-written loop's (a task
per slot, each attempt under ``asyncio.wait_for``); p99 of unaffected episodes ≤ 1.10x the
fault-free run's; every episode counted once and none misreported; 0 leaked leases (orphans
at the window's end, after the SIGINT, after every kill trial).

Run it (a full run takes about 30 minutes, 8 of them aiovec's 200 kill trials; ``--quick``,
a smoke run with 1.5 s deadlines, about a minute and a half; ``--deadline 1``, the same
faults with 1 s deadlines: a hung call costs its slot a tenth as long, so the engine's own
cost per turn weighs more; healthy tool calls are then capped at 0.5 s, below the deadline,
``agentic_faults_workload.under_deadline``)::

    .venv/bin/python benchmarks/agentic_faults.py [--quick] [--deadline S] [--repeats N]
        [--seconds S] [--kill-trials K] [--contenders NAME,...] [--scale F]

Output: markdown tables printed and, after a full run, written to
``benchmarks/results/agentic_faults.md`` (``agentic_faults_deadline_1s.md`` with
``--deadline 1``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import queue
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from agentic_faults_contenders import CONTENDERS, FaultSample, run_child, spec_for
from agentic_faults_workload import (
    NO_FAULTS,
    Faults,
    fault_limits,
    p_ok,
    scaled,
    under_deadline,
)
from agentic_workload import Workload
from async_native_core import HAVE_UVLOOP
from harness import (
    Check,
    arguments,
    closing_sections,
    describe,
    header,
    interleaved,
    publish,
    spread_cell,
)

RESULTS = Path(__file__).resolve().parent / "results" / "agentic_faults.md"
AIOVEC = "aiovec async"
HAND_WRITTEN = "hand-written loop"
WORKLOAD = Workload(num_groups=256, policy_batch=128)
KILL_WORKLOAD = Workload(num_groups=32, policy_batch=32)
QUICK_WORKLOAD = Workload(num_groups=16, policy_batch=16)
FAULTS = Faults()
QUICK_FAULTS = dataclasses.replace(FAULTS, tool_deadline=1.5)  # past the tools' cap (1 s)
#: Where the ledgers go: a tmpfs where there is one (creating a file in a directory of
#: thousands on this machine's disk costs ~0.5 ms of the event loop's time, ~10 us there).
LEDGERS = "/dev/shm" if os.path.isdir("/dev/shm") else None
#: Seconds the ledger is watched after the owner's exit (a cleanup keeper's work).
GRACE = 5.0
#: A kill trial's SIGKILL lands at a random moment of this many seconds after its first leases
#: exist (its episodes take about a second: several have ended by then).
KILL_WITHIN = 3.0
KINDS = ("faults", "fault-free")


@dataclass(frozen=True)
class Cell:
    sample: FaultSample
    leaked: int  # leases left after the SIGINT
    exit_note: str  # "" when the process exited on its own after the SIGINT


@dataclass
class Results:
    cells: dict[tuple[str, str], list[Cell]] = dataclasses.field(default_factory=dict)
    errors: dict[tuple[str, str], str] = dataclasses.field(default_factory=dict)
    kills: dict[str, list[int]] = dataclasses.field(default_factory=dict)  # leaked per trial

    def values(self, key: tuple[str, str], figure: Callable[[Cell], float]) -> list[float]:
        return [figure(cell) for cell in self.cells.get(key, [])]

    def median(self, key: tuple[str, str], figure: Callable[[Cell], float]) -> float | None:
        values = self.values(key, figure)
        return statistics.median(values) if values else None


# ------------------------------------------------------------------------------ processes


def _lines(process: subprocess.Popen[str]) -> queue.Queue[str | None]:
    """The child's output lines as they come (``None`` at its end)."""
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    return lines


def _until(lines: queue.Queue[str | None], prefix: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while True:
        try:
            line = lines.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            raise TimeoutError(f"no {prefix} line within {timeout:g} s") from None
        if line is None:
            raise RuntimeError(f"the run ended before its {prefix} line")
        if line.startswith(prefix):
            return line[len(prefix):].strip()


def _start(spec: dict[str, object]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, __file__, "--child", json.dumps(spec)],
                            stdout=subprocess.PIPE, text=True,
                            cwd=Path(__file__).resolve().parent.parent)


def _leaked(ledger: Path) -> int:
    """Leases left in ``ledger``, watched up to ``GRACE`` seconds for a keeper to finish."""
    deadline = time.monotonic() + GRACE
    while True:
        left = len(os.listdir(ledger))
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def _stop(process: subprocess.Popen[str], sig: signal.Signals) -> str:
    """Send ``sig``; wait for the exit → "" or what went wrong."""
    process.send_signal(sig)
    try:
        process.wait(120.0)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return "did not exit within 120 s of the SIGINT (killed)"
    return ""


def run_cell(contender: str, workload: Workload, faults: Faults, seconds: float,
             warmup: float, loop: str, owner: str) -> Cell:
    """One contender's run: window, SIGINT, then its ledger counted."""
    ledger = Path(tempfile.mkdtemp(prefix="aiovec-leases-", dir=LEDGERS))
    try:
        process = _start(spec_for(contender, workload, faults, ledger, owner, seconds, warmup,
                                  loop))
        try:
            lines = _lines(process)
            result = _until(lines, "RESULT", warmup + seconds + 600.0)
        except BaseException:
            process.kill()
            process.wait()
            raise
        note = _stop(process, signal.SIGINT)
        return Cell(FaultSample(**json.loads(result)), _leaked(ledger), note)
    finally:
        shutil.rmtree(ledger, ignore_errors=True)


def kill_trial(contender: str, faults: Faults, loop: str, rng: random.Random) -> int:
    """A small run SIGKILLed at a random moment of its first ``KILL_WITHIN`` seconds after its
    first leases exist (episodes ending, restarts, leases made and deleted) → leases leaked."""
    ledger = Path(tempfile.mkdtemp(prefix="aiovec-leases-", dir=LEDGERS))
    try:
        process = _start(spec_for(contender, under_deadline(KILL_WORKLOAD, faults), faults,
                                  ledger, "kill", 3600.0,
                                  0.0, loop))
        try:
            _until(_lines(process), "READY", 120.0)
            time.sleep(rng.uniform(0.0, KILL_WITHIN))
        finally:
            process.kill()
            process.wait()
        return _leaked(ledger)
    finally:
        shutil.rmtree(ledger, ignore_errors=True)


# -------------------------------------------------------------------------------- running


def run_all(args: argparse.Namespace, names: Sequence[str], workload: Workload,
            faults: Faults, results: Results) -> None:
    clean = dataclasses.replace(NO_FAULTS, tool_deadline=faults.tool_deadline)
    for repeat in range(args.repeats):
        # Each repeat meets faults of its own (another seed: other episodes fail).
        plans = {"faults": (dataclasses.replace(faults, seed=faults.seed + repeat), args.seconds,
                            args.warmup),
                 "fault-free": (clean, args.clean_seconds, args.clean_warmup)}
        print(f"\n== repeat {repeat + 1}/{args.repeats}", flush=True)
        for kind, name in interleaved([(k, n) for k in KINDS for n in names], str(repeat)):
            key = (kind, name)
            if key in results.errors:
                continue
            chosen, seconds, warmup = plans[kind]
            print(f"  {kind:<10} {name:<32}", end="", flush=True)
            started = time.perf_counter()
            try:
                cell = run_cell(name, workload, chosen, seconds, warmup, args.loop,
                                f"{kind[0]}{repeat}")
            except Exception as error:  # an error row; the run goes on
                results.errors[key] = describe(error)
                print(f"ERROR {results.errors[key]}", flush=True)
                continue
            results.cells.setdefault(key, []).append(cell)
            sample = cell.sample
            print(f"{sample.goodput:8,.1f} good/s  p99 {sample.p99:5.2f} s  lost "
                  f"{sample.lost}  misreported {sample.misreported}  not once "
                  f"{sample.not_once}  orphans {sample.orphans}  leaked {cell.leaked}  "
                  f"({time.perf_counter() - started:.0f} s) {cell.exit_note}", flush=True)
    rng = random.Random(0)
    for name in names:
        trials = args.kill_trials if name == AIOVEC else min(args.kill_trials,
                                                               args.kill_trials_others)
        if not trials:
            continue
        print(f"  kill trials {name:<32}", end="", flush=True)
        leaked = results.kills.setdefault(name, [])
        for trial in range(trials):
            try:
                leaked.append(kill_trial(name, dataclasses.replace(faults, seed=1000 + trial),
                                         args.loop, rng))
            except Exception as error:
                results.errors[("kill", name)] = describe(error)
                break
        print(f"{len(leaked)} trials, {sum(leaked)} leases leaked "
              f"({sum(1 for n in leaked if n)} trials leaking)", flush=True)


# --------------------------------------------------------------------------------- report


def _cell(value: float | None, text: str) -> str:
    return "—" if value is None else text.format(value)


def _leaks(cells: Sequence[Cell]) -> str:
    """Leases left after the SIGINT, summed over ``cells``, with any exit that went wrong."""
    notes = [cell.exit_note for cell in cells if cell.exit_note]
    return (f"{sum(cell.leaked for cell in cells)} over {len(cells)} runs"
            + (f" ({'; '.join(notes)})" if notes else ""))


def table(names: Sequence[str], goal: float, results: Results) -> list[str]:
    lines = ["| contender | goodput | % of X*·P(ok) | fault-free goodput | p99 unaffected | "
             "p99 fault-free | p99 ratio | lost (reported lost) | misreported | "
             "not counted once | orphaned leases | leaked after SIGINT | leaked after SIGINT, "
             "fault-free | leaked after SIGKILL | orchestrator CPU | spread |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name in names:
        key, clean = ("faults", name), ("fault-free", name)
        if key in results.errors:
            lines.append(f"| {name} | error: {results.errors[key]} |" + " |" * 14)
            continue
        goodput = results.median(key, lambda c: c.sample.goodput)
        p99, p99_clean = (results.median(k, lambda c: c.sample.p99) for k in (key, clean))
        kills = results.kills.get(name, [])
        cells = [
            _cell(goodput, "{:,.1f}"), _cell(None if goodput is None else goodput / goal,
                                             "{:.0%}"),
            _cell(results.median(clean, lambda c: c.sample.goodput), "{:,.1f}"),
            _cell(p99, "{:.2f} s"), _cell(p99_clean, "{:.2f} s"),
            _cell(None if p99 is None or not p99_clean else p99 / p99_clean, "{:.2f}x"),
            *(str(sum(results.values(key, figure))) for figure in (
                lambda c: c.sample.lost, lambda c: c.sample.misreported,
                lambda c: c.sample.not_once, lambda c: c.sample.orphans)),
            *(_leaks(results.cells.get(k, [])) for k in (key, clean)),
            f"{sum(kills)} over {len(kills)} trials" if kills else "—",
            _cell(results.median(key, lambda c: c.sample.cpu), "{:.0%}"),
            spread_cell(results.values(key, lambda c: c.sample.goodput))]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def checks(goal: float, results: Results) -> list[Check]:
    key, clean = ("faults", AIOVEC), ("fault-free", AIOVEC)
    if key not in results.cells:
        return []
    goodputs = results.values(key, lambda c: c.sample.goodput)
    p99s, clean_p99s = (results.values(k, lambda c: c.sample.p99) for k in (key, clean))
    ratios = [a / b for a, b in zip(p99s, clean_p99s) if b]
    hand = ("faults", HAND_WRITTEN)
    against_hand = ([a / b for a, b in zip(goodputs, results.values(
        hand, lambda c: c.sample.goodput)) if b] if hand in results.cells else [])
    wrong = sum(results.values(key, lambda c: c.sample.misreported + c.sample.not_once))
    leaked = (sum(results.values(key, lambda c: c.sample.orphans + c.leaked))
              + sum(results.values(clean, lambda c: c.sample.orphans + c.leaked))
              + sum(results.kills.get(AIOVEC, [])))
    count = lambda v: f"{v:.0f}"  # noqa: E731 - a formatter
    return [
        Check("faults: aiovec goodput / (X* · P(ok))", statistics.median(goodputs) / goal,
              0.95, unit="%", per_repeat=[g / goal for g in goodputs]),
        Check("faults: aiovec goodput / the hand-written loop's (a task per slot)",
              statistics.median(against_hand) if against_hand else None, 0.95,
              per_repeat=against_hand),
        Check("faults: aiovec p99 of unaffected episodes / fault-free p99",
              statistics.median(ratios) if ratios else None, 1.10, at_most=True,
              per_repeat=ratios),
        Check("faults: aiovec episodes misreported or not counted once", float(wrong), 0.0,
              at_most=True, show=count),
        Check("faults: aiovec leases leaked (orphans, after SIGINT, after SIGKILL)",
              float(leaked), 0.0, at_most=True, show=count),
    ]


NOTES = (
    "Lockstep gather: failed rollouts are skipped (SkyRL's proposed `skip_failed_rollouts`); "
    "at SkyRL's and verl's HEAD one failed rollout fails the whole step, which here would be "
    "nearly every step (about 7 lost episodes per batch of 2,048).",
    "Task per episode: a rollout whose tool call failed is scored (reward 0) and kept, as "
    "verifiers stores the error in the rollout's state and scores it: each such episode is "
    "misreported. Its teardown deletes every sandbox of its own at exit, SIGINT included "
    "(verifiers' legacy `SandboxEnv`), so it leaks nothing after the SIGINT that it knew or "
    "could list; the orphans column counts what it could not name during the run.",
    "A create that fails after the sandbox exists leaves an orphan for the task contenders "
    "(the provider's reply named it); aiovec's env names the sandbox before the create and "
    "deletes it by name. That is client code any contender could adopt; what it cannot "
    "adopt without aiovec is the cleanup that runs after a SIGKILL (the kill trials).",
    "Kill trials run N = 256 with the same fault rates (a seed per trial), killed at a random "
    "moment of the 3 s after their first leases exist; the keeper of the owner's process runs "
    "the leases' deletes after its death. The other contenders get fewer trials "
    "(`--kill-trials-others`): with nothing outside the process, every lease alive at the "
    "kill leaks.",
    "Not counted once: an episode reported twice, or, for the contenders whose slots play "
    "their episodes one after another (lockstep, hand-written, aiovec), one skipped between "
    "two reports of its slot. The task-per-episode and dispatcher patterns run a slot's "
    "episodes side by side, so only the first check applies to them.",
    "Orchestrator CPU is the contender's process; aiovec's cleanup keeper (a process of its "
    "own, sent an add and a discard per lease) is not counted.",
    "Goodput counts the episodes that finish in the window, a sample of the task pool whose "
    "mean length differs from the pool's by a few percent (one round of tasks averages 8.47 "
    "to 9.07 turns against 8.70), so it can read a little above X* · P(ok).",
)


def report(args: argparse.Namespace, names: Sequence[str], workload: Workload,
           faults: Faults, results: Results, runtime: float, load: float) -> str:
    bound = fault_limits(workload, faults)
    ok = p_ok(workload, faults)
    goal = bound.x_star * ok
    method = (f"median of {args.repeats} interleaved repeats on {args.loop}, each run a "
              f"process: with faults {args.warmup:g} s of warm-up then {args.seconds:g} s "
              f"timed, fault-free {args.clean_warmup:g} s then {args.clean_seconds:g} s "
              "(lockstep: whole batches from its first); then SIGINT; spread = (max - min) / "
              "median of goodput with faults; counts are sums over the repeats")
    lines = header("aiovec agentic benchmark through faults", method,
                   packages=("anyio", "uvloop"),
                   more=[f"load average at start {load:.2f}", f"total runtime: {runtime:.0f} s"])
    if args.quick:
        lines[2:2] = [f"**Smoke run (`--quick`): small, {faults.tool_deadline:g} s tool "
                      "deadlines; do not quote its figures.**", ""]
    lines += [f"## Workload: N = {workload.num_slots:,} episodes in flight, B = "
              f"{workload.policy_batch}; faults: {faults.hang:.0%} of tool attempts hang, "
              f"{faults.error:.0%} raise ({faults.tool_deadline:g} s deadline, "
              f"{faults.retries} retry), {faults.create_failure:.1%} of creations fail after "
              "the sandbox exists" + (f"; healthy tool calls capped at {workload.tool_cap:g} s "
                                      "(below the deadline)" if workload.tool_cap else ""), "",
              f"X* = {bound.x_star:,.1f} episodes/s ({bound.binding}-bound); P(ok) = "
              f"{ok:.4f}; X* · P(ok) = {goal:,.1f} episodes/s:", "",
              *(f"- {line}" for line in bound.lines), "",
              "Measured (medians; counts summed over the repeats):", "",
              *table(names, goal, results), ""]
    lines += closing_sections(checks(goal, results), NOTES)
    return "\n".join(lines)


# ----------------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = arguments(__doc__, repeats=3, seconds=15.0,
                       quick="one repeat at N = 128 with 1.5 s deadlines, ~1 minute",
                       output=RESULTS)
    parser.add_argument("--warmup", type=float, default=14.0,
                        help="seconds from the start to the window with faults (14: the "
                             "sandboxes' first creations, then past a deadline)")
    parser.add_argument("--clean-seconds", type=float, default=8.0)
    parser.add_argument("--clean-warmup", type=float, default=8.0,
                        help="seconds from the start to the fault-free window (8: the first "
                             "creations, then past the p99 latency)")
    parser.add_argument("--deadline", type=float, default=None,
                        help="seconds each tool-call attempt may take (10; --quick: 1.5); a "
                             "full run with another writes agentic_faults_deadline_<S>s.md")
    parser.add_argument("--kill-trials", type=int, default=None,
                        help="SIGKILL trials of aiovec (200; --quick: 3)")
    parser.add_argument("--kill-trials-others", type=int, default=None,
                        help="SIGKILL trials of each other contender (5; --quick: 1)")
    parser.add_argument("--contenders", default="",
                        help="comma-separated subset of the contenders (default: all)")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiply the number of groups and B (default 1)")
    parser.add_argument("--loop", choices=["uvloop", "asyncio"],
                        default="uvloop" if HAVE_UVLOOP else "asyncio")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.seconds, args.warmup = 1, min(args.seconds, 2.0), 1.5
        args.clean_seconds, args.clean_warmup = 1.0, 0.5
    if args.kill_trials is None:
        args.kill_trials = 3 if args.quick else 200
    if args.kill_trials_others is None:
        args.kill_trials_others = 1 if args.quick else 5
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.child:
        run_child(json.loads(args.child))
        return
    faults = QUICK_FAULTS if args.quick else FAULTS
    default_output = RESULTS
    if args.deadline is not None and args.deadline != faults.tool_deadline:
        if args.deadline <= 0:
            raise SystemExit(f"--deadline must be positive, not {args.deadline:g}")
        faults = dataclasses.replace(faults, tool_deadline=args.deadline)
        default_output = RESULTS.with_name(f"agentic_faults_deadline_{args.deadline:g}s.md")
        if args.output == RESULTS:
            args.output = default_output
    workload = under_deadline(scaled(QUICK_WORKLOAD if args.quick else WORKLOAD, args.scale),
                              faults)
    wanted = {name for name in args.contenders.split(",") if name}
    names = [name for name in CONTENDERS if not wanted or name in wanted]
    load = os.getloadavg()[0]
    print(f"aiovec agentic benchmark through faults: N = {workload.num_slots:,}, "
          f"{args.repeats} repeats on {args.loop}; load average {load:.2f}", flush=True)
    started = time.perf_counter()
    results = Results()
    run_all(args, names, workload, faults, results)
    text = report(args, names, workload, faults, results, time.perf_counter() - started, load)
    publish(text, args.output, default_output,
            bool(args.quick or args.scale != 1.0 or wanted))


if __name__ == "__main__":
    main()
