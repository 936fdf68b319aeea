"""``benchmarks/agentic.py`` measures what it says: its simulated policy batches as specified,
every contender plays the same episodes, and a smoke run reports a table per variant with every
contender, X* with its formulas and a PASS/MISS line per target. No figure is asserted."""

from __future__ import annotations

import asyncio
import importlib
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, ModuleType]]:
    """The benchmark's modules, imported as its scripts import each other (by plain name)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    names = ("agentic", "agentic_contenders", "agentic_workload", "harness")
    yield {name: importlib.import_module(name) for name in names}
    for name in (*names, "async_native_core", "bench_envs"):
        sys.modules.pop(name, None)


def test_the_policy_serves_fifo_in_batches_of_at_most_b(bench: dict[str, ModuleType]) -> None:
    workload_module = bench["agentic_workload"]
    workload = workload_module.Workload(num_groups=1, policy_base=0.02,
                                        policy_per_request=0.001, policy_batch=4)
    chats = [({"role": "user", "content": str(i)},) * (i + 1) for i in range(10)]

    async def main() -> tuple[list[str], float, int]:
        policy = workload_module.PolicyServer(workload)
        server = asyncio.create_task(policy.serve())
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            answers = await asyncio.gather(policy.generate_batch(chats[:7]),
                                           *(policy.generate(chat) for chat in chats[7:]))
        finally:
            server.cancel()
        return [*answers[0], *answers[1:]], loop.time() - started, policy.batches

    answers, elapsed, batches = asyncio.run(main())
    assert answers == [workload_module.respond(chat) for chat in chats]
    assert batches == 3  # 4 + 4 + 2, in arrival order
    served_in = sum(workload.batch_seconds(size) for size in (4, 4, 2))
    assert elapsed >= 0.9 * served_in  # a batch of n takes a + b·n (a lower bound only)


def test_both_env_classes_and_the_task_loops_play_the_same_episodes(
        bench: dict[str, ModuleType]) -> None:
    """The coroutine env, the plain env (the process backend's) and ``episode_for`` (the
    task-per-episode contenders') give slot s the same k-th episode: same turns, same chats."""
    workload_module = bench["agentic_workload"]
    workload = workload_module.Workload(num_groups=2, tool_median=0.0005)
    action = workload_module.ACTIONS[3]

    async def play_async(slot: int) -> list[tuple]:
        env = workload_module.AsyncChatEnv(workload, slot)
        chats = []
        for _ in range(3):
            chat, _ = await env.reset()
            done = False
            while not done:
                chat, _, done, _, _ = await env.step(action)
            chats.append(chat)
        return chats

    def play_sync(slot: int) -> list[tuple]:
        env = workload_module.ChatEnv(workload, slot)
        chats = []
        for _ in range(3):
            chat, _ = env.reset()
            done = False
            while not done:
                chat, _, done, _, _ = env.step(action)
            chats.append(chat)
        return chats

    async def play_episodes(slot: int) -> list[tuple]:
        chats = []
        for k in range(3):
            episode = workload_module.episode_for(workload, slot, k)
            done = False
            while not done:
                chat, done = await workload_module.tool_call(episode, action)
            chats.append(chat)
        return chats

    for slot in (0, 7, 8):  # two members of group 0, and group 1
        chats = asyncio.run(play_async(slot))
        assert play_sync(slot) == chats == asyncio.run(play_episodes(slot))
        assert all(chat[-1]["role"] == "tool" for chat in chats)
    group_turns = [[len(chat) for chat in asyncio.run(play_async(slot))] for slot in range(8)]
    assert all(turns == group_turns[0] for turns in group_turns)  # a group shares its tasks


@pytest.mark.slow
@pytest.mark.timeout(300)  # past the run's own bound (240 s), not pytest-timeout's 120
def test_a_smoke_run_reports_every_variant_contender_and_target(
        bench: dict[str, ModuleType], tmp_path: Path) -> None:
    report = tmp_path / "agentic.md"
    subprocess.run([sys.executable, str(BENCHMARKS / "agentic.py"), "--quick", "--seconds",
                    "0.5", "--output", str(report)], capture_output=True, text=True,
                   timeout=240, check=True)
    text = report.read_text()
    agentic = bench["agentic"]
    tables = bench["harness"].read_tables(text)
    limits = dict(re.findall(r"^## ([\w-]+):.*\n\nX\* = ([\d,.]+) episodes/s", text, re.M))
    assert list(limits) == list(agentic.VARIANTS)
    for name, variant in agentic.VARIANTS.items():
        assert re.search(rf"## {name}:(.|\n)*?- policy-bound: B / \(a \+ b·B\)", text)
        rows = tables[f"Measured {name} (medians):"]
        assert [row["contender"] for row in rows] == list(variant.contenders)
        x_star = float(limits[name].replace(",", ""))
        for row in rows:
            rate = float(row["episodes/s"].replace(",", ""))  # not an error row
            assert float(row["agent turns/s"].replace(",", "")) > 0, row  # it ran
            assert float(row["% of X*"].removesuffix("%")) == pytest.approx(
                100 * rate / x_star, abs=1)
            assert 0 < float(row["mean batch / B"]) <= 1
            latencies = [row[column] for column in ("p50 latency", "p99 latency")]
            if latencies == ["—", "—"]:  # a loaded machine ended no episode in the window
                assert rate == 0, row
            else:
                p50, p99 = (float(cell.removesuffix(" s")) for cell in latencies)
                assert 0 < p50 <= p99
            assert row["orchestrator CPU"].endswith("%")
    checks = re.findall(r"^(PASS|MISS|n/a) +([\w-]+): ", text, re.M)
    assert [variant for _, variant in checks] == ["base", "base", "base", "stress",
                                                  "cpu-heavy", "cpu-heavy", "cpu-and-wait"]
    # n/a: no figure to compare with, which only a contender that ended no episode gives.
    idle = {name for name in agentic.VARIANTS if any(
        row["p50 latency"] == "—" for row in tables[f"Measured {name} (medians):"])}
    assert all(verdict in ("PASS", "MISS") or variant in idle for verdict, variant in checks)
