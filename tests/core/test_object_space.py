"""``aiovec.ObjectSpace`` and aiovec's one ``batch_space``: batched spaces equal to Gymnasium's,
made without a copy of the space per row; and what copying observations out costs."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import utils as gym_utils

import aiovec
from aiovec._core._batching import (
    TUPLE_OF_VALUES,
    batch_differing_spaces,
    batch_space,
    batches_into_rows,
    concatenate_afresh,
    copy_batch,
    take_rows,
)
from aiovec._core._observations import copy_observations
from tests.helpers import assert_identical
from tests.object_envs import WIDE_CHARSET, ChatEnv, CountingText


def draw_words(rng: np.random.Generator) -> str:
    """``ObjectSpace(str, sampler=draw_words)``'s values (a module-level function: pickles)."""
    return "".join(WIDE_CHARSET[int(index)] for index in rng.integers(0, 700, 5))


WIDE_TEXT = spaces.Text(4096, charset=WIDE_CHARSET)
SPACES: dict[str, spaces.Space[Any]] = {
    "box": spaces.Box(-1, 1, (2, 3), np.float32),
    "discrete": spaces.Discrete(5, start=2),
    "multi-discrete": spaces.MultiDiscrete([2, 3]),
    "multi-binary": spaces.MultiBinary(4),
    "text": WIDE_TEXT,
    "sequence": spaces.Sequence(spaces.Discrete(3)),
    "graph": spaces.Graph(spaces.Box(0, 1, (2,)), spaces.Discrete(3)),
    "one-of": spaces.OneOf([spaces.Discrete(2), spaces.Box(0, 1, (1,))]),
    "object": aiovec.ObjectSpace(list),
    "dict": spaces.Dict({"prompt": WIDE_TEXT, "turn": spaces.Discrete(16),
                         "nested": spaces.Tuple([spaces.Text(3), spaces.Box(0, 1)])}),
    "tuple": spaces.Tuple([aiovec.ObjectSpace(), spaces.MultiBinary(2)]),
}
ROWS = ("text", "sequence", "graph", "one-of", "object")


def row_spaces(batched: spaces.Space[Any]) -> list[spaces.Tuple]:
    """The Tuples of rows inside a batched space."""
    if isinstance(batched, spaces.Dict):
        return [row for child in batched.spaces.values() for row in row_spaces(child)]
    if isinstance(batched, spaces.Tuple):
        if batched.spaces and batches_into_rows(batched.spaces[0]) and len(
                {type(child) for child in batched.spaces}) == 1:
            return [batched]
        return [row for child in batched.spaces for row in row_spaces(child)]
    return []


@pytest.mark.parametrize("name", SPACES)
@pytest.mark.parametrize("n", [1, 3])
def test_batched_spaces_equal_gymnasium_s_and_share_their_rows(name: str, n: int) -> None:
    space = SPACES[name]
    ours, theirs = batch_space(space, n), gym_utils.batch_space(space, n)
    assert ours == theirs
    assert type(ours) is type(theirs)
    for rows in row_spaces(ours):
        assert len(rows.spaces) == n
        assert all(row is rows.spaces[0] for row in rows.spaces)  # one space, shared
        assert rows.spaces[0] is not space
    if name in ROWS:
        assert batches_into_rows(space) and row_spaces(ours)
    elif name in ("box", "discrete", "multi-discrete", "multi-binary"):
        assert not batches_into_rows(space)
    # Gymnasium's vector utilities batch values of it as the batched space holds them.
    values = values_of(name, n)
    batch = gym_utils.concatenate(space, values, gym_utils.create_empty_array(space, n))
    assert ours.contains(batch)
    assert_identical(list(gym_utils.iterate(ours, batch)), values)


def values_of(name: str, n: int) -> list[Any]:
    """``n`` values of ``SPACES[name]``."""
    if name == "object":
        return [[index, "é"] for index in range(n)]
    if name == "tuple":
        return [([index], np.array([0, 1], np.int8)) for index in range(n)]
    space = SPACES[name]
    space.seed(n)
    return [space.sample() for _ in range(n)]


