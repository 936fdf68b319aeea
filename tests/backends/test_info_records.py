"""Step infos through shared memory (``_process._info_records``): what a worker records and the
parent reads back is exactly what merging each sub-env's info gives, and anything that does not
fit a schema is left to the pickled path."""

from __future__ import annotations

import functools
import os
import signal
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import aiovec
from aiovec._backends._process._info_records import (
    RECORD_BYTES,
    InfoRecorder,
    RecordSchema,
    schema_of,
)
from aiovec._core._infos import merge_info, splice_infos
from tests.envs import CountingEnv, FifoStepEnv, close_while_a_step_hangs
from tests.helpers import assert_identical

#: Values a recordable key may take (one kind per key and step across a run).
_SCALARS: list[Any] = [3, -2**62, 2.5, float("nan"), True, False, np.float64(0.25),
                       np.float32(-1.5), np.int64(-7), np.int32(4), np.uint8(5), np.uint64(2**63),
                       np.float16(0.5), np.complex128(1 + 2j), np.int8(-3)]


def _like(kind: Any, rng: np.random.Generator) -> Any:
    """A value of ``kind``'s type: ``kind`` itself, or another one drawn."""
    if rng.random() < 0.3:
        return kind
    if isinstance(kind, bool):
        return bool(rng.random() < 0.5)
    if isinstance(kind, complex | np.complexfloating):
        return type(kind)(complex(int(rng.integers(9)), 1))
    return type(kind)(int(rng.integers(100)))


def _extras(infos: list[dict[str, Any]], first_env: int = 0) -> list[tuple[int, Any]]:
    """What ``HostedEnvs.step`` returns for sub-envs that reported these infos."""
    return [(first_env + offset, (info, None)) for offset, info in enumerate(infos)]


#: Bytes a recorded value of each type takes (``merge_info``'s column dtype for it).
_RECORDED_SIZES: dict[type, int] = {
    int: 8, float: 8, bool: 1, np.int8: 1, np.int16: 2, np.int32: 4, np.int64: 8,
    np.uint8: 1, np.uint16: 2, np.uint32: 4, np.uint64: 8, np.float16: 2, np.float32: 4,
    np.float64: 8, np.complex64: 8, np.complex128: 16}


def _fits_one_schema(run: list[dict[str, Any]]) -> bool:
    """Whether a worker hosting sub-envs with these infos records them (a reference in plain
    Python, not the recorder's own checks): every sub-env reports the same keys in the same
    order, none like a mask or ``final_obs``, each value a scalar of a type with a column
    dtype, of the same type in every sub-env (a Python int within int64), all of them
    fitting a record, each aligned to its own size."""
    first = run[0]
    if not first:
        return False
    kinds = [type(value) for value in first.values()]
    if any(type(key) is not str or key.startswith("_") or key == "final_obs" for key in first):
        return False
    if any(kind not in _RECORDED_SIZES for kind in kinds):
        return False
    for info in run:
        if list(info) != list(first) or [type(value) for value in info.values()] != kinds:
            return False
        if any(type(value) is int and not -2**63 <= value < 2**63 for value in info.values()):
            return False
    end = 0
    for kind in kinds:
        size = _RECORDED_SIZES[kind]
        end = (end + size - 1) // size * size + size
    return end <= RECORD_BYTES


def _recorded(runs: list[list[dict[str, Any]]]) -> tuple[dict[str, Any], list[bool]]:
    """The batch's infos as the process backend builds them from records: each run recorded
    by its worker and read by the parent, or merged one by one where it did not fit; and
    which runs were recorded."""
    num_envs = sum(len(run) for run in runs)
    region = np.zeros((num_envs, RECORD_BYTES), np.uint8)
    batched: dict[str, Any] = {}
    recorded = []
    start = 0
    for run in runs:
        recorder = InfoRecorder(region[start:start + len(run)])
        if recorder.record(_extras(run, start)):
            assert recorder.schema is not None
            records = region[start:start + len(run)].view(
                recorder.schema.record_dtype()).reshape(len(run))
            splice_infos(batched, recorder.schema.read(records), start, num_envs)
            recorded.append(True)
        else:
            recorded.append(False)
            for offset, info in enumerate(run):
                if info:
                    merge_info(batched, info, start + offset, num_envs)
        start += len(run)
    return batched, recorded


