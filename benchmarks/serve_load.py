"""aiovec.serve under load: concurrent WebSocket sessions stepping a cheap env, on loopback.

Run it (about 6 minutes; ``--quick``: 20 s)::

    .venv/bin/python benchmarks/serve_load.py [--quick] [--sessions 256,512,1024,2048,4096,8192]

Three processes share the machine, as a served env and its clients would on one box:

- the **server**: ``aiovec.serve.EnvServer`` under uvicorn (uvloop, one process), serving
  ``CartPole-v1`` on the inline backend (a cheap env: the server's own cost is what shows);
- the **load client** (this process, uvloop): ``N`` sessions at once, each an
  ``aiovec.remote.AsyncRemoteVectorEnv`` of one sub-env over its own WebSocket (binary
  frames). Each connects and opens its session (at most 128 handshakes in flight, as a
  connection pool would), resets, waits until every session is open, then steps ``--steps``
  times with random actions and closes. A session **succeeds** if every call is answered
  within the phase's deadline (``--deadline``); anything else (refused, timed out, dropped)
  is a failure, counted by kind;
- the **probe**: a separate process asking ``GET /healthz`` every 20 ms over one keep-alive
  connection (its own process, so its latency is the server's, not the load client's event
  loop); its figures are those asked while the sessions step (every one open, none done).

Reported per session count: success, p50/p99 step round trip, ``/healthz`` p50/p99, the time
to open every session and to finish. The counts grow until one holds less than 95 %
(``--sessions`` lists them). Then one client's steps/s with binary frames against JSON, for 1
16 and 64 sub-envs per session (repeats interleaved; medians and the per-repeat spread).
Output: a markdown table, printed and written to ``benchmarks/results/serve_load.md``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from harness import Check, arguments, header, start_server  # noqa: E402

import aiovec  # noqa: E402
from aiovec.remote import AsyncRemoteVectorEnv  # noqa: E402

#: OpenEnv's published scaling figures (one 8-core machine, WebSocket sessions).
OPENENV = ("OpenEnv: 2,048 concurrent WebSocket sessions on one 8-core machine at ≥ 95 % "
           "success (256 per core), p99 1.97 s; 63.8 % at 4,096")
HANDSHAKES_IN_FLIGHT = 128


# --- the server and the probe (their own processes) ---------------------------------------

def serve() -> None:
    """Run the server; print ``serving on URL`` once it listens."""
    from aiovec.serve import EnvServer, ServedEnv, run

    server = EnvServer({"CartPole-v1": ServedEnv("CartPole-v1", backend="inline",
                                                 max_envs=64)},
                       max_sessions=16384, max_sessions_per_client=16384, idle_timeout=600)
    run(server, port=0, announce=True, backlog=8192, timeout_graceful_shutdown=5)


def probe(url: str, interval: float) -> None:
    """``GET /healthz`` every ``interval`` s until stdin closes; print the latencies (JSON)."""
    import selectors
    import urllib.parse

    address = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=30)
    latencies: list[tuple[float, float]] = []  # (when it was asked, how long it took)
    failures = 0
    waiting = selectors.DefaultSelector()
    waiting.register(sys.stdin, selectors.EVENT_READ)
    while not waiting.select(timeout=interval):  # stdin readable: EOF, the run is over
        asked, started = time.time(), time.perf_counter()
        try:
            connection.request("GET", "/healthz")
            response = connection.getresponse()
            response.read()
            if response.status == 200:
                latencies.append((asked, time.perf_counter() - started))
            else:
                failures += 1
        except OSError:
            failures += 1
            connection.close()
    print(json.dumps({"latencies": latencies, "failures": failures}), flush=True)


# --- the load ------------------------------------------------------------------------------

@dataclass
class Phase:
    sessions: int
    rate: float | None = None  # steps/s per session; None: as fast as answered
    succeeded: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)
    open_seconds: float = 0.0
    total_seconds: float = 0.0
    healthz: list[float] = field(default_factory=list)
    healthz_failures: int = 0
    #: When every session was open, and when the last one finished (``time.time()``): the
    #: probe's figures are those of this window, while the sessions step.
    stepping: tuple[float, float] = (0.0, 0.0)

    @property
    def success(self) -> float:
        return self.succeeded / self.sessions

    def percentile(self, values: list[float], q: float) -> float:
        return float(np.percentile(values, q)) if values else float("nan")


def _kind(error: BaseException) -> str:
    if isinstance(error, aiovec.RemoteError):
        return error.code
    return type(error).__name__


async def run_phase(url: str, sessions: int, steps: int, deadline: float,
                    rate: float | None = None) -> Phase:
    """``sessions`` at once, each stepping as fast as it is answered, or ``rate`` times a
    second (from a random phase, so they do not step in lockstep)."""
    phase = Phase(sessions, rate)
    handshakes = anyio.Semaphore(HANDSHAKES_IN_FLIGHT)
    arrived = 0
    everyone = anyio.Event()
    started = time.perf_counter()

    def arrive() -> None:
        nonlocal arrived
        arrived += 1
        if arrived == sessions:
            phase.open_seconds = time.perf_counter() - started
            phase.stepping = (time.time(), 0.0)
            everyone.set()

    async def one(index: int) -> None:
        rng = random.Random(index)
        counted = False
        try:
            with anyio.fail_after(deadline):
                env = AsyncRemoteVectorEnv(url, "CartPole-v1", 1, timeout=None)
                async with handshakes:
                    await env.start(timeout=None)
                try:
                    await env.reset(seed=index)
                    arrive()
                    counted = True
                    await everyone.wait()
                    due = time.perf_counter() + (rng.random() / rate if rate else 0.0)
                    for _ in range(steps):
                        if rate:
                            await anyio.sleep(max(0.0, due - time.perf_counter()))
                            due += 1 / rate
                        action = np.array([rng.randrange(2)])
                        began = time.perf_counter()
                        await env.step(action)
                        phase.latencies.append(time.perf_counter() - began)
                finally:
                    await env.aclose()
            phase.succeeded += 1
        except Exception as error:
            phase.failures[_kind(error)] += 1
            if not counted:
                arrive()

    async with anyio.create_task_group() as group:
        for index in range(sessions):
            group.start_soon(one, index)
    phase.total_seconds = time.perf_counter() - started
    phase.stepping = (phase.stepping[0], time.time())
    return phase


async def steps_per_second(url: str, num_envs: int, encoding: str, seconds: float) -> float:
    async with AsyncRemoteVectorEnv(url, "CartPole-v1", num_envs,
                                    encoding=encoding) as env:  # type: ignore[arg-type]
        await env.reset(seed=0)
        actions = np.zeros(num_envs, dtype=np.int64)
        for _ in range(20):  # warm up
            await env.step(actions)
        count, began = 0, time.perf_counter()
        while time.perf_counter() - began < seconds:
            await env.step(actions)
            count += 1
        return count / (time.perf_counter() - began)


# --- the run -------------------------------------------------------------------------------

def measured_phase(url: str, sessions: int, steps: int, deadline: float,
                   rate: float | None = None) -> Phase:
    prober = subprocess.Popen([sys.executable, __file__, "--probe", url], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        phase = anyio.run(run_phase, url, sessions, steps, deadline, rate, backend="asyncio",
                          backend_options={"use_uvloop": True})
    finally:
        output, _ = prober.communicate(input="", timeout=60)
    probed = json.loads(output)
    begin, end = phase.stepping
    phase.healthz = [latency for asked, latency in probed["latencies"] if begin <= asked <= end]
    phase.healthz_failures = probed["failures"]
    return phase


def main() -> None:
    parser = arguments(__doc__, repeats=5, seconds=1.0, quick="a few sessions, short",
                       output=HERE / "results" / "serve_load.md")
    parser.add_argument("--sessions", default="256,512,1024,2048,4096,8192")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--deadline", type=float, default=180.0)
    parser.add_argument("--rate", type=float, default=2.0,
                        help="steps/s per session in the paced phase")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--probe", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve()
        return
    if args.probe:
        probe(args.probe, 0.02)
        return
    counts = [64, 128] if args.quick else [int(n) for n in args.sessions.split(",")]
    steps = 5 if args.quick else args.steps
    repeats, seconds = (2, 0.3) if args.quick else (args.repeats, args.seconds)

    server, url = start_server(__file__)
    try:
        phases: list[Phase] = []
        for sessions in counts:
            phase = measured_phase(url, sessions, steps, args.deadline)
            phases.append(phase)
            print(f"{sessions} sessions: {phase.success:.1%} succeeded "
                  f"{dict(phase.failures) or ''}, step p50 "
                  f"{phase.percentile(phase.latencies, 50) * 1e3:.1f} ms p99 "
                  f"{phase.percentile(phase.latencies, 99) * 1e3:.1f} ms, healthz p99 "
                  f"{phase.percentile(phase.healthz, 99) * 1e3:.1f} ms", flush=True)
            if phase.success < 0.95:
                break
        # The same sessions below the server's capacity: what a probe sees when the loop is
        # busy but not saturated (a closed loop of clients stepping as fast as they are
        # answered saturates any server: its /healthz waits behind a whole loop iteration).
        paced = [measured_phase(url, counts[min(1, len(counts) - 1)], steps, args.deadline,
                                rate=args.rate)]
        print(f"{paced[0].sessions} sessions at {args.rate:g} steps/s each: "
              f"healthz p99 {paced[0].percentile(paced[0].healthz, 99) * 1e3:.1f} ms",
              flush=True)
        rates: dict[tuple[int, str], list[float]] = {}
        for _ in range(repeats):
            for num_envs in (1, 16, 64):
                for encoding in random.sample(["binary", "json"], 2):
                    rates.setdefault((num_envs, encoding), []).append(anyio.run(
                        steps_per_second, url, num_envs, encoding, seconds,
                        backend="asyncio", backend_options={"use_uvloop": True}))
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
    report(args, phases + paced, rates, steps)


def report(args: argparse.Namespace, phases: list[Phase],
           rates: dict[tuple[int, str], list[float]], steps: int) -> None:
    ms = 1e3
    lines = [
        *header("aiovec.serve under load (benchmarks/serve_load.py)",
                "server, load client and probe on the same machine (loopback)",
                packages=("uvicorn", "websockets", "wsproto")),
        f"Each session: connect and open (1 CartPole sub-env, inline backend), reset, wait for "
        f"all, {steps} steps, close; success = every call answered within "
        f"{args.deadline:g} s.", "",
        "| sessions | pace | success | failures | step p50 | step p99 | /healthz p50 "
        "| /healthz p99 | all open after | done after |",
        "|---:|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for phase in phases:
        failures = ", ".join(f"{kind} {n}" for kind, n in phase.failures.most_common()) or "-"
        pace = f"{phase.rate:g} steps/s each" if phase.rate else "flat out"
        lines.append(
            f"| {phase.sessions} | {pace} | {phase.success:.1%} | {failures} "
            f"| {phase.percentile(phase.latencies, 50) * ms:.1f} ms "
            f"| {phase.percentile(phase.latencies, 99) * ms:.1f} ms "
            f"| {phase.percentile(phase.healthz, 50) * ms:.1f} ms "
            f"| {phase.percentile(phase.healthz, 99) * ms:.1f} ms "
            f"| {phase.open_seconds:.1f} s | {phase.total_seconds:.1f} s |")
    flat_out = [phase for phase in phases if phase.rate is None]
    held = [phase.sessions for phase in flat_out if phase.success >= 0.95]
    lines += ["", f"Largest count at ≥ 95 % success: **{max(held) if held else 'none'}** "
              f"(tried up to {flat_out[-1].sessions}). {OPENENV}.", "",
              "One client, one session: steps/s by encoding (median of "
              f"{len(next(iter(rates.values())))} interleaved repeats, per-repeat values)", "",
              "| sub-envs | binary frames | JSON | binary / JSON |", "|---:|---:|---:|---:|"]
    for num_envs in (1, 16, 64):
        binary, plain = rates[(num_envs, "binary")], rates[(num_envs, "json")]
        lines.append(
            f"| {num_envs} | {statistics.median(binary):,.0f} "
            f"({', '.join(f'{r:,.0f}' for r in binary)}) | {statistics.median(plain):,.0f} "
            f"({', '.join(f'{r:,.0f}' for r in plain)}) "
            f"| {statistics.median(binary) / statistics.median(plain):.2f}x |")
    at_512 = next((phase for phase in flat_out if phase.sessions == 512), None)
    paced = next((phase for phase in phases if phase.rate and phase.sessions == 512), None)
    checks = [Check("512 concurrent WebSocket sessions succeed",
                    at_512.success if at_512 else None, 0.99, unit="%")]
    if at_512 is not None:
        checks.append(Check("/healthz p99 with 512 sessions stepping flat out (ms)",
                            at_512.percentile(at_512.healthz, 99) * ms, 10.0, unit=" ms",
                            at_most=True))
    if paced is not None:
        checks.append(Check(f"/healthz p99 with 512 sessions at {paced.rate:g} steps/s each "
                            "(ms)", paced.percentile(paced.healthz, 99) * ms, 10.0,
                            unit=" ms", at_most=True))
    lines += ["", *(check.line() for check in checks)]
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(text)


if __name__ == "__main__":
    main()
