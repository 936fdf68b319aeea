"""The floor under the process backend: a bare two-process ping-pong, beside aiovec, in one run.

The floor is the process backend's design with nothing else: the parent writes the actions
into shared memory and one byte to each worker's socket; each worker steps its share of the
CartPole envs (autoreset as Gymnasium's next-step mode), writes observations, rewards and
episode ends into shared memory, and answers one byte; the parent reads one byte from each.
No checks, no deadlines, no event loop, no frames. Three variants:

- ``floor, workers block``: each worker sleeps in ``recv`` between steps;
- ``floor, workers poll 200 µs``: each worker polls its socket for 200 µs after answering
  (yielding the CPU between polls) before it sleeps, as aiovec's workers did before issue 19;
- ``floor, poll + replies held``: as well, a worker done early holds its byte until the other
  has marked the step done in shared memory, so that both bytes reach the parent together, as
  aiovec's workers do now.

Beside it, interleaved in every repeat (shuffled order): aiovec's process backend
(``await envs.step()`` on uvloop, two workers), Gymnasium's ``SyncVectorEnv``, and two raw
env loops in two processes (no IPC at all: the machine's ceiling). The report gives each
one's median steps/s, its spread over repeats, and aiovec against the floor, SyncVectorEnv
and the raw loops.

Run: ``.venv/bin/python benchmarks/process_floor.py [--repeats 5] [--seconds 0.5]``.
"""

from __future__ import annotations

import mmap
import os
import socket
import statistics
import subprocess
import sys
import time
from typing import Any

import numpy as np
from bench_envs import make_cartpole
from harness import Plan, Timing, arguments, header, interleaved, spread_cell
from run_contenders import (
    Workload,
    run_aiovec,
    run_gym_sync,
    run_raw_pair,
    run_sync_vector,
)

WORKERS = 2
POLL_SECONDS = 200e-6
CARTPOLE = Workload("CartPole-v1", make_cartpole, (8, 32), "gym.make('CartPole-v1')")
OBS_SHAPE, OBS_DTYPE = (4,), np.float32


