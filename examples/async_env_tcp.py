"""Coroutine envs that talk to a simulator server over TCP, many at once on one event loop.

The script starts a tiny point-mass simulator server on 127.0.0.1 (a free port), then steps
``--num-envs`` ``aiovec.AsyncEnv`` clients against it with ``backend="async"``: no thread or
process per env, and at most ``--max-concurrency`` requests in flight at the server at once
(the server counts them, so you can see it). ``--serve`` runs only the server, to poke at by
hand: ``nc 127.0.0.1 PORT``, then type ``{"op": "reset", "seed": 1}``.

The protocol is one JSON object per line each way, one connection per simulated point mass:

    {"op": "reset", "seed": 1}    ->  {"obs": [x, v]}
    {"op": "step", "force": 0.5}  ->  {"obs": [x, v], "reward": -|x|, "done": |x| < 0.05 or |x| > 2}
    anything else                 ->  {"error": "..."}

    python examples/async_env_tcp.py --num-envs 64 --steps 200 --max-concurrency 16
    python examples/async_env_tcp.py --loop trio
    python examples/async_env_tcp.py --serve --port 5555
"""

from __future__ import annotations

import argparse
import json
import signal
import time
from typing import Any

import anyio
import anyio.abc
import gymnasium as gym
import numpy as np
from anyio.streams.buffered import BufferedByteReceiveStream

import aiovec

LATENCY = 0.002  # seconds the "simulator" takes per request, as a remote one would
MAX_LINE = 1 << 16


class Simulator:
    """The server: a 1-D point mass per connection, to be pushed to x = 0 and held there.
    It counts the requests it serves, and how many it was serving at once at most."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.peak_in_flight = 0
        self.requests = 0

    async def serve(self, stream: anyio.abc.ByteStream) -> None:
        """Answer one connection's requests until the client hangs up."""
        buffered = BufferedByteReceiveStream(stream)
        position = velocity = 0.0
        async with stream:
            while True:
                try:
                    line = await buffered.receive_until(b"\n", MAX_LINE)
                except (anyio.EndOfStream, anyio.IncompleteRead):
                    return
                self.in_flight += 1
                self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
                self.requests += 1
                try:
                    await anyio.sleep(LATENCY)
                    request = json.loads(line)
                    if request["op"] == "reset":
                        rng = np.random.default_rng(request.get("seed"))
                        position, velocity = float(rng.uniform(-1, 1)), 0.0
                        reply: dict[str, Any] = {"obs": [position, velocity]}
                    elif request["op"] == "step":
                        velocity = 0.9 * velocity + 0.1 * float(request["force"])
                        position += 0.1 * velocity
                        distance = abs(position)
                        reply = {"obs": [position, velocity], "reward": -distance,
                                 "done": distance < 0.05 or distance > 2.0}
                    else:
                        reply = {"error": f"unknown op {request['op']!r}"}
                except (ValueError, TypeError, KeyError) as exc:  # a bad line, not a dead server
                    reply = {"error": f"bad request {line[:80]!r}: {exc!r}"}
                finally:
                    self.in_flight -= 1
                await stream.send(json.dumps(reply).encode() + b"\n")


async def serve_simulator(simulator: Simulator, port: int = 0, *,
                          task_status: anyio.abc.TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
                          ) -> None:
    """Listen on 127.0.0.1:``port`` (0: a free one) and report the port to ``TaskGroup.start``."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=port)
    async with listener:
        task_status.started(listener.extra(anyio.abc.SocketAttribute.local_port))
        await listener.serve(simulator.serve)


class RemotePointMass(aiovec.AsyncEnv[np.ndarray, np.ndarray]):
    """A client of the simulator: connects on its first reset, hangs up in ``close``."""

    def __init__(self, port: int, max_episode_steps: int = 200) -> None:
        self.port = port
        self.max_episode_steps = max_episode_steps
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self._stream: anyio.abc.SocketStream | None = None
        self._reader: BufferedByteReceiveStream | None = None
        self._episode_steps = 0

    async def _request(self, message: dict[str, Any]) -> dict[str, Any]:
        if self._stream is None or self._reader is None:
            raise RuntimeError("not connected: reset the env first")
        await self._stream.send(json.dumps(message).encode() + b"\n")
        reply: dict[str, Any] = json.loads(await self._reader.receive_until(b"\n", MAX_LINE))
        if "error" in reply:
            raise RuntimeError(f"simulator refused {message}: {reply['error']}")
        return reply

    async def reset(self, *, seed: int | None = None,
                    options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        await super().reset(seed=seed)
        if self._stream is None:
            self._stream = await anyio.connect_tcp("127.0.0.1", self.port)
            self._reader = BufferedByteReceiveStream(self._stream)
        self._episode_steps = 0
        reply = await self._request({"op": "reset", "seed": int(self.np_random.integers(2**31))})
        return np.array(reply["obs"], dtype=np.float32), {}

    async def step(
        self, action: np.ndarray
    ) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        reply = await self._request({"op": "step", "force": float(action[0])})
        self._episode_steps += 1
        truncated = self._episode_steps >= self.max_episode_steps
        return (np.array(reply["obs"], dtype=np.float32), float(reply["reward"]),
                bool(reply["done"]), truncated, {})

    async def close(self) -> None:
        if self._stream is not None:
            await self._stream.aclose()
            self._stream = self._reader = None


def push_to_zero(obs: np.ndarray) -> np.ndarray:
    """A simple controller: push towards x = 0, damping the velocity."""
    force: np.ndarray = np.clip(-2.0 * obs[:, :1] - obs[:, 1:], -1.0, 1.0)
    return force.astype(np.float32)


async def main(num_envs: int, steps: int, max_concurrency: int) -> None:
    simulator = Simulator()
    async with anyio.create_task_group() as server:
        port = await server.start(serve_simulator, simulator)
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
    print(f"{num_envs} TCP envs on port {port}, {steps} steps: "
          f"{num_envs * steps / elapsed:,.0f} steps/s "
          f"({elapsed / steps * 1000:.1f} ms per vector step, {LATENCY * 1000:.0f} ms per request)")
    mean = f"{np.mean(finished):.2f}" if finished else "n/a"
    print(f"episodes finished: {len(finished)}, mean return {mean}")
    print(f"server: {simulator.requests} requests, at most {simulator.peak_in_flight} at once "
          f"(max_concurrency={max_concurrency})")


async def serve_only(port: int) -> None:
    """Run only the server, until Ctrl-C or SIGTERM (POSIX signals)."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with anyio.create_task_group() as server:
            port = await server.start(serve_simulator, Simulator(), port)
            print(f"simulator listening on 127.0.0.1:{port} (Ctrl-C to stop)", flush=True)
            async for _ in signals:
                server.cancel_scope.cancel()
                break


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=64)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--max-concurrency", type=int, default=16)
    parser.add_argument("--loop", choices=["asyncio", "trio"], default="asyncio")
    parser.add_argument("--serve", action="store_true", help="only run the simulator server")
    parser.add_argument("--port", type=int, default=0, help="with --serve (default: a free one)")
    args = parser.parse_args()
    if args.serve:
        anyio.run(serve_only, args.port, backend=args.loop)
    else:
        anyio.run(main, args.num_envs, args.steps, args.max_concurrency, backend=args.loop)