@pytest.mark.parametrize("name", SPACES)
def test_a_fresh_batch_is_gymnasium_s_concatenation(name: str) -> None:
    """``concatenate_afresh`` (first-ready batches) against Gymnasium's concatenate into a
    new empty array; a top-level tuple of rows skips the empty array."""
    space, values = SPACES[name], values_of(name, 3)
    expected = gym_utils.concatenate(space, values, gym_utils.create_empty_array(space, 3))
    assert_identical(concatenate_afresh(space, values), expected)
    skips = gym_utils.concatenate.dispatch(type(space)) is TUPLE_OF_VALUES
    assert skips == (name in ROWS)


def test_a_batch_of_4096_text_rows_copies_the_space_once_not_per_row() -> None:
    space = CountingText(4096, charset=WIDE_CHARSET)
    CountingText.copies = 0
    batched = batch_space(space, 4096)
    assert CountingText.copies == 1 and len(batched.spaces) == 4096
    CountingText.copies = 0
    assert batch_space(space, 64) == gym_utils.batch_space(space, 64)
    assert CountingText.copies >= 1 + 64  # Gymnasium's copy per row: what is avoided


def test_sampling_the_batch_leaves_the_space_alone_and_rows_differ() -> None:
    space = spaces.Text(8, charset=WIDE_CHARSET, seed=5)
    before = copy.deepcopy(space.np_random.bit_generator.state)
    batched = batch_space(space, 6)
    sample = batched.sample()
    assert space.np_random.bit_generator.state == before
    assert len(set(sample)) == 6 and batched.contains(sample)
    # The shared row is seeded as Gymnasium seeds its first row: row 0 samples alike.
    assert sample[0] == gym_utils.batch_space(space, 6).sample()[0]
    batched.seed(11)
    assert batched.sample() == (batched.seed(11), batched.sample())[1]


@pytest.mark.parametrize("name", ["text", "object", "dict", "box"])
def test_differing_spaces_batch_as_gymnasium_s(name: str) -> None:
    space = SPACES[name]
    others = [space, space, copy.deepcopy(space)]
    ours = batch_differing_spaces(others)
    assert ours == gym_utils.batch_differing_spaces(others)
    for rows in row_spaces(ours):
        assert rows.spaces[0] is rows.spaces[1] is not rows.spaces[2]  # one copy per object
        assert rows.spaces[0] is not space


def test_take_rows_picks_rows_of_arrays_and_of_tuples_of_rows() -> None:
    space = SPACES["dict"]
    batch = {"nested": (("x", "y", "z"), np.array([[0.1], [0.2], [0.3]], np.float32)),
             "prompt": ("a", "b", "c"), "turn": np.array([1, 2, 3])}  # the space's order
    taken = take_rows(batch, [2, 0], space)
    assert_identical(taken, {"nested": (("z", "x"), np.array([[0.3], [0.1]], np.float32)),
                             "prompt": ("c", "a"), "turn": np.array([3, 1])})
    assert take_rows(batch, slice(1, None), space)["prompt"] == ("b", "c")


# ---------------------------------------------------------------------------- ObjectSpace


def test_object_space_contains_instances_of_its_types() -> None:
    anything, chats = aiovec.ObjectSpace(), aiovec.ObjectSpace(list)
    text_or_ids = aiovec.ObjectSpace((str, list))
    assert all(anything.contains(value) for value in ("é😀", [1], {"a": None}, None, 3.5))
    assert chats.contains([{"role": "user", "content": "hi"}]) and not chats.contains("hi")
    assert text_or_ids.contains("中文") and text_or_ids.contains([1, 2])
    assert not text_or_ids.contains({"a": 1})
    assert "x" in aiovec.ObjectSpace(str)
    with pytest.raises(TypeError, match="classes"):
        aiovec.ObjectSpace(["str"])  # type: ignore[list-item]
    assert repr(anything) == "ObjectSpace()" and repr(chats) == "ObjectSpace(list)"
    assert repr(text_or_ids) == "ObjectSpace((str, list))"
    assert not chats.is_np_flattenable and chats.shape is None and chats.dtype is None


def test_object_spaces_are_equal_by_their_types_and_pickle() -> None:
    space = aiovec.ObjectSpace((str, list), sampler=draw_words, seed=3)
    assert space == aiovec.ObjectSpace((str, list)) != aiovec.ObjectSpace(str)
    assert space != spaces.Text(5)
    again = pickle.loads(pickle.dumps(space))
    assert again == space and again.sampler is draw_words
    assert again.sample() == space.sample()  # the generator's state travels too
    assert type(space).__module__ == "aiovec"


