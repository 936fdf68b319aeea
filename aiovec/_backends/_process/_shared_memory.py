"""Batched observations, actions, rewards and episode ends laid out in one shared memory block.

The block is an anonymous memory file (``memfd`` on Linux, an already-unlinked temporary file
elsewhere): it has no name, so nothing can leak when a process crashes; the kernel frees it
when the last process holding it exits. Parent and workers map the same block and build the
same numpy views from one ``BlockLayout``.

Spaces whose batched form is a fixed-size array (Box, Discrete, MultiBinary, MultiDiscrete, and
Dict/Tuple of those) get a region each; anything else is not representable here
(``BlockLayout.for_space`` returns ``None``) and travels pickled instead.
"""

from __future__ import annotations

import mmap
import os
import tempfile
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces

from aiovec._backends._process._info_records import RECORD_BYTES
from aiovec._core._observations import read_row
from aiovec._core._statistics import RING_SIZE, LatencyLog

__all__ = ["BlockLayout", "SpaceLayout", "open_block"]

_ALIGNMENT = 64  # cache-line aligned regions: workers writing neighbouring rows share less


@dataclass(frozen=True)
class _Leaf:
    offset: int
    shape: tuple[int, ...]  # batched: (num_envs, *single shape)
    dtype: str


#: A batched space as a tree: a leaf region, a dict of trees, or a tuple of trees.
SpaceLayout = _Leaf | dict[str, "SpaceLayout"] | tuple["SpaceLayout", ...]


def _leaf_shape_dtype(space: spaces.Space[Any]) -> tuple[tuple[int, ...], np.dtype[Any]] | None:
    if isinstance(space, (spaces.Box, spaces.MultiBinary, spaces.MultiDiscrete)):
        return tuple(space.shape), np.dtype(space.dtype)
    if isinstance(space, spaces.Discrete):
        return (), np.dtype(space.dtype)
    return None


