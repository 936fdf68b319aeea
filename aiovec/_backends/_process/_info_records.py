"""Step infos through shared memory: one fixed-size record per sub-env, no pickling.

Most envs report the same few scalars every step (MuJoCo's positions and reward terms, ALE's
lives and frame numbers). Pickled, each sub-env's dict costs the worker a ``dumps``, the
parent a ``loads`` and a merge per key and sub-env, in the one process every vector step
waits for. Here a worker learns the infos' *schema* (their keys and the type of each value)
and writes each sub-env's values into its record, a row of the block (``RECORD_BYTES``); the
parent reads each key's column for the worker's whole run at once (``RecordSchema.read``) and
splices it into the batch as packed infos (``_infos.splice_infos``).

A schema is announced once, pickled in a step's reply; the replies that follow are bare
``RECORDED`` headers. A full step whose infos do not fit (nested dicts, arrays, an episode's
end, a key some sub-env lacks, another type) takes the pickled path: exact either way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

import numpy as np

from aiovec._core._infos import SCALAR_TYPES, PackedInfos

__all__ = ["RECORD_BYTES", "InfoRecorder", "RecordReader", "RecordSchema", "schema_of"]

#: Bytes of record per sub-env: sixteen 8-byte scalars.
RECORD_BYTES = 128

#: The most schemas a worker learns: past them, infos of a new schema are pickled (an env
#: whose keys change with every step must not grow the parent's cache of views).
MAX_SCHEMAS = 16


class RecordSchema(NamedTuple):
    """The keys of a flat info dict of scalars, in order, and the type of each value."""

    keys: tuple[str, ...]
    kinds: tuple[type, ...]

    def record_dtype(self) -> np.dtype[Any]:
        """One record: a field per key, of the dtype ``merge_info`` gives that key's column
        (``np.dtype(type(value))``), packed from the record's start."""
        return np.dtype({"names": [f"f{position}" for position in range(len(self.keys))],
                         "formats": [np.dtype(kind) for kind in self.kinds],
                         "offsets": _offsets(self.kinds),
                         "itemsize": RECORD_BYTES})

    def read(self, records: np.ndarray[Any, Any]) -> PackedInfos:
        """The packed infos of a run of sub-envs from their ``records`` (a structured view of
        this schema): a copy of each key's column, every sub-env setting every key."""
        count = len(records)
        infos: dict[str, Any] = {}
        kinds: dict[str, Any] = {}
        for position, (key, kind) in enumerate(zip(self.keys, self.kinds)):
            infos[key] = records[f"f{position}"].copy()
            infos[f"_{key}"] = np.ones(count, dtype=np.bool_)
            kinds[key] = kind
        return PackedInfos(infos, kinds)