def test_object_space_samples_with_its_sampler_only() -> None:
    space = aiovec.ObjectSpace(str, sampler=draw_words)
    space.seed(7)
    first = [space.sample() for _ in range(3)]
    space.seed(7)
    assert [space.sample() for _ in range(3)] == first and len(set(first)) == 3
    with pytest.raises(ValueError, match="mask"):
        space.sample(mask=np.ones(3, np.int8))
    with pytest.raises(NotImplementedError, match="sampler="):
        aiovec.ObjectSpace(list).sample()
    batched = batch_space(space, 4)
    assert len(set(batched.sample())) == 4


def test_gymnasium_s_sync_vector_env_runs_object_observations() -> None:
    """Registered with Gymnasium's vector utilities: its own vector env batches them."""
    envs = gym.vector.SyncVectorEnv([ChatEnv] * 3)
    try:
        assert envs.observation_space == batch_space(ChatEnv.observation_space, 3)
        observations, _ = envs.reset(seed=1)
        assert type(observations) is tuple and len(observations) == 3
        assert all(chat[0]["role"] == "system" for chat in observations)
        observations, *_ = envs.step(("a", "b", "c"))
        assert [chat[-2]["content"] for chat in observations] == ["a", "b", "c"]
    finally:
        envs.close()
    assert gym_utils.create_empty_array(ChatEnv.observation_space, 2) == (None, None)
    assert gym_utils.batch_differing_spaces([aiovec.ObjectSpace(str)] * 2) == batch_space(
        aiovec.ObjectSpace(str), 2)


# ---------------------------------------------------------------------------- copying out


def test_copies_keep_immutable_values_and_copy_the_rest_as_deepcopy_would() -> None:
    text = ("héllo", "中文😀", "")
    assert copy_observations(text) is text  # nothing to copy: no copy at all
    chat = [{"role": "user", "content": "hi", "ids": [1, 2], "meta": {"t": (1, [2])}}]
    batch = {"chat": (chat, chat), "pixels": np.arange(4), "scalar": np.float32(2.5),
             "raw": b"\x00\x01", "none": None}
    copied = copy_observations(batch)
    assert_identical(copied, copy.deepcopy(batch))
    assert copied["chat"][0] is not chat and copied["chat"][0][0]["ids"] is not chat[0]["ids"]
    assert copied["chat"][0][0]["meta"]["t"][1] is not chat[0]["meta"]["t"][1]
    assert copied["pixels"] is not batch["pixels"] and copied["raw"] is batch["raw"]


def test_a_fresh_batch_copies_its_rows_and_keeps_its_arrays() -> None:
    """``copy_batch`` follows the space: a batch's arrays were just made and are kept; the
    values of spaces batched into rows are the sub-envs' own, copied with every array inside
    (a token buffer an env updates in place)."""
    space = spaces.Dict({
        "pixels": spaces.Box(0, 1, (2,)),
        "tokens": aiovec.ObjectSpace(np.ndarray),
        "pair": spaces.Tuple((spaces.Discrete(3),
                              spaces.Sequence(spaces.Box(0, 9, (2,)), stack=True))),
    })
    tokens, steps = np.arange(3), np.zeros((2, 2), np.float32)
    values = [{"pixels": np.ones(2, np.float32), "tokens": tokens, "pair": (1, steps)}] * 2
    batch = concatenate_afresh(space, values)
    copied = copy_batch(space, batch)
    assert_identical(copied, batch)
    assert copied["pixels"] is batch["pixels"] and copied["pair"][0] is batch["pair"][0]
    assert all(row is not tokens for row in copied["tokens"])
    assert all(row is not steps for row in copied["pair"][1])
    tokens += 1
    steps += 1
    assert copied["tokens"][0].tolist() == [0, 1, 2]
    assert copied["pair"][1][1].tolist() == [[0, 0], [0, 0]]


def test_copies_of_deep_or_cyclic_objects_end_in_deepcopy() -> None:
    """Past a few dozen levels what is left is deep-copied whole: a cycle ends there."""
    deep: list[Any] = []
    inner = deep
    for _ in range(100):
        inner.append([])
        inner = inner[0]
    cyclic: list[Any] = [1]
    cyclic.append(cyclic)
    copied = copy_observations((deep, cyclic))
    assert copied[0] == deep and copied[0] is not deep
    level = copied[1]
    for _ in range(100):
        assert level is not cyclic and level[0] == 1
        level = level[1]
