"""What a sync call on a private event loop costs, piece by piece: the floor under the shim.

Each row runs, from sync code, a coroutine that suspends once (``await asyncio.sleep(0)``,
as the inline backend's step does) and reports µs per call: the fastest and the median of
``--repeats`` runs of ``--calls`` calls (the fastest is the least disturbed by a busy
machine). The first row is what ``await`` pays for the same coroutine inside a running loop;
the others are what the shim pays instead, from the bare loop mechanics to the whole
``LoopDriver``.

Run: ``.venv/bin/python benchmarks/shim_floor.py [--repeats 7] [--calls 20000]``.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # as aiovec._shim._loop_driver does
import asyncio
import contextvars
import signal
import socket
import statistics
import time
from collections.abc import Callable

from harness import arguments, header

from aiovec._shim._loop_driver import LoopDriver


async def one_checkpoint() -> int:
    await asyncio.sleep(0)
    return 1


def ways(loop: asyncio.AbstractEventLoop, driver: LoopDriver,
         calls: int) -> dict[str, Callable[[], None]]:
    """Each way of making ``calls`` calls."""
    reader, writer = socket.socketpair()
    for end in (reader, writer):
        end.setblocking(False)

    def awaited() -> None:
        async def many() -> None:
            for _ in range(calls):
                await one_checkpoint()
        loop.run_until_complete(many())

    def one_iteration() -> None:
        for _ in range(calls):
            loop.call_soon(loop.stop)
            loop.run_forever()

    def task_run_until_complete() -> None:
        for _ in range(calls):
            loop.run_until_complete(contextvars.Context().run(loop.create_task,
                                                              one_checkpoint()))

    async def stopping() -> int:
        try:
            return await one_checkpoint()
        finally:
            loop.stop()

    def task_that_stops_the_loop() -> None:
        for _ in range(calls):
            task = contextvars.Context().run(loop.create_task, stopping())
            while not task.done():
                loop.run_forever()

    def ctrl_c_handler() -> None:
        handler = signal.default_int_handler
        for _ in range(calls):
            previous = _signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
            _signal.signal(signal.SIGINT, lambda signum, frame: None)
            _signal.signal(signal.SIGINT, handler)
            _signal.set_wakeup_fd(previous)

    def driver_run() -> None:
        for _ in range(calls):
            driver.run(one_checkpoint)

    return {
        "`await` in a running loop (what `await envs.step()` pays)": awaited,
        "one loop iteration from sync code (`call_soon(stop)`, `run_forever`)": one_iteration,
        "a task per call, `run_until_complete` (the shim before)": task_run_until_complete,
        "a task per call that stops the loop itself (the shim now)": task_that_stops_the_loop,
        "Ctrl-C handler and wakeup fd, set and restored": ctrl_c_handler,
        "`LoopDriver.run` (all of it)": driver_run,
    }


def main() -> None:
    parser = arguments(__doc__, repeats=7)
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()
    loop = asyncio.new_event_loop()
    driver = LoopDriver()
    try:
        measures = ways(loop, driver, args.calls)
        samples: dict[str, list[float]] = {name: [] for name in measures}
        for _ in range(args.repeats):  # interleaved: drift hits every row alike
            for name, measure in measures.items():
                started = time.perf_counter()
                measure()
                samples[name].append((time.perf_counter() - started) / args.calls * 1e6)
    finally:
        driver.stop()
        loop.close()
    print("\n".join(header("The floor under the shim",
                           f"{args.repeats} interleaved repeats of {args.calls} calls")))
    print("| way (a coroutine that suspends once) | µs per call, fastest | median |")
    print("|---|---:|---:|")
    for name, values in samples.items():
        print(f"| {name} | {min(values):.2f} | {statistics.median(values):.2f} |")


if __name__ == "__main__":
    main()