def _merged(runs: list[list[dict[str, Any]]]) -> dict[str, Any]:
    infos = [info for run in runs for info in run]
    merged: dict[str, Any] = {}
    for row, info in enumerate(infos):
        if info:
            merge_info(merged, info, row, len(infos))
    return merged


@pytest.mark.parametrize("seed", range(300))
def test_recorded_infos_equal_merging_each_sub_env(seed: int) -> None:
    """Random runs of sub-envs, most sharing a schema (random keys, scalar kinds of many
    dtypes), some broken (a key missing, another kind, a nested dict, an array), some pickled
    with keys named like the others' masks or nesting where others record: the batch equals
    merging every sub-env's info, keys, order, dtypes, masks and values; and exactly the
    runs that fit one schema (``_fits_one_schema``) went through the records."""
    runs = _drawn_runs(seed)
    with warnings.catch_warnings():
        # Another run's kind cast into a column (complex into float, a big uint into int8)
        # warns the same either way; what matters is the values.
        warnings.simplefilter("ignore", RuntimeWarning)
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
        _compare(runs)


def _drawn_runs(seed: int) -> list[list[dict[str, Any]]]:
    """The infos of a few workers' runs of sub-envs, drawn from ``seed``."""
    rng = np.random.default_rng(seed)
    runs = []
    for _ in range(int(rng.integers(1, 4))):
        keys = [f"k{index}" for index in rng.permutation(6)[:int(rng.integers(1, 6))]]
        kinds = {key: _SCALARS[rng.integers(len(_SCALARS))] for key in keys}
        run = [{key: _like(kind, rng) for key, kind in kinds.items()}
               for _ in range(int(rng.integers(1, 6)))]
        if rng.random() < 0.3:
            broken = run[int(rng.integers(len(run)))]
            damage = int(rng.integers(4))
            if damage == 0:
                broken.pop(keys[0])
            elif damage == 1:  # another kind, one that merges into the column all the same
                broken[keys[0]] = 7.5 if type(broken[keys[0]]) is int else 7
            elif damage == 2:
                broken["nested"] = {"x": 1}
            else:
                broken["vec"] = np.zeros(2)
        runs.append(run)
    if rng.random() < 0.5:  # a run that is pickled: keys that meet the others' masks, nests
        clash = [{f"_k{int(rng.integers(6))}": _SCALARS[rng.integers(len(_SCALARS))],
                  f"k{int(rng.integers(6))}": {"x": 1} if rng.random() < 0.3 else "text"}
                 for _ in range(int(rng.integers(1, 3)))]
        runs.insert(int(rng.integers(len(runs) + 1)), clash)
    return runs


def _compare(runs: list[list[dict[str, Any]]]) -> None:
    try:
        expected = _merged(runs)
    except (ValueError, TypeError, OverflowError, AttributeError):  # NaN into ints, say
        with pytest.raises((ValueError, TypeError, OverflowError, AttributeError)):
            _recorded(runs)
        return
    actual, recorded = _recorded(runs)
    assert_identical(actual, expected)
    assert recorded == [_fits_one_schema(run) for run in runs]


def test_the_property_test_records_every_kind_it_draws() -> None:
    """The 300 seeds above record runs of every scalar kind they draw (else a kind the
    recorder dropped would go unnoticed), and leave some runs to pickling."""
    kinds: set[type] = set()
    pickled = 0
    for seed in range(300):
        runs = _drawn_runs(seed)
        for run in runs:
            if _fits_one_schema(run):
                kinds.update(type(value) for value in run[0].values())
            else:
                pickled += 1
    assert kinds == {type(value) for value in _SCALARS}
    assert pickled > 50


