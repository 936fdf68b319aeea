"""Text of any Unicode and observations that are Python objects (a chat: a list of message
dicts in an ``aiovec.ObjectSpace``) on every backend, lockstep and first-ready: exactly what
Gymnasium's ``SyncVectorEnv`` gives, copied out as it copies them (the caller owns what it
gets), and batched spaces that share their rows."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.vector import utils as gym_utils

import aiovec
from tests.backends_matrix import ALL_BACKENDS, LOCAL_BACKENDS, for_backend
from tests.helpers import assert_identical
from tests.object_envs import (
    ENV_KINDS,
    TEXT_SPACE,
    UNUSUAL,
    ChatEnv,
    CountingText,
    CountingTextEnv,
    FailingChatEnv,
    TokenBufferEnv,
    TokenDictEnv,
    actions_for,
)

pytestmark = pytest.mark.anyio

NUM_ENVS = 3
STEPS = 12
KINDS = list(ENV_KINDS)
MODES = [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP]


def options_for(backend: str) -> dict[str, Any]:
    return {"num_workers": 2} if backend in ("process", "ray") else {}


def reference(kind: str, mode: AutoresetMode, seed: int) -> list[tuple[Any, ...]]:
    """Gymnasium's rollout: a reset, then ``STEPS`` steps of ``actions_for``."""
    envs = SyncVectorEnv([ENV_KINDS[kind]] * NUM_ENVS, autoreset_mode=mode)
    try:
        records: list[tuple[Any, ...]] = [envs.reset(seed=seed)]
        records += [envs.step(actions_for(kind, step, NUM_ENVS)) for step in range(STEPS)]
        return records
    finally:
        envs.close()


def check_exercised(records: list[tuple[Any, ...]], kind: str) -> None:
    """The rollout ended episodes (each new one starts with every unusual character)."""
    assert sum(int(record[2].sum()) for record in records[1:]) >= NUM_ENVS, "few episodes"
    first = records[0][0][0] if kind == "text" else records[0][0][0][1]["content"]
    assert UNUSUAL in first
    if kind == "chat":
        assert all(type(chat) is list for record in records for chat in record[0])