def _layout(num_envs: int) -> tuple[int, list[tuple[str, tuple[int, ...], Any, int]]]:
    """Regions of the shared block: name, shape, dtype, offset (64-byte aligned)."""
    regions = [("actions", (num_envs,), np.int64), ("obs", (num_envs, *OBS_SHAPE), OBS_DTYPE),
               ("rewards", (num_envs,), np.float64), ("terminations", (num_envs,), np.bool_),
               ("truncations", (num_envs,), np.bool_), ("marks", (WORKERS,), np.int64)]
    laid, offset = [], 0
    for name, shape, dtype in regions:
        laid.append((name, shape, dtype, offset))
        offset += -(-int(np.prod(shape)) * np.dtype(dtype).itemsize // 64) * 64
    return offset, laid


def _views(block: mmap.mmap, num_envs: int) -> dict[str, np.ndarray]:
    _, laid = _layout(num_envs)
    return {name: np.frombuffer(block, dtype, int(np.prod(shape)), offset).reshape(shape)
            for name, shape, dtype, offset in laid}


def _wait_polling(sock: socket.socket, deadline: float) -> None:
    while time.perf_counter() < deadline:
        try:
            sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            return
        except BlockingIOError:
            os.sched_yield()


def worker(sock: socket.socket, num_envs: int, first: int, count: int, mode: str) -> None:
    """A floor worker: step envs ``first..first+count-1`` per byte received, answer a byte."""
    poll = POLL_SECONDS if mode != "block" else 0.0
    index = first * WORKERS // num_envs
    _, fds, _, _ = socket.recv_fds(sock, 1, 1)
    size, _ = _layout(num_envs)
    block = mmap.mmap(fds[0], size)
    os.close(fds[0])
    views = _views(block, num_envs)
    actions, obs_rows = views["actions"], views["obs"]
    rewards, terminations, truncations = (views["rewards"], views["terminations"],
                                          views["truncations"])
    envs = [(first + offset, make_cartpole()) for offset in range(count)]
    done = [False] * num_envs
    for env_index, env in envs:
        obs_rows[env_index] = env.reset(seed=env_index)[0]
    marks, step = views["marks"], 0
    sock.send(b"r")
    until = 0.0
    while True:
        if poll:
            _wait_polling(sock, until)
        if not sock.recv(1):
            return
        for env_index, env in envs:
            if done[env_index]:  # next-step autoreset, as Gymnasium's default
                obs, _ = env.reset()
                reward, terminated, truncated = 0.0, False, False
            else:
                obs, reward, terminated, truncated, _ = env.step(actions[env_index])
            done[env_index] = terminated or truncated
            obs_rows[env_index] = obs
            rewards[env_index] = reward
            terminations[env_index] = terminated
            truncations[env_index] = truncated
        until = time.perf_counter() + poll
        if mode == "hold":
            step += 1
            marks[index] = step
            while marks[1 - index] != step and time.perf_counter() < until:
                os.sched_yield()
        sock.send(b"s")


class FloorVectorEnv:
    """The parent of the ping-pong, with just enough of a vector env's face to be timed."""

    def __init__(self, num_envs: int, mode: str) -> None:
        size, _ = _layout(num_envs)
        self._fd = os.memfd_create("floor")
        os.ftruncate(self._fd, size)
        self._block = mmap.mmap(self._fd, size)
        self._views = _views(self._block, num_envs)
        self._socks: list[socket.socket] = []
        self._children: list[subprocess.Popen[bytes]] = []
        bounds = [num_envs * index // WORKERS for index in range(WORKERS + 1)]
        for index in range(WORKERS):
            parent_end, child_end = socket.socketpair()
            with child_end:
                self._children.append(subprocess.Popen(
                    [sys.executable, os.path.abspath(__file__), "--worker",
                     str(child_end.fileno()), str(num_envs), str(bounds[index]),
                     str(bounds[index + 1] - bounds[index]), mode],
                    pass_fds=[child_end.fileno()]))
            socket.send_fds(parent_end, [b"m"], [self._fd])
            self._socks.append(parent_end)

    def reset(self, seed: int = 0) -> None:
        for sock in self._socks:
            sock.recv(1)

    def step(self, actions: np.ndarray) -> np.ndarray:
        self._views["actions"][:] = actions
        for sock in self._socks:
            sock.send(b"a")
        for sock in self._socks:
            sock.recv(1)
        return self._views["obs"]

    def close(self) -> None:
        for sock in self._socks:
            sock.close()
        for child in self._children:
            child.wait(10)
        self._views.clear()
        self._block.close()
        os.close(self._fd)


def run_floor(mode: str) -> Any:
    def run(workload: Workload, num_envs: int, plan: Plan) -> Timing:
        return run_sync_vector(FloorVectorEnv(num_envs, mode), num_envs, plan)
    return run


RAW_PAIR = "2 raw env loops (2 processes)"
SYNC = "gymnasium SyncVectorEnv"
FLOOR = "floor, poll + replies held"
AIOVEC = "aiovec process (await, uvloop)"
CONTENDERS = {
    RAW_PAIR: run_raw_pair,
    SYNC: run_gym_sync,
    "floor, workers block": run_floor("block"),
    "floor, workers poll 200 µs": run_floor("poll"),
    FLOOR: run_floor("hold"),
    AIOVEC: run_aiovec("process"),
    "aiovec process, copy=False": run_aiovec("process", copy=False),
}


def _ratios(ours: list[float], theirs: list[float]) -> str:
    """The median ratio, then the same ratio within each repeat."""
    return (f"{statistics.median(ours) / statistics.median(theirs):.2f}x; "
            + " ".join(f"{a / b:.2f}" for a, b in zip(ours, theirs)))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        fd, num_envs, first, count = (int(value) for value in sys.argv[2:6])
        worker(socket.socket(fileno=fd), num_envs, first, count, sys.argv[6])
        return
    parser = arguments(__doc__, repeats=5, seconds=0.5)
    parser.add_argument("--sizes", default="8,32")
    args = parser.parse_args()
    plan = Plan(seconds=args.seconds)
    sizes = [int(size) for size in args.sizes.split(",")]
    rates: dict[tuple[int, str], list[float]] = {}
    latencies: dict[tuple[int, str], list[float]] = {}
    print("\n".join(header("The process backend's floor",
                           f"{args.repeats} interleaved repeats of {args.seconds:g} s")),
          flush=True)
    for repeat in range(args.repeats):
        for num_envs in sizes:
            for name in interleaved(CONTENDERS, repeat * 1000 + num_envs):
                envs = 2 if name == RAW_PAIR else num_envs
                timing = CONTENDERS[name](CARTPOLE, envs, plan)
                rates.setdefault((num_envs, name), []).append(timing.steps_per_second)
                latencies.setdefault((num_envs, name), []).append(timing.latency or 0.0)
                print(f"  repeat {repeat + 1} n={num_envs:<3} {name:<32} "
                      f"{timing.steps_per_second:>10,.0f} steps/s", flush=True)
    print("\nSteps/s: sub-env steps per wall second (a mean over the run: stalls of a shared "
          "machine count); µs per vector step: the median step (they do not).")
    print("\n## CartPole-v1, the process backend against its floor\n")
    print("| contender | num_envs | steps/s (median) | spread | µs per vector step (median) "
          "| vs SyncVectorEnv |")
    print("|---|---:|---:|---:|---:|---:|")
    for num_envs in sizes:
        sync = statistics.median(rates[(num_envs, SYNC)])
        for name in CONTENDERS:
            values = rates[(num_envs, name)]
            median = statistics.median(values)
            raw = name == RAW_PAIR
            step_us = statistics.median(latencies[(num_envs, name)]) * 1e6
            print(f"| {name} | {'2 x 1 env' if raw else num_envs} | {median:,.0f} | "
                  f"{spread_cell(values)} | {'—' if raw else f'{step_us:.1f}'} | "
                  f"{'—' if raw else f'{median / sync:.2f}x'} |")
    print("\n## aiovec against the floor, SyncVectorEnv and two raw loops "
          "(median; per repeat)\n")
    print("| num_envs | aiovec / floor | aiovec / floor, median steps | aiovec / SyncVectorEnv "
          "| aiovec / 2 raw loops | floor / 2 raw loops |")
    print("|---:|---|---|---|---|---|")
    for num_envs in sizes:
        ours, floor = rates[(num_envs, AIOVEC)], rates[(num_envs, FLOOR)]
        raw = rates[(num_envs, RAW_PAIR)]
        # Steps per second from each median step, so that the ratio reads the same way.
        ours_steps = [1 / latency for latency in latencies[(num_envs, AIOVEC)]]
        floor_steps = [1 / latency for latency in latencies[(num_envs, FLOOR)]]
        print(f"| {num_envs} | {_ratios(ours, floor)} | {_ratios(ours_steps, floor_steps)} | "
              f"{_ratios(ours, rates[(num_envs, SYNC)])} | {_ratios(ours, raw)} | "
              f"{_ratios(floor, raw)} |")
    print(f"\nload average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
