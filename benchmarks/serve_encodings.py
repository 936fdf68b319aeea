"""One remote client's steps/s with binary frames against JSON (issue 29: binary at least 1.0x JSON
for one sub-env, 1.3x at 64), side by side in one run.

Run it (about 1 minute)::

    .venv/bin/python benchmarks/serve_encodings.py [--repeats 11] [--seconds 1]

The server is ``serve_load.py``'s (``aiovec.serve`` under uvicorn on uvloop, in a process
of its own, CartPole on the inline backend); the client, in this process, is one
``AsyncRemoteVectorEnv`` stepping as fast as it is answered. Each repeat measures every
(sub-envs, encoding) pair once, the encodings in random order; reported are the medians,
the per-repeat binary/JSON ratios and their median, and PASS/MISS lines for the targets.
Output: printed, and written to ``benchmarks/results/serve_encodings.md``.
"""

from __future__ import annotations

import random
import signal
import statistics
import sys
from pathlib import Path

import anyio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import serve_load  # noqa: E402
from harness import Check, arguments, header, start_server  # noqa: E402
from serve_load import steps_per_second  # noqa: E402

SIZES = (1, 16, 64)
#: binary / JSON targets by sub-env count.
TARGETS = {1: 1.0, 64: 1.3}


def main() -> None:
    args = arguments(__doc__, repeats=11, seconds=1.0,
                     output=HERE / "results" / "serve_encodings.md").parse_args()
    server, url = start_server(serve_load.__file__)
    rates: dict[tuple[int, str], list[float]] = {}
    try:
        for _ in range(args.repeats):
            for num_envs in SIZES:
                for encoding in random.sample(["binary", "json"], 2):
                    rates.setdefault((num_envs, encoding), []).append(anyio.run(
                        steps_per_second, url, num_envs, encoding, args.seconds,
                        backend="asyncio", backend_options={"use_uvloop": True}))
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
    lines = [
        *header("One remote client's steps/s by encoding (benchmarks/serve_encodings.py)",
                f"{args.repeats} interleaved repeats of {args.seconds:g} s; server and client "
                "on the same machine (loopback)"),
        "| sub-envs | binary frames (steps/s) | JSON (steps/s) | binary / JSON, per repeat "
        "| median |", "|---:|---:|---:|---|---:|"]
    checks = []
    for num_envs in SIZES:
        binary, plain = rates[(num_envs, "binary")], rates[(num_envs, "json")]
        ratios = [mine / theirs for mine, theirs in zip(binary, plain)]
        lines.append(f"| {num_envs} | {statistics.median(binary):,.0f} | "
                     f"{statistics.median(plain):,.0f} | "
                     f"{' '.join(f'{ratio:.2f}' for ratio in ratios)} | "
                     f"{statistics.median(ratios):.2f}x |")
        if num_envs in TARGETS:
            checks.append(Check(f"binary / JSON, {num_envs} sub-env(s)",
                                statistics.median(ratios), TARGETS[num_envs],
                                per_repeat=ratios))
    lines += ["", *(check.line() for check in checks)]
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.output).write_text(text)


if __name__ == "__main__":
    main()
