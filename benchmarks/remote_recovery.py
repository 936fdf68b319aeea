"""How long a remote session and a local vector env take to be usable again after a deadline
or a cancellation, side by side (issue 29: a remote env behaves like a local one).

Run it (about a minute)::

    .venv/bin/python benchmarks/remote_recovery.py [--repeats 3]

One sub-env whose every instance hangs at its first step (``FaultyEnv`` with a ``hang``
fault: for 3 s, or for 120 s), served by ``aiovec.serve`` under uvicorn in a process of its
own (``ServedEnv(timeout=10)``, the server's default restart policy) and, locally, in an
``aiovec.AsyncVectorEnv(timeout=0.5)``, on the thread and the process backends. Each
repeat: reset, then a step that hangs, ended either by the deadline (``timeout=0.5``:
``EnvTimeoutError``) or by the caller cancelling it after 0.5 s (``anyio.move_on_after``);
then ``reset(timeout=0.5)`` until one succeeds. Reported: when the step ended, how many
resets failed before one succeeded, and how long after the step ended the env was usable
again (medians over the repeats, and their range).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from harness import arguments, header, start_server  # noqa: E402

import aiovec  # noqa: E402
from aiovec.remote import AsyncRemoteVectorEnv  # noqa: E402
from aiovec.testing import Fault, FaultyEnv  # noqa: E402

DEADLINE = 0.5
#: How long the step hangs, by env id.
HANGS = {"Slow": 3.0, "Hung": 120.0}
BACKENDS = ("thread", "process")
#: Resets tried before giving up on a recovery.
ATTEMPTS = 60


def env_fn(hang_seconds: float) -> Callable[[], FaultyEnv]:
    return functools.partial(FaultyEnv, 0, faults=[Fault("hang", "step", at=0)],
                             hang_seconds=hang_seconds)


def serve() -> None:
    """The server process: prints ``serving on URL`` once it listens."""
    from aiovec.serve import EnvServer, ServedEnv, run

    envs = {f"{name}-{backend}": ServedEnv(env_fn(seconds), backend=backend, max_envs=1,
                                           timeout=10.0)
            for name, seconds in HANGS.items() for backend in BACKENDS}
    run(EnvServer(envs), port=0, announce=True, timeout_graceful_shutdown=5)


async def recovery(envs: Any, ending: str) -> tuple[float, int, float]:
    """(seconds until the hanging step ended, failed resets, seconds from then until a reset
    succeeded) for an open vector env, local or remote."""
    await envs.reset(seed=0, timeout=30)
    began = time.perf_counter()
    if ending == "deadline":
        try:
            await envs.step(np.zeros(1), timeout=DEADLINE)
        except aiovec.EnvTimeoutError:
            pass
        else:
            raise AssertionError("the step did not time out")
    else:
        with anyio.move_on_after(DEADLINE) as scope:
            await envs.step(np.zeros(1), timeout=None)
        assert scope.cancelled_caught, "the step was not cancelled"
    ended = time.perf_counter()
    for failed in range(ATTEMPTS):
        try:
            await envs.reset(seed=1, timeout=DEADLINE)
        except aiovec.EnvTimeoutError:
            continue
        return ended - began, failed, time.perf_counter() - ended
    raise AssertionError(f"no reset succeeded in {ATTEMPTS} attempts")


async def local(hang: str, backend: str, ending: str) -> tuple[float, int, float]:
    async with aiovec.AsyncVectorEnv([env_fn(HANGS[hang])], backend=backend,
                                     timeout=DEADLINE) as envs:
        return await recovery(envs, ending)


async def remote(url: str, hang: str, backend: str, ending: str) -> tuple[float, int, float]:
    async with AsyncRemoteVectorEnv(url, f"{hang}-{backend}", 1, timeout=DEADLINE) as envs:
        return await recovery(envs, ending)


def cell(samples: list[tuple[float, int, float]]) -> str:
    ended = statistics.median(sample[0] for sample in samples)
    failed = [sample[1] for sample in samples]
    usable = [sample[2] for sample in samples]
    return (f"{ended:.2f} s | {statistics.median(failed):g} ({min(failed)}-{max(failed)}) | "
            f"{statistics.median(usable):.2f} s ({min(usable):.2f}-{max(usable):.2f})")


def main() -> None:
    parser = arguments(__doc__, repeats=3, output=HERE / "results" / "remote_recovery.md")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve()
        return
    server, url = start_server(__file__)
    results: dict[tuple[str, str, str, str], list[tuple[float, int, float]]] = {}
    try:
        for _ in range(args.repeats):
            for hang in HANGS:
                for backend in BACKENDS:
                    for ending in ("deadline", "cancelled"):
                        for where in ("local", "remote"):
                            runner = functools.partial(local if where == "local" else remote,
                                                       *(() if where == "local" else (url,)))
                            results.setdefault((hang, backend, ending, where), []).append(
                                anyio.run(runner, hang, backend, ending))
    finally:
        server.terminate()
        server.wait(timeout=60)
    lines = [
        *header("Recovery after a deadline or a cancellation, remote and local "
                "(benchmarks/remote_recovery.py)",
                f"medians of {args.repeats} repeats (range); server on the same machine "
                "(loopback)"),
        f"A sub-env's step hangs (3 s or 120 s); the step is ended at {DEADLINE:g} s by its "
        "deadline or by the caller's cancellation; then `reset(timeout=0.5)` until one "
        "succeeds. Local: `AsyncVectorEnv(timeout=0.5)`; remote: `AsyncRemoteVectorEnv("
        "timeout=0.5)` on `ServedEnv(timeout=10)`.", "",
        "| hang | backend | step ended by | where | step ended after | failed resets | "
        "usable again after |",
        "|---|---|---|---|---:|---:|---:|"]
    for (hang, backend, ending, where), samples in results.items():
        lines.append(f"| {HANGS[hang]:g} s | {backend} | {ending} | {where} | "
                     f"{cell(samples)} |")
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.output).write_text(text)


if __name__ == "__main__":
    main()
