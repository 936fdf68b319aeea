"""The examples run as a user would run them: as scripts, in a fresh interpreter."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

# Each example starts a fresh interpreter and its own workers: make unit runs them, the quick
# tier (make check) has the tests of what they use.
pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_quickstart_runs_and_reports_throughput() -> None:
    completed = subprocess.run(
        [sys.executable, str(EXAMPLES / "quickstart.py"), "--num-envs", "3", "--steps", "200"],
        capture_output=True, text=True, timeout=120, check=True,
    )
    lines = [line for line in completed.stdout.splitlines() if "steps/s" in line]
    assert len(lines) == 6, completed.stdout
    for line in lines:
        rate = float(re.search(r"([\d,]+) steps/s", line).group(1).replace(",", ""))  # type: ignore[union-attr]
        assert rate > 0


def run_example(*args: str) -> str:
    completed = subprocess.run([sys.executable, *args], capture_output=True, text=True,
                               timeout=120, check=True)
    assert "Traceback" not in completed.stderr, completed.stderr
    return completed.stdout


@pytest.mark.parametrize(("backend", "loop"),
                         [("async", "asyncio"), ("async", "trio"), ("thread", "asyncio")])
def test_first_ready_example_reports_every_rate(backend: str, loop: str) -> None:
    out = run_example(str(EXAMPLES / "first_ready.py"), "--num-envs", "8", "--batch-size", "4",
                      "--seconds", "0.3", "--backend", backend, "--loop", loop)
    rates = [float(match.replace(",", "")) for match in re.findall(r"([\d,]+) steps/s", out)]
    assert len(rates) == 3 and all(rate > 0 for rate in rates), out  # step, recv, batches
    assert f"backend={backend!r}" in out
    assert "envs.recv()" in out and "envs.batches()" in out


@pytest.mark.parametrize("loop", ["asyncio", "trio"])
def test_tcp_example_honours_max_concurrency(loop: str) -> None:
    out = run_example(str(EXAMPLES / "async_env_tcp.py"), "--num-envs", "12", "--steps", "30",
                      "--max-concurrency", "4", "--loop", loop)
    rate = re.search(r"([\d,]+) steps/s", out)
    assert rate is not None and float(rate.group(1).replace(",", "")) > 0, out
    assert re.search(r"episodes finished: \d+", out), out
    served = re.search(r"server: (\d+) requests, at most (\d+) at once", out)
    assert served is not None, out
    requests, peak = int(served.group(1)), int(served.group(2))
    assert requests == 12 * (30 + 1)  # one reset and 30 steps each, nothing lost or repeated
    assert 1 <= peak <= 4, out


@pytest.mark.parametrize("loop", ["asyncio", "trio"])
def test_tcp_example_server_speaks_json_lines_on_its_own(loop: str) -> None:
    """``--serve`` runs only the simulator; a plain blocking socket can drive it, and SIGTERM
    stops it cleanly."""
    server = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "async_env_tcp.py"), "--serve", "--loop", loop],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert server.stdout is not None
        banner = server.stdout.readline()
        listening = re.search(r"listening on 127\.0\.0\.1:(\d+)", banner)
        assert listening is not None, banner
        address = ("127.0.0.1", int(listening.group(1)))
        with (
            socket.create_connection(address, timeout=10) as conn,
            conn.makefile("rwb") as lines,
        ):

            def ask(request: bytes) -> dict[str, Any]:
                lines.write(request + b"\n")
                lines.flush()
                reply: dict[str, Any] = json.loads(lines.readline())
                return reply

            first = ask(b'{"op": "reset", "seed": 7}')
            assert first.keys() == {"obs"}
            assert ask(b'{"op": "reset", "seed": 7}') == first  # seeded: the same start
            x, v = first["obs"]
            assert -1 <= x <= 1 and v == 0
            step = ask(b'{"op": "step", "force": 1.0}')  # v' = 0.9 v + 0.1 f, x' = x + 0.1 v'
            assert step["obs"] == pytest.approx([x + 0.01, 0.1])
            assert step["reward"] == pytest.approx(-abs(x + 0.01))
            assert isinstance(step["done"], bool)
            assert "error" in ask(b"not json")
            assert "error" in ask(b'{"op": "teleport"}')
            assert "obs" in ask(b'{"op": "step", "force": 0.0}')  # still serving after errors
    finally:
        server.terminate()
        _, errors = server.communicate(timeout=10)
    assert server.returncode == 0 and "Traceback" not in errors, errors


def test_ray_cluster_example_recovers_from_a_dead_node() -> None:
    # Both loops: tests/backends/test_ray_cluster.py; the example builds its own cluster.
    out = run_example(str(EXAMPLES / "ray_cluster.py"), "--num-envs", "4", "--steps", "20",
                      "--kill-node")
    before = re.search(r"sub-envs per node: \{'(\w+)': 4\}", out)
    after = re.search(r"sub-envs per node after recovery: \{'(\w+)': 4\}", out)
    assert before is not None and after is not None, out
    assert before.group(1) != after.group(1)  # on the replacement node now
    assert "episodes cut by the node's death (truncated): 4; restarted sub-envs: 4" in out
    # Each sub-env restarted once; a restart that lands on the dead node before Ray declares
    # it dead needs one more, so the total may exceed 4 (never fall short of it).
    restarts = re.search(r"statistics: restarts=(\d+)", out)
    assert restarts is not None and int(restarts.group(1)) >= 4, out


@pytest.mark.parametrize(("backend", "loop"), [("process", "asyncio"), ("thread", "trio")])
def test_multiagent_example_counts_present_and_absent_agents(backend: str, loop: str) -> None:
    out = run_example(str(EXAMPLES / "multiagent.py"), "--num-envs", "3", "--steps", "120",
                      "--max-cycles", "40", "--backend", backend, "--loop", loop)
    assert f"3 envs x 4 agents ['archer_0', 'archer_1', 'knight_0', 'knight_1'] on the " \
           f"{backend} backend" in out, out
    for face in ("async", "sync"):
        line = next(line for line in out.splitlines() if line.startswith(f"{face}:"))
        # 120 steps of 40-cycle episodes: every sub-env finished at least two episodes.
        finished = re.search(r"(\d+) episodes finished", line)
        assert finished is not None and int(finished.group(1)) >= 6, line
        rows = re.search(r"([\d,]+) of ([\d,]+) agent rows", line)
        assert rows is not None and rows.group(2) == f"{120 * 3 * 4:,}", line


def test_double_buffering_example_measures_both_loops() -> None:
    out = run_example(str(EXAMPLES / "double_buffering.py"), "--num-envs", "8", "--env-ms", "1",
                      "--seconds", "0.5")
    rates = [float(rate) for rate in re.findall(r"([\d.]+) vector steps/s", out)]
    assert len(rates) == 2 and all(rate > 0 for rate in rates), out
    speedup = re.search(r"speedup: ([\d.]+)x", out)
    assert speedup is not None and float(speedup.group(1)) == pytest.approx(
        rates[1] / rates[0], abs=0.01), out


def test_dropin_example_reproduces_gymnasium_exactly() -> None:
    out = run_example(str(EXAMPLES / "dropin_gymnasium.py"), "--num-envs", "4", "--steps", "300")
    assert "identical trajectories: True" in out, out
    digests = re.findall(r"observations digest (\w+)", out)
    assert len(digests) == 2 and digests[0] == digests[1], out


def test_simulator_example_simulators_come_and_go_with_their_sub_envs() -> None:
    out = run_example(str(EXAMPLES / "simulator.py"), "--num-envs", "3", "--steps", "90")
    alive = re.findall(r"simulators alive per sub-env \[([\d, ]+)\]", out)
    assert alive and all(counts == "1, 1, 1" for counts in alive), out  # start, 2 restarts
    assert len(alive) == 3, out
    assert "2 restarts, 1 timeouts" in out, out
    # One simulator and one scratch directory per instance: 3 first, 2 restarted.
    assert "processes ended with their sub-envs: 5; cleanups run: 5, failed: 0" in out, out
    assert "after close: simulators alive 0" in out, out


@pytest.mark.parametrize("loop", ["asyncio", "trio"])
def test_agent_rollouts_example_masks_lost_members_and_leaks_no_lease(loop: str) -> None:
    """The GRPO loop under injected faults (tools that crash or hang): groups complete with
    their lost members masked out, every episode is counted once, no lease is left."""
    out = run_example(str(EXAMPLES / "agent_rollouts.py"), "--groups", "2", "--want", "6",
                      "--crash", "0.05", "--hang", "0.02", "--loop", loop)
    found = re.search(r"16 slots, groups of 8: (\d+) turns, complete groups: (\d+) \((\d+) "
                      r"episodes scored\), dropped groups: (\d+); episodes ended: (\d+) "
                      r"\(counted by aiovec: (\d+)\), lost: (\d+) \(masked out\), timed out: "
                      r"(\d+); leases left: (\d+)", out)
    assert found is not None, out
    turns, groups, scored, _, ended, counted, lost, _, left = map(int, found.groups())
    # It stops sending at 6 complete groups (episodes still owed then may complete more).
    assert groups >= 6 and turns >= ended, out
    assert ended == counted, out  # every episode counted once, as aiovec counts them
    # About a fifth of the episodes are lost (3 tool calls each at 7 %): some certainly are.
    assert lost > 0 and scored <= 8 * groups and scored + lost <= ended, out
    assert left == 0, out  # every sandbox lease deleted, by its env or its cleanup


@pytest.mark.parametrize("loop", ["asyncio", "trio"])
def test_per_request_example_counts_every_episode_both_ways(loop: str) -> None:
    out = run_example(str(EXAMPLES / "per_request.py"), "--num-envs", "16", "--episodes", "60",
                      "--batch-size", "4", "--loop", loop)
    lines = re.findall(r"([\d.]+) episodes/s  \(finished (\d+), lost (\d+)\)", out)
    assert len(lines) == 2, out  # the per-request loop, then the batch loop
    for rate, finished, lost in lines:
        assert float(rate) > 0 and int(finished) + int(lost) >= 60, out
    assert "per request (follow=True)" in out
