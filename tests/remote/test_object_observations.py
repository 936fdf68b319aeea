"""Text of any Unicode and chats (lists of message dicts in an ``aiovec.ObjectSpace``) through
a real server on 127.0.0.1, in binary frames and in JSON: the remote client's spaces, lockstep
results and first-ready batches are a local ``AsyncVectorEnv``'s, value for value and type
for type."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

import aiovec
from aiovec._core._infos import merge_info
from aiovec._remote._replies import infos_of, rows_of
from aiovec._wire._convert import to_jsonable
from aiovec.remote import AsyncRemoteVectorEnv
from tests.helpers import assert_identical
from tests.object_envs import actions_for
from tests.serve.apps import ENVS
from tests.serve.conftest import Server

pytestmark = pytest.mark.anyio

NUM_ENVS = 3
STEPS = 8
#: Served env id → the kind of its actions (``actions_for``).
SERVED = {"Chat-v0": "chat", "ProcessChat-v0": "chat", "UnicodeText-v0": "text"}
ENCODINGS = ["binary", "json"]


def local_twin(env_id: str) -> aiovec.AsyncVectorEnv:
    """The served env's sub-envs here, checked as a served session checks actions."""
    return aiovec.AsyncVectorEnv([ENVS[env_id].env_fn] * NUM_ENVS, backend="thread",
                                 validate_actions=True)


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("env_id", SERVED)
async def test_lockstep_results_are_the_local_ones(serve: Any, env_id: str,
                                                   encoding: str) -> None:
    server: Server = serve("open")
    kind = SERVED[env_id]
    async with local_twin(env_id) as local, AsyncRemoteVectorEnv(
            server.url, env_id, NUM_ENVS, encoding=encoding) as remote:  # type: ignore[arg-type]
        assert remote.single_observation_space == local.single_observation_space
        assert remote.single_action_space == local.single_action_space
        assert remote.observation_space == local.observation_space
        records = []
        for envs in (local, remote):
            rollout = [await envs.reset(seed=5)]
            rollout += [await envs.step(actions_for(kind, step, NUM_ENVS))
                        for step in range(STEPS)]
            records.append(rollout)
    assert_identical(records[1], records[0])
    assert any(step[2].any() for step in records[0][1:])  # episodes ended and reset


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("env_id", SERVED)
async def test_first_ready_batches_are_the_local_ones(serve: Any, env_id: str,
                                                      encoding: str) -> None:
    """Random sends, received in batches of random sizes: each sub-env's rows are the ones
    it gives locally."""
    server: Server = serve("open")
    kind = SERVED[env_id]
    async with local_twin(env_id) as local, AsyncRemoteVectorEnv(
            server.url, env_id, NUM_ENVS, encoding=encoding) as remote:  # type: ignore[arg-type]
        results = []
        for envs in (local, remote):
            draw = random.Random(3)
            await envs.reset(seed=9)
            rows: dict[int, list[Any]] = {index: [] for index in range(NUM_ENVS)}
            for step in range(STEPS):
                order = list(range(NUM_ENVS))
                draw.shuffle(order)
                cut = draw.randint(1, NUM_ENVS)
                for env_ids in (sorted(order[:cut]), sorted(order[cut:])):
                    if env_ids:
                        actions = actions_for(kind, step, NUM_ENVS)
                        envs.send(tuple(actions[index] for index in env_ids), env_ids)
                received = 0
                while received < NUM_ENVS:
                    batch = await envs.recv(batch_size=draw.randint(1, NUM_ENVS - received))
                    assert type(batch.observations) is tuple
                    for row, index in enumerate(batch.env_ids.tolist()):
                        rows[index].append((batch.observations[row], float(batch.rewards[row]),
                                            bool(batch.terminations[row])))
                    received += len(batch.env_ids)
            results.append(rows)
    assert_identical(results[1], results[0])


def test_rows_of_infos_decoded_from_json_are_those_rows() -> None:
    """A stashed batch cut down to some rows (a reset dropped the others): infos that JSON
    could not make arrays of (strings) are lists of rows, picked from like arrays."""
    infos: dict[str, Any] = {}
    for env_index, info in enumerate([{"name": "a", "score": 1.0}, {"name": "bé"},
                                      {"name": "c", "score": 3.0}]):
        merge_info(infos, info, env_index, 3)
    decoded = infos_of(json.loads(json.dumps(to_jsonable(infos), allow_nan=True)))
    picked = rows_of(decoded, [0, 2])
    assert picked["name"] == ["a", "c"] and picked["_name"].tolist() == [True, True]
    assert picked["score"].tolist() == [1.0, 3.0]
