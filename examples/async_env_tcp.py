"""Coroutine envs that talk to a simulator server over TCP, many at once on one event loop.

The script starts a tiny point-mass simulator server on 127.0.0.1 (a free port), then steps
``--num-envs`` ``aiovec.AsyncEnv`` clients against it with ``backend="async"``: no thread or
process per env, and at most ``--max-concurrency`` requests in flight at the server at once.

    python examples/async_env_tcp.py --num-envs 64 --steps 200 --max-concurrency 16
    python examples/async_env_tcp.py --loop trio
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import anyio
import anyio.abc
import gymnasium as gym
import numpy as np
from anyio.streams.buffered import BufferedByteReceiveStream

import aiovec

LATENCY = 0.002  # seconds the "simulator" takes per request, as a remote one would


class Simulator:
    """The server: a 1-D point mass per connection that should reach x = 0; one JSON line per
    request and per reply. It counts how many requests it serves at once."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.peak_in_flight = 0
        self.requests = 0

    async def serve(self, stream: anyio.abc.ByteStream) -> None:
        buffered = BufferedByteReceiveStream(stream)
        position = velocity = 0.0
        rng = np.random.default_rng()
        async with stream:
            while True:
                try:
                    line = await buffered.receive_until(b"\n", 1 << 16)
                except (anyio.EndOfStream, anyio.IncompleteRead):
                    return
                self.in_flight += 1
                self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
                self.requests += 1
                try:
                    request = json.loads(line)
                    await anyio.sleep(LATENCY)
                    if request["op"] == "reset":
                        rng = np.random.default_rng(request.get("seed"))
                        position, velocity = float(rng.uniform(-1, 1)), 0.0
                        reply: dict[str, Any] = {"obs": [position, velocity]}
                    else:
                        velocity = 0.9 * velocity + 0.1 * float(request["force"])
                        position += 0.1 * velocity
                        distance = abs(position)
                        reply = {"obs": [position, velocity], "reward": -distance,
                                 "done": distance < 0.05 or distance > 2.0}
                finally:
                    self.in_flight -= 1
                await stream.send(json.dumps(reply).encode() + b"\n")


class RemotePointMass(aiovec.AsyncEnv[np.ndarray, np.ndarray]):
    """A client of the simulator: connects on its first reset, closes in ``close``."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self._stream: anyio.abc.SocketStream | None = None
        self._reader: BufferedByteReceiveStream | None = None

    async def _request(self, message: dict[str, Any]) -> dict[str, Any]:
        if self._stream is None:
            self._stream = await anyio.connect_tcp("127.0.0.1", self.port)
            self._reader = BufferedByteReceiveStream(self._stream)
        assert self._reader is not None
        await self._stream.send(json.dumps(message).encode() + b"\n")
        reply: dict[str, Any] = json.loads(await self._reader.receive_until(b"\n", 1 << 16))
        return reply

    async def reset(self, *, seed: int | None = None,
                    options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        await super().reset(seed=seed)
        reply = await self._request({"op": "reset", "seed": int(self.np_random.integers(2**31))})
        return np.array(reply["obs"], dtype=np.float32), {}

    async def step(
        self, action: np.ndarray
    ) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        reply = await self._request({"op": "step", "force": float(action[0])})
        return np.array(reply["obs"], dtype=np.float32), reply["reward"], reply["done"], False, {}

    async def close(self) -> None:
        if self._stream is not None:
            await self._stream.aclose()
            self._stream = None


def push_to_zero(obs: np.ndarray) -> np.ndarray:
    """A simple controller: push towards x = 0, damping the velocity."""
    return np.clip(-2.0 * obs[:, :1] - obs[:, 1:], -1.0, 1.0).astype(np.float32)


async def main(num_envs: int, steps: int, max_concurrency: int) -> None:
    simulator = Simulator()
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as server:
        server.start_soon(listener.serve, simulator.serve)
        factories = [lambda: RemotePointMass(port)] * num_envs
        async with aiovec.AsyncVectorEnv(factories, backend="async",
                                         max_concurrency=max_concurrency) as envs:
            obs, _ = await envs.reset(seed=0)
            returns = np.zeros(num_envs)
            finished: list[float] = []
            started = time.perf_counter()
            for _ in range(steps):
                obs, rewards, terminations, truncations, _ = await envs.step(push_to_zero(obs))
                returns += rewards
                for env_index in np.flatnonzero(terminations | truncations):
                    finished.append(float(returns[env_index]))
                    returns[env_index] = 0.0
            elapsed = time.perf_counter() - started
        server.cancel_scope.cancel()
    print(f"{num_envs} TCP envs, {steps} steps: {num_envs * steps / elapsed:,.0f} steps/s "
          f"({elapsed / steps * 1000:.1f} ms per vector step, {LATENCY * 1000:.0f} ms per request)")
    mean = f"{np.mean(finished):.2f}" if finished else "n/a"
    print(f"episodes finished: {len(finished)}, mean return {mean}")
    print(f"server: {simulator.requests} requests, at most {simulator.peak_in_flight} at once "
          f"(max_concurrency={max_concurrency})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--max-concurrency", type=int, default=16)
    parser.add_argument("--loop", choices=["asyncio", "trio"], default="asyncio")
    args = parser.parse_args()
    anyio.run(main, args.num_envs, args.steps, args.max_concurrency, backend=args.loop)