def _offsets(kinds: tuple[type, ...]) -> list[int]:
    """Each field at the next multiple of its own size (aligned reads and writes)."""
    offsets = []
    offset = 0
    for kind in kinds:
        size = np.dtype(kind).itemsize
        offset = -(-offset // size) * size
        offsets.append(offset)
        offset += size
    return offsets


def _recordable(key: Any, value: Any) -> bool:
    """A key whose batched column ``merge_info`` makes from ``np.dtype(type(value))``, and
    whose name cannot meet another key's mask (``_key``)."""
    if type(key) is not str or key.startswith("_") or key == "final_obs":
        return False
    kind = type(value)
    return kind in SCALAR_TYPES or (isinstance(value, np.number)
                                       and np.dtype(kind).kind in "biufc")


def schema_of(info: dict[str, Any]) -> RecordSchema | None:
    """The schema of ``info``, or ``None`` if it cannot be recorded (see ``_recordable``;
    too many bytes for a record)."""
    if not info or not all(_recordable(key, value) for key, value in info.items()):
        return None
    schema = RecordSchema(tuple(info), tuple(type(value) for value in info.values()))
    kinds = schema.kinds
    if _offsets(kinds)[-1] + np.dtype(kinds[-1]).itemsize > RECORD_BYTES:
        return None
    return schema


class InfoRecorder:
    """A worker's side: writes the infos of the full steps that fit a schema into its rows.

    ``rows`` is the block's record region for the worker's sub-envs, as bytes
    (``(count, RECORD_BYTES)``).
    """

    __slots__ = ("announced", "keys", "kinds", "learned", "records", "rows", "schema")

    def __init__(self, rows: np.ndarray[Any, Any]) -> None:
        self.rows = rows
        self.schema: RecordSchema | None = None
        self.keys: tuple[str, ...] = ()
        self.kinds: tuple[type, ...] = ()
        self.records: np.ndarray[Any, Any] | None = None
        #: False until the parent has been sent ``schema`` (in a step's reply).
        self.announced = False
        #: Every schema learned, with the rows seen through it (``MAX_SCHEMAS`` at most).
        self.learned: dict[RecordSchema, np.ndarray[Any, Any]] = {}

    def _learn(self, schema: RecordSchema) -> bool:
        """Write in ``schema`` from now on (announced afresh) → True; False once
        ``MAX_SCHEMAS`` others were learned."""
        records = self.learned.get(schema)
        if records is None:
            if len(self.learned) >= MAX_SCHEMAS:
                return False
            records = self.rows.view(schema.record_dtype()).reshape(len(self.rows))
            self.learned[schema] = records
        self.schema, self.records = schema, records
        self.keys, self.kinds = schema.keys, schema.kinds
        self.announced = False
        return True

    def record(self, extras: list[tuple[int, Any]]) -> bool:
        """Write a full step's infos (``extras``: an ``(info, None)`` for every hosted
        sub-env, in order) into the records → True; False (nothing the parent reads was
        written) when they do not all fit one schema, learning the first sub-env's schema
        if it differs from the one known."""
        if len(extras) != len(self.rows):
            return False
        first = extras[0][1]
        if type(first) is not tuple or len(first) != 2 or first[1] is not None:
            return False
        info = first[0]
        if type(info) is not dict or not info:
            return False
        if tuple(info) != self.keys or tuple(map(type, info.values())) != self.kinds:
            schema = schema_of(info)
            if schema is None or not self._learn(schema):
                return False
        keys, kinds, records = self.keys, self.kinds, self.records
        assert records is not None
        values = []
        for _, entry in extras:
            if type(entry) is not tuple or len(entry) != 2 or entry[1] is not None:
                return False
            info = entry[0]
            if type(info) is not dict or tuple(info) != keys:
                return False
            row = tuple(info.values())
            if tuple(map(type, row)) != kinds:
                return False
            values.append(row)
        try:
            for offset, row in enumerate(values):
                records[offset] = row
        except (OverflowError, ValueError, TypeError):  # an int past int64, say: pickle it
            return False
        return True


class _Recording(Protocol):
    """What ``RecordReader`` needs of a worker's handle (``_workers.WorkerHandle``)."""

    env_indices: range
    info_schema: RecordSchema | None


class RecordReader:
    """The parent's side: the schemas the workers announced, and the records read through
    them."""

    __slots__ = ("_region", "_schemas")

    def __init__(self) -> None:
        self._region: np.ndarray[Any, Any] | None = None
        #: Each schema announced, once (equal ones are the same object, so a step's schemas
        #: compare by identity), with every sub-env's record seen through it.
        self._schemas: dict[RecordSchema, tuple[RecordSchema, np.ndarray[Any, Any]]] = {}

    def attach(self, region: np.ndarray[Any, Any]) -> None:
        """The block's record region, as bytes: ``(num_envs, RECORD_BYTES)``."""
        self._region = region

    def release(self) -> None:
        """Drop every view of the block (it cannot be unmapped while one points into it)."""
        self._region = None
        self._schemas.clear()

    def learn(self, worker: _Recording, schema: RecordSchema) -> None:
        """``worker`` announced the schema its records are written in from now on."""
        known = self._schemas.get(schema)
        if known is None:
            if self._region is None:
                raise RuntimeError("a worker announced an info schema before the block")
            records = self._region.view(schema.record_dtype()).reshape(len(self._region))
            known = self._schemas[schema] = (schema, records)
        worker.info_schema = known[0]

    def read(self, workers: Sequence[_Recording],
             num_workers: int) -> tuple[tuple[int, PackedInfos], ...]:
        """The infos the ``workers`` wrote into their records, as packed runs ``(first sub-env,
        infos)``: one run for the whole batch when all ``num_workers`` recorded alike; none
        once released (the vector env closed while the step was awaited)."""
        if self._region is None:
            return ()
        schema = workers[0].info_schema
        if len(workers) == num_workers and schema is not None and all(
                worker.info_schema is schema for worker in workers):
            return ((0, schema.read(self._schemas[schema][1])),)
        runs = []
        for worker in workers:
            own = worker.info_schema
            if own is None:
                raise RuntimeError("a worker answered RECORDED before announcing a schema")
            hosted = worker.env_indices
            runs.append((hosted.start,
                         own.read(self._schemas[own][1][hosted.start:hosted.stop])))
        return tuple(runs)