@pytest.mark.parametrize("value", _SCALARS, ids=lambda value: type(value).__name__)
def test_every_scalar_kind_is_recorded_in_its_merged_dtype(value: Any) -> None:
    """Two sub-envs reporting a scalar of one kind (beside a float): their infos go through
    the records, laid out in the dtype merging gives that key's column, and read back as
    merging gives them."""
    runs = [[{"x": 0.5, "k": value}, {"x": 1.5, "k": _like(value, np.random.default_rng(1))}]]
    actual, recorded = _recorded(runs)
    assert recorded == [True]
    schema = schema_of(runs[0][0])
    assert schema is not None
    assert schema.record_dtype().fields["f1"][0] == _merged(runs)["k"].dtype
    assert_identical(actual, _merged(runs))


def test_runs_recorded_with_differing_dtypes_splice_value_by_value() -> None:
    """An int key in one worker's records and a float one in the next: the batch keeps the
    first dtype, as merging gives it."""
    runs = [[{"k": 1}, {"k": 2}], [{"k": 2.75}, {"k": 0.5}]]
    actual, recorded = _recorded(runs)
    assert recorded == [True, True]
    assert_identical(actual, _merged(runs))
    assert actual["k"].tolist() == [1, 2, 2, 0]


@pytest.mark.parametrize("infos", [
    [{"a": 1}, {"a": 1.5}],  # another type
    [{"a": 1}, {"b": 1}],  # another key
    [{"a": 1, "b": 2}, {"b": 2, "a": 1}],  # another order
    [{"a": 1}, {}],  # a sub-env without infos
    [{"a": np.zeros(2)}, {"a": np.zeros(2)}],  # arrays
    [{"a": {"x": 1}}, {"a": {"x": 1}}],  # nested
    [{"_a": 1}, {"_a": 1}],  # a key like a mask
    [{"a": np.bool_(True)}, {"a": np.bool_(True)}],  # merged into an object column
    [{"a": "text"}, {"a": "text"}],
    [{"a": 2**70}, {"a": 1}],  # past int64: merging raises on it too
    [{1: 1}, {1: 1}],  # not a str key
    [{f"k{index}": 1.0 for index in range(17)}] * 2,  # more than a record holds
])
def test_infos_that_do_not_fit_a_schema_are_left_to_pickling(infos: list[Any]) -> None:
    recorder = InfoRecorder(np.zeros((len(infos), RECORD_BYTES), np.uint8))
    assert not recorder.record(_extras(infos))


def test_an_episode_end_or_a_failure_is_left_to_pickling() -> None:
    recorder = InfoRecorder(np.zeros((2, RECORD_BYTES), np.uint8))
    assert not recorder.record([(0, ({"a": 1}, {"final_obs": 0})), (1, ({"a": 1}, None))])
    assert not recorder.record([(0, ({"a": 1}, None)), (1, ValueError("a failure"))])
    assert not recorder.record(_extras([{"a": 1}]))  # not every hosted sub-env
    assert recorder.record(_extras([{"a": 1}, {"a": 2}]))


def test_a_new_schema_is_learned_and_announced_again() -> None:
    recorder = InfoRecorder(np.zeros((2, RECORD_BYTES), np.uint8))
    assert recorder.record(_extras([{"a": 1}, {"a": 2}]))
    first = recorder.schema
    recorder.announced = True
    assert recorder.record(_extras([{"a": 3}, {"a": 4}]))
    assert recorder.schema is first and recorder.announced
    assert recorder.record(_extras([{"a": 3.5}, {"a": 4.5}]))
    assert recorder.schema == RecordSchema(("a",), (float,)) and not recorder.announced


