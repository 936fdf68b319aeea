"""How fast what a sub-env started dies with its worker, and what that adds to a restart.

Death to gone: a worker hosting one ``ProcessTreeEnv`` whose tree has 10 processes is SIGKILLed
from outside; the clock runs until the last of the 10 has exited (watched through pidfds).
Twenty kills per tree kind: one whose processes all exit on SIGTERM, and one with a
SIGTERM-ignoring member, which costs the grace (``AIOVEC_TERMINATE_GRACE``, 1 s).

Restart: the extra time of the step in which one of 8 workers dies (``os._exit``) and is
restarted by the restart policy, for a sub-env that starts no process and for one that starts
10 (the new instance starts its 10 too: that is in the figure). Medians of interleaved repeats.

    python benchmarks/process_tree.py [--kills 20] [--repeats 5]
"""

from __future__ import annotations

import contextlib
import functools
import os
import select
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import numpy as np
from harness import arguments, header

import aiovec
from aiovec.testing import Fault, ProcessTreeEnv, tagged_processes

RESULTS = Path(__file__).resolve().parent / "results" / "process_tree.md"
#: Ten processes: three plain children, three setsid daemons, three double-forked daemons and
#: one more plain child (all exit on SIGTERM).
OBEDIENT = ("child", "setsid", "double_fork") * 3 + ("child",)
#: Ten processes, two of which (a shell and its grandchild) ignore SIGTERM.
STUBBORN = ("child", "setsid", "double_fork") * 2 + ("child", "child", "ignores_sigterm")


def wait_gone(pids: list[int], limit: float = 30.0) -> float:
    """Seconds until every pid has exited (pidfds, no polling)."""
    started = time.perf_counter()
    pidfds = []
    for pid in pids:
        try:
            pidfds.append(os.pidfd_open(pid))
        except ProcessLookupError:
            continue
    try:
        waiting = set(pidfds)
        while waiting:
            ready, _, _ = select.select(list(waiting), [], [], limit)
            if not ready:
                raise TimeoutError(f"{len(waiting)} processes still alive after {limit} s")
            waiting.difference_update(ready)
    finally:
        for pidfd in pidfds:
            os.close(pidfd)
    return time.perf_counter() - started


def death_to_gone(helpers: tuple[str, ...], kills: int) -> list[float]:
    tag = f"bench-{os.getpid()}-{len(helpers)}-{helpers[-1]}"
    factory = functools.partial(ProcessTreeEnv, tag=tag, helpers=helpers)

    async def main() -> list[float]:
        times = []
        async with aiovec.AsyncVectorEnv([factory], backend="process") as envs:
            for _ in range(kills):
                await envs.reset(seed=0)  # makes the sub-env afresh after each kill
                tree = tagged_processes(tag)
                assert len(tree) == 10, tree
                (worker,) = await envs.get_attr("host_pid")
                killed = time.perf_counter()
                os.kill(worker, signal.SIGKILL)
                wait_gone(tree)
                times.append(time.perf_counter() - killed)
                with contextlib.suppress(aiovec.WorkerDiedError):
                    await envs.step(np.zeros(1))
        return times

    return anyio.run(main)


def restart_extra(helpers: tuple[str, ...], num_envs: int = 8) -> float:
    """Extra seconds of the step in which one worker exits and is restarted."""
    tag = f"bench-restart-{os.getpid()}"
    fns: list[Any] = [functools.partial(ProcessTreeEnv, index, tag=tag, helpers=helpers,
                                        faults=[Fault("exit", "step", at=5, instance=0)]
                                        if index == 0 else [])
                      for index in range(num_envs)]

    async def main() -> float:
        async with aiovec.AsyncVectorEnv(fns, backend="process", num_workers=num_envs,
                                         restart=True) as envs:
            await envs.reset(seed=0)
            times = []
            for _ in range(9):
                started = time.perf_counter()
                await envs.step(np.zeros(num_envs))
                times.append(time.perf_counter() - started)
            assert envs.statistics().restarts == 1
            return times[5] - statistics.median(times[:5] + times[6:])

    return anyio.run(main)


def spread(values: list[float]) -> str:
    return (f"{statistics.median(values) * 1e3:.1f} ms (min {min(values) * 1e3:.1f}, "
            f"max {max(values) * 1e3:.1f})")


def main() -> None:
    parser = arguments(__doc__, repeats=5)
    parser.add_argument("--kills", type=int, default=20)
    args = parser.parse_args()
    obedient = death_to_gone(OBEDIENT, args.kills)
    stubborn = death_to_gone(STUBBORN, args.kills)
    restarts: dict[str, list[float]] = {"no process": [], "10 processes": []}
    for repeat in range(args.repeats):
        names = list(restarts)
        for name in names if repeat % 2 == 0 else names[::-1]:
            restarts[name].append(restart_extra(() if name == "no process" else OBEDIENT))
        print(f"repeat {repeat + 1}/{args.repeats}", file=sys.stderr)
    lines = [*header("Process trees: a killed worker's descendants, and a restart's cost",
                     f"{args.kills} kills, then {args.repeats} repeats of the restart, "
                     "alternating"),
             f"Worker SIGKILLed to its sub-env's 10-process tree gone, {args.kills} kills:", "",
             "| tree | median (min, max) |", "|---|---:|",
             f"| all exit on SIGTERM | {spread(obedient)} |",
             f"| two ignore SIGTERM (grace 1 s) | {spread(stubborn)} |", "",
             f"Extra time of the step in which one of 8 workers exits and is restarted, "
             f"median over {args.repeats} repeats:", "",
             "| the sub-env starts | extra (min, max) |", "|---|---:|"]
    lines += [f"| {name} | {spread(values)} |" for name, values in restarts.items()]
    table = "\n".join(lines) + "\n"
    print(table)
    RESULTS.write_text(table)


if __name__ == "__main__":
    main()