@pytest.mark.parametrize("backend", ALL_BACKENDS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", MODES, ids=lambda mode: mode.value)
async def test_lockstep_rollouts_match_sync_vector_env(backend: str, kind: str,
                                                       mode: AutoresetMode) -> None:
    seed = 7 + KINDS.index(kind)
    expected = reference(kind, mode, seed)
    factories = for_backend(backend, [ENV_KINDS[kind]] * NUM_ENVS)
    async with aiovec.AsyncVectorEnv(factories, backend=backend, autoreset_mode=mode,
                                     **options_for(backend)) as envs:
        assert envs.single_observation_space == ENV_KINDS[kind].observation_space
        assert envs.observation_space == gym_utils.batch_space(
            envs.single_observation_space, NUM_ENVS)
        actual = [await envs.reset(seed=seed)]
        actual += [await envs.step(actions_for(kind, step, NUM_ENVS)) for step in range(STEPS)]
    # The batches kept from earlier steps are the caller's: later steps changed none of them.
    assert_identical(actual, expected)
    check_exercised(expected, kind)


@pytest.mark.parametrize("backend", ALL_BACKENDS)
@pytest.mark.parametrize("kind", KINDS)
async def test_first_ready_batches_are_each_sub_env_s_own_results(backend: str,
                                                                  kind: str) -> None:
    """Random sends and batch sizes: each row is what that sub-env gives at that step in
    ``SyncVectorEnv``'s rollout, and stays so (later steps do not change a received row)."""
    seed, draw = 11, random.Random(KINDS.index(kind))
    expected = reference(kind, AutoresetMode.NEXT_STEP, seed)
    factories = for_backend(backend, [ENV_KINDS[kind]] * NUM_ENVS)
    steps_done = [0] * NUM_ENVS
    received: list[tuple[int, int, tuple[Any, ...]]] = []
    async with aiovec.AsyncVectorEnv(factories, backend=backend,
                                     **options_for(backend)) as envs:
        await envs.reset(seed=seed)
        owed: set[int] = set()
        while min(steps_done) < STEPS or owed:
            idle = [index for index in range(NUM_ENVS)
                    if index not in owed and steps_done[index] < STEPS]
            if idle:
                env_ids = sorted(draw.sample(idle, draw.randint(1, len(idle))))
                envs.send(tuple(actions_for(kind, steps_done[index], NUM_ENVS)[index]
                                for index in env_ids), env_ids)
                owed.update(env_ids)
            batch = await envs.recv(batch_size=draw.randint(1, len(owed)))
            assert type(batch.observations) is tuple
            assert len(batch.observations) == len(batch.env_ids)
            for row, index in enumerate(batch.env_ids.tolist()):
                owed.discard(index)
                steps_done[index] += 1
                received.append((index, steps_done[index], (
                    batch.observations[row], float(batch.rewards[row]),
                    bool(batch.terminations[row]), bool(batch.truncations[row]))))
    assert len(received) == NUM_ENVS * STEPS
    for index, step, got in received:
        want = expected[step]
        assert_identical(got, (want[0][index], float(want[1][index]), bool(want[2][index]),
                               bool(want[3][index])), f"sub-env {index}, step {step}")


@pytest.mark.parametrize("backend", ["inline", "thread", "async"])
async def test_copy_false_hands_out_the_objects_the_sub_envs_returned(backend: str) -> None:
    """The cheap path: no copy, so a chat the sub-env keeps appending to grows in the
    caller's hands too (the default, ``copy=True``, is checked by the rollouts above)."""
    factories = for_backend(backend, [ChatEnv] * NUM_ENVS)
    async with aiovec.AsyncVectorEnv(factories, backend=backend, copy=False) as envs:
        observations, _ = await envs.reset(seed=0)
        first = observations[0]
        observations, *_ = await envs.step(actions_for("chat", 0, NUM_ENVS))
        assert observations[0] is first and len(first) == 4
        envs.send(actions_for("chat", 1, 1), [0])
        batch = await envs.recv()
        assert batch.observations[0] is first and len(first) == 6


@pytest.mark.parametrize("backend", LOCAL_BACKENDS)
async def test_received_chats_are_the_caller_s_on_every_backend(backend: str) -> None:
    """``copy=True``: the chats of a first-ready batch are the caller's. The sub-env goes on
    appending to its own list (in process) without changing them; a later batch's objects are
    others; a failed sub-env's row, its last chat repeated, is a copy of it, not the object
    the caller already holds."""
    factories = for_backend(backend, [FailingChatEnv] * 2)
    async with aiovec.AsyncVectorEnv(factories, backend=backend,
                                     **options_for(backend)) as envs:
        await envs.reset(seed=0)
        envs.send(("a", "b"), [0, 1])
        first = await envs.recv(batch_size=2)
        chats = dict(zip(first.env_ids.tolist(), first.observations))
        kept = copy.deepcopy(chats)
        envs.send(("c", "fail"), [0, 1])
        with pytest.raises(aiovec.SubEnvErrorGroup) as raised:
            await envs.recv(batch_size=2)
        later = raised.value.partial_result
        rows = dict(zip(later.env_ids.tolist(), later.observations))
        assert chats == kept, "a received chat changed"
        assert len(rows[0]) == len(chats[0]) + 2 and rows[0] is not chats[0]
        assert rows[1] == chats[1] and rows[1] is not chats[1]
        rows[1].append({"role": "caller"})
        assert chats == kept


def tokens_of(observations: Any) -> list[Any]:
    """The token buffers in a batch of ``TokenBufferEnv`` or ``TokenDictEnv`` observations."""
    return list(observations["tokens"] if isinstance(observations, dict) else observations)


@pytest.mark.parametrize("backend", ALL_BACKENDS)
@pytest.mark.parametrize("env", [TokenBufferEnv, TokenDictEnv], ids=["object", "in-dict"])
async def test_arrays_inside_objects_are_copied_out_by_recv_as_by_step(
        backend: str, env: type[TokenBufferEnv]) -> None:
    """An env that returns a buffer it updates in place: neither a first-ready batch nor a
    full one changes when the sub-env steps again (``copy=True``), and the caller may write
    to the arrays it got (Ray's own are read-only views of its object store)."""
    factories = for_backend(backend, [env] * 2)
    async with aiovec.AsyncVectorEnv(factories, backend=backend,
                                     **options_for(backend)) as envs:
        await envs.reset(seed=0)
        envs.send((1, 2), [0, 1])
        received = await envs.recv(batch_size=2)
        observations, *_ = await envs.step((1, 1))
        stepped = tokens_of(observations)
        envs.send((1, 1), [0, 1])
        await envs.recv(batch_size=2)
        await envs.step((1, 1))
        rows = dict(zip(received.env_ids.tolist(), tokens_of(received.observations)))
        assert {index: row.tolist() for index, row in rows.items()} == {0: [1] * 4,
                                                                         1: [2] * 4}
        assert [row.tolist() for row in stepped] == [[2] * 4, [3] * 4]
        assert all(row.flags.writeable for row in [*rows.values(), *stepped])


async def test_thousands_of_text_envs_share_one_space_per_batch() -> None:
    """4,096 sub-envs with a wide-charset Text: the batched spaces share their rows, and
    first-ready batches of many sizes copy the space a handful of times, not once per row."""
    count = 4096
    CountingText.copies = 0
    async with aiovec.AsyncVectorEnv([CountingTextEnv] * count, backend="inline") as envs:
        for batched in (envs.observation_space, envs.action_space):
            assert len(batched.spaces) == count
            assert all(row is batched.spaces[0] for row in batched.spaces)
            assert batched.spaces[0] == TEXT_SPACE
        await envs.reset(seed=0)
        sizes = [1, 2, 3, 5, 8, 13, 256]
        start = 0
        for size in sizes:
            env_ids = list(range(start, start + size))
            envs.send(("é" * 3,) * size, env_ids)
            batch = await envs.recv(batch_size=size)
            assert batch.observations == ("é" * 3 + "!",) * size
            start += size
    # One for each batched space, the full batch's action checker, and one checker per size.
    assert CountingText.copies == 3 + len(sizes)


def test_the_sync_shim_carries_chats_as_gymnasium_does() -> None:
    expected = reference("chat", AutoresetMode.NEXT_STEP, 3)
    shim = aiovec.VectorEnv([ChatEnv] * NUM_ENVS, backend="process", num_workers=2)
    try:
        actual = [shim.reset(seed=3)]
        actual += [shim.step(actions_for("chat", step, NUM_ENVS)) for step in range(STEPS)]
    finally:
        shim.close()
    assert_identical(actual, expected)