def test_schema_of_names_the_merged_dtypes() -> None:
    schema = schema_of({"x": 1.5, "n": 3, "f": np.float32(2), "b": True})
    assert schema == RecordSchema(("x", "n", "f", "b"), (float, int, np.float32, bool))
    dtype = schema.record_dtype()
    assert dtype.itemsize == RECORD_BYTES
    assert [dtype.fields[f"f{i}"][0] for i in range(4)] == [
        np.dtype(np.float64), np.dtype(np.int64), np.dtype(np.float32), np.dtype(np.bool_)]
    assert schema_of({}) is None


# ---------------------------------------------------------------------- through the backend

class ShiftingInfoEnv(gym.Env[np.ndarray, int]):
    """Infos whose keys and kinds change as the episode goes on (ints, floats, float32, an
    extra key, a nested dict now and then), the same across sub-envs most steps: records,
    schema changes and the pickled path all take turns."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, lag: int = 0) -> None:
        self.lag = lag
        self.elapsed = 0

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.elapsed = 0
        return self.np_random.uniform(-1, 1, 2).astype(np.float32), {"start": 1}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.elapsed += 1
        phase = (self.elapsed + (self.lag if self.elapsed % 7 == 0 else 0)) // 3 % 5
        value = float(self.np_random.random())
        info: dict[str, Any]
        if phase == 0:
            info = {"score": int(action) + self.elapsed, "noise": value}
        elif phase == 1:
            info = {"score": value, "noise": np.float32(value)}
        elif phase == 2:
            info = {"score": self.elapsed, "noise": value, "extra": bool(action)}
        elif phase == 3:
            info = {"nested": {"score": self.elapsed}}
        else:
            info = {"score": np.int32(self.elapsed)}
        obs = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        return obs, value, value < 0.05, self.elapsed >= 25, info


@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
@pytest.mark.parametrize("parent_worker", [False, True])
async def test_rollouts_with_recorded_infos_equal_the_inline_backend(
        anyio_backend: Any, no_leaks: None, mode: str, parent_worker: bool) -> None:
    """Bit for bit, infos included, against the inline backend; and the workers did answer
    through the records (their schemas were announced). Each worker's pair of sub-envs lags
    its own way, so that workers record with different schemas, or one records while another
    pickles, at some steps."""
    num_envs = 6
    factories = [functools.partial(ShiftingInfoEnv, lag=index // 2) for index in range(num_envs)]
    records = []
    schemas = []
    for options in ({"backend": "inline"},
                    {"backend": "process", "num_workers": 3, "parent_worker": parent_worker}):
        async with aiovec.AsyncVectorEnv(factories, autoreset_mode=mode, **options) as envs:
            envs.action_space.seed(3)
            record: list[Any] = [await envs.reset(seed=5)]
            for _ in range(80):
                record.append(await envs.step(envs.action_space.sample()))
            records.append(record)
            workers = getattr(envs._engine.backend, "_workers", [])
            schemas = [worker.info_schema for worker in workers]
    assert_identical(records[1], records[0])
    assert schemas and all(schema is not None for schema in schemas)


async def test_a_respawned_worker_announces_its_schema_afresh(anyio_backend: Any,
                                                              no_leaks: None) -> None:
    """A worker killed mid-rollout is replaced at the next reset; the new one records its
    infos after announcing their schema again (the parent's knowledge died with the old one):
    the rollout from that reset equals the inline backend's."""
    factories = [ShiftingInfoEnv] * 4

    async def rollout(envs: aiovec.AsyncVectorEnv) -> list[Any]:
        envs.action_space.seed(8)
        record: list[Any] = [await envs.reset(seed=9)]
        for _ in range(40):
            record.append(await envs.step(envs.action_space.sample()))
        return record

    async with aiovec.AsyncVectorEnv(factories, backend="inline") as envs:
        expected = await rollout(envs)
    async with aiovec.AsyncVectorEnv(factories, backend="process", num_workers=2) as envs:
        await rollout(envs)
        old = envs._engine.backend._workers[0]
        assert old.info_schema is not None
        old.process.signal(signal.SIGKILL)
        with pytest.raises(aiovec.WorkerDiedError):
            await envs.step(envs.action_space.sample())
        actual = await rollout(envs)
        new = envs._engine.backend._workers[0]
        assert new is not old and new.info_schema is not None
    assert_identical(actual, expected)


class ScoringEnv(CountingEnv):
    """Reports one scalar info every step: recorded."""

    def step(self, action: int) -> Any:
        obs, reward, terminated, truncated, _ = super().step(action)
        return obs, reward, terminated, truncated, {"score": float(self.steps)}


@pytest.mark.parametrize("start_method", ["forkserver", "fork"])
async def test_closing_while_a_recorded_step_is_awaited(anyio_backend: Any, tmp_path: Path,
                                                        no_leaks: None,
                                                        start_method: str) -> None:
    """One worker answers its step through the records, the other hangs; closing meanwhile
    ends the step with the closing's error (the records were let go of first: nothing is
    read from them any more). On asyncio the recorded reply is in before the close; on trio
    it may not be read at all."""
    fifo = tmp_path / "in-step"
    os.mkfifo(fifo)
    envs = aiovec.AsyncVectorEnv([ScoringEnv, functools.partial(FifoStepEnv, str(fifo))],
                                 backend="process", num_workers=2, close_timeout=0.5,
                                 start_method=start_method)
    await envs.reset()
    await close_while_a_step_hangs(envs, str(fifo), np.zeros(2, np.int64))


class EveryKindInfoEnv(CountingEnv):
    """Reports a scalar of every kind with a column dtype each step (values that change with
    the step and the sub-env), and no episode ends in a short rollout: every step's infos
    fit one schema."""

    KINDS: tuple[type, ...] = (int, float, bool, np.int8, np.int16, np.int32, np.int64,
                               np.uint8, np.uint16, np.uint32, np.uint64, np.float16,
                               np.float32, np.float64, np.complex64, np.complex128)

    def __init__(self, env_index: int = 0) -> None:
        super().__init__()
        self.env_index = env_index

    def step(self, action: int) -> Any:
        obs, reward, _, _, _ = super().step(action)
        value = 10 * self.steps + self.env_index
        info = {kind.__name__: kind(value % 2) if kind is bool else kind(value)
                for kind in self.KINDS}
        return obs, reward, False, False, info


@pytest.mark.parametrize("parent_worker", [False, True])
async def test_every_step_of_every_kind_goes_through_the_records(
        anyio_backend: Any, no_leaks: None, parent_worker: bool) -> None:
    """Infos of every scalar kind, through the process backend: each worker announced the
    schema of all of them, and after every step the records in shared memory hold exactly
    that step's infos (only a worker that recorded its step writes them: one that pickled
    would leave the last step's values), which equal the inline backend's."""
    factories = [functools.partial(EveryKindInfoEnv, index) for index in range(4)]
    kinds = EveryKindInfoEnv.KINDS
    expected_schema = RecordSchema(tuple(kind.__name__ for kind in kinds), kinds)
    async with aiovec.AsyncVectorEnv(factories, backend="inline") as envs:
        await envs.reset(seed=1)
        expected = [await envs.step(np.zeros(4, np.int64)) for _ in range(12)]
    async with aiovec.AsyncVectorEnv(factories, backend="process", num_workers=2,
                                     parent_worker=parent_worker) as envs:
        await envs.reset(seed=1)
        for step in range(12):
            infos = (await envs.step(np.zeros(4, np.int64)))[4]
            assert_identical(infos, expected[step][4])
            for worker in envs._engine.backend._workers:
                assert worker.info_schema == expected_schema
                hosted = worker.env_indices
                region = envs._engine.backend.records._region[hosted.start:hosted.stop]
                records = region.view(expected_schema.record_dtype()).reshape(len(hosted))
                for position, key in enumerate(expected_schema.keys):
                    assert_identical(records[f"f{position}"],
                                     infos[key][hosted.start:hosted.stop])