class _Allocator:
    def __init__(self) -> None:
        self.size = 0

    def take(self, nbytes: int) -> int:
        offset = -(-self.size // _ALIGNMENT) * _ALIGNMENT
        self.size = offset + nbytes
        return offset


def _plan(space: spaces.Space[Any], num_envs: int, allocator: _Allocator) -> SpaceLayout | None:
    if isinstance(space, spaces.Dict):
        children = {key: _plan(child, num_envs, allocator) for key, child in space.spaces.items()}
        if any(child is None for child in children.values()):
            return None
        return {key: child for key, child in children.items() if child is not None}
    if isinstance(space, spaces.Tuple):
        items = [_plan(child, num_envs, allocator) for child in space.spaces]
        if any(item is None for item in items):
            return None
        return tuple(item for item in items if item is not None)
    leaf = _leaf_shape_dtype(space)
    if leaf is None:
        return None
    shape, dtype = leaf
    batched = (num_envs, *shape)
    offset = allocator.take(int(np.prod(batched)) * dtype.itemsize)
    return _Leaf(offset, batched, dtype.str)


def _views(layout: SpaceLayout, buffer: memoryview) -> Any:
    if isinstance(layout, _Leaf):
        dtype = np.dtype(layout.dtype)
        count = int(np.prod(layout.shape))
        return np.frombuffer(buffer, dtype, count, layout.offset).reshape(layout.shape)
    if isinstance(layout, dict):
        return {key: _views(child, buffer) for key, child in layout.items()}
    return tuple(_views(child, buffer) for child in layout)


@dataclass(frozen=True)
class BlockLayout:
    """Where each batched array lives in the block; picklable, so workers rebuild the views."""

    size: int
    observations: SpaceLayout | None
    actions: SpaceLayout | None
    rewards: _Leaf
    terminations: _Leaf
    truncations: _Leaf
    latencies: _Leaf
    latency_samples: _Leaf
    #: The sequence number of the last full step each worker finished, in the row of its
    #: first sub-env (``hosts``): a worker done early waits there for the others, so that
    #: the replies reach the parent together (see ``_worker.HostedEnvs.finished``).
    step_marks: _Leaf | None = None
    #: The first sub-env of each worker.
    hosts: tuple[int, ...] = ()
    #: A record of step infos per sub-env, as bytes (``_info_records``).
    info_records: _Leaf | None = None

    @classmethod
    def plan(cls, observation_space: spaces.Space[Any], action_space: spaces.Space[Any],
             num_envs: int, hosts: tuple[int, ...] = ()) -> BlockLayout:
        """Lay out one vector env's batch; unrepresentable spaces get ``None`` (pickled)."""
        allocator = _Allocator()
        observations = _plan(observation_space, num_envs, allocator)
        actions = _plan(action_space, num_envs, allocator)
        rewards = _Leaf(allocator.take(8 * num_envs), (num_envs,), np.dtype(np.float64).str)
        terminations = _Leaf(allocator.take(num_envs), (num_envs,), np.dtype(np.bool_).str)
        truncations = _Leaf(allocator.take(num_envs), (num_envs,), np.dtype(np.bool_).str)
        latencies = _Leaf(allocator.take(8 * num_envs * RING_SIZE), (num_envs, RING_SIZE),
                          np.dtype(np.float64).str)
        latency_samples = _Leaf(allocator.take(8 * num_envs), (num_envs,), np.dtype(np.int64).str)
        step_marks = _Leaf(allocator.take(8 * num_envs), (num_envs,), np.dtype(np.int64).str)
        info_records = _Leaf(allocator.take(RECORD_BYTES * num_envs), (num_envs, RECORD_BYTES),
                             np.dtype(np.uint8).str)
        return cls(max(allocator.size, 1), observations, actions, rewards, terminations,
                   truncations, latencies, latency_samples, step_marks, hosts, info_records)

    def views(self, block: mmap.mmap) -> BlockViews:
        """Numpy views of every region of a mapped block."""
        buffer = memoryview(block)
        return BlockViews(
            observations=None if self.observations is None else _views(self.observations, buffer),
            actions=None if self.actions is None else _views(self.actions, buffer),
            rewards=_views(self.rewards, buffer),
            terminations=_views(self.terminations, buffer),
            truncations=_views(self.truncations, buffer),
            latencies=LatencyLog(_views(self.latencies, buffer),
                                 _views(self.latency_samples, buffer)),
            step_marks=None if self.step_marks is None else _views(self.step_marks, buffer),
            info_records=(None if self.info_records is None
                          else _views(self.info_records, buffer)),
        )


@dataclass(frozen=True)
class BlockViews:
    """The numpy arrays (or dict/tuple trees of them) backed by a block."""

    observations: Any
    actions: Any
    rewards: np.ndarray[Any, np.dtype[np.float64]]
    terminations: np.ndarray[Any, np.dtype[np.bool_]]
    truncations: np.ndarray[Any, np.dtype[np.bool_]]
    latencies: LatencyLog
    step_marks: np.ndarray[Any, np.dtype[np.int64]] | None = None
    info_records: np.ndarray[Any, np.dtype[np.uint8]] | None = None


def open_block(size: int) -> int:
    """A new anonymous, nameless shared memory file of ``size`` bytes; returns its descriptor."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("aiovec-batch", os.MFD_CLOEXEC)
    else:  # pragma: no cover - non-Linux: an unlinked temporary file is nameless too
        with tempfile.TemporaryFile() as handle:
            fd = os.dup(handle.fileno())
    try:
        os.ftruncate(fd, size)
    except BaseException:
        os.close(fd)
        raise
    return fd


def map_block(fd: int, size: int) -> mmap.mmap:
    """Map a block shared with the other processes holding ``fd``."""
    return mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)


def row_writer(views: Any) -> Any:
    """``write(env_index, value)`` for a (tree of) batched views; the plain-array case, the
    common one, costs a shape check and an item assignment."""
    if isinstance(views, np.ndarray):
        row_shape = views.shape[1:]

        def write(env_index: int, value: Any) -> None:
            if getattr(value, "shape", None) != row_shape:
                _check_shape(value, row_shape)
            views[env_index] = value

        return write
    return lambda env_index, value: write_row(views, env_index, value)


def _check_shape(value: Any, row_shape: tuple[int, ...]) -> None:
    """Refuse a value numpy would broadcast into a row of another shape (say, ``(1,)`` into
    ``(4,)``): the sub-env returned something its space does not allow."""
    shape = np.shape(value)
    if shape != row_shape:
        raise ValueError(f"the sub-env returned an observation of shape {shape}; its "
                         f"observation space has shape {row_shape}")


def row_reader(views: Any) -> Any:
    """``read(env_index)`` returning a private copy of a row, as ``read_row``; for a 1-D array
    indexing already yields a fresh numpy scalar, so no copy is made."""
    if isinstance(views, np.ndarray) and views.ndim == 1:
        return views.__getitem__
    return lambda env_index: read_row(views, env_index)


def write_row(views: Any, env_index: int, value: Any) -> None:
    """Write one sub-env's value into row ``env_index`` of a (tree of) batched views."""
    if isinstance(views, np.ndarray):
        if getattr(value, "shape", None) != views.shape[1:]:
            _check_shape(value, views.shape[1:])
        views[env_index] = value
    elif isinstance(views, dict):
        for key, child in views.items():
            write_row(child, env_index, value[key])
    else:
        for child, item in zip(views, value):
            write_row(child, env_index, item)


def same_dtypes(views: Any, batch: Any) -> bool:
    """True when every array of a validated batch has the dtype of its view."""
    if isinstance(views, dict):
        return all(same_dtypes(child, batch[key]) for key, child in views.items())
    if isinstance(views, tuple):
        return all(same_dtypes(child, part) for child, part in zip(views, batch))
    return bool(views.dtype == batch.dtype)


def write_rows(views: Any, batch: Any, rows: Any, source_rows: Any = None) -> None:
    """Copy a validated batch (same tree shape) into rows ``rows`` of the views: its rows
    ``source_rows``, or the same rows (a slice or an index array)."""
    if isinstance(views, dict):
        for key, child in views.items():
            write_rows(child, batch[key], rows, source_rows)
    elif isinstance(views, tuple):
        for child, part in zip(views, batch):
            write_rows(child, part, rows, source_rows)
    else:
        views[rows] = batch[rows if source_rows is None else source_rows]
