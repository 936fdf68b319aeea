"""Messages as JSON trees, the conversion both wire forms share (``_codec`` has the frame
format): numeric arrays as nested lists for JSON, or, for a frame, as placeholders for the
raw buffers a ``Buffers`` collects; numpy scalars as Python scalars, tuples as lists, dict
keys as strings, anything else as its ``repr``."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from aiovec._internals import INTERNALS

__all__ = ["ALIGNMENT", "ARRAY_KEY", "MAX_DEPTH", "OBJECTS_KEY", "RAW_DTYPES", "Buffers",
           "aligned", "convert", "json_text", "table_of", "to_jsonable"]

#: How deeply containers may nest in a message (the top-level container is at depth 0).
MAX_DEPTH = 64
#: The dtypes whose arrays a frame carries as raw bytes, by numpy's type string.
RAW_DTYPES = {code: np.dtype(code) for code in (
    "|b1", "|i1", "|u1", "<i2", "<u2", "<i4", "<u4", "<i8", "<u8",
    "<f2", "<f4", "<f8", "<c8", "<c16")}
#: A frame's tree: ``{ARRAY_KEY: i}`` stands for raw array i, ``{OBJECTS_KEY: ...}`` for an
#: object array.
ARRAY_KEY = "$array"
OBJECTS_KEY = "$objects"
#: Every raw buffer starts at a multiple of this in a frame's data.
ALIGNMENT = 8
#: Each raw dtype's type string, by dtype (``dtype.str`` is computed at every call).
_CODES = {dtype: code for code, dtype in RAW_DTYPES.items()}
_JSON_SCALARS = frozenset({str, int, float, bool, type(None)})

#: The compact JSON text of a tree ``convert`` made (NaN as ``NaN``): json's C encoder made
#: once, not at each call as ``json.dumps`` does, where ``_internals`` found it.
json_text = INTERNALS.json_text


def to_jsonable(value: Any) -> Any:
    """``value`` as a tree ``json.dumps(..., allow_nan=True)`` can render: numeric arrays as
    nested lists, numpy scalars as Python scalars, tuples as lists, dict keys as strings,
    anything else as its ``repr``. Never raises."""
    return convert(value, 0, None)


class Buffers:
    """The arrays a frame carries raw, and their (type string, shape) in order."""

    __slots__ = ("arrays", "layout")

    def __init__(self) -> None:
        self.arrays: list[np.ndarray[Any, Any]] = []
        self.layout: list[tuple[str, tuple[int, ...]]] = []

    def add(self, array: np.ndarray[Any, Any]) -> dict[str, int] | None:
        """The placeholder for ``array`` as raw bytes, or ``None`` if its dtype goes as JSON."""
        code = _CODES.get(array.dtype)  # the usual case: a little-endian raw dtype
        if code is None:
            dtype = array.dtype
            if dtype.str[0] == ">":
                dtype = dtype.newbyteorder("<")
                array = array.astype(dtype)
            if dtype.str not in RAW_DTYPES:
                return None
            code = dtype.str
        if not array.flags.c_contiguous:
            array = array.copy(order="C")
        index = len(self.arrays)
        self.layout.append((code, array.shape))
        self.arrays.append(array)
        return _PLACEHOLDERS[index] if index < len(_PLACEHOLDERS) else {ARRAY_KEY: index}


#: A sender's stream of frames repeats a few layouts (a session's step answers, its
#: requests): the arrays table's text and offsets, by (type string, shape) of each array.
_tables: dict[tuple[tuple[str, tuple[int, ...]], ...], tuple[bytes, list[int]]] = {}
_MAX_TABLES = 256
#: Array placeholders for the first arrays of a tree, shared (they are only read).
_PLACEHOLDERS = [{ARRAY_KEY: index} for index in range(64)]


def table_of(layout: tuple[tuple[str, tuple[int, ...]], ...]) -> tuple[bytes, list[int]]:
    """The arrays table (as JSON text) and offsets of arrays laid out in order."""
    known = _tables.get(layout)
    if known is None:
        table, offsets, size = [], [], 0
        for code, shape in layout:
            offset = aligned(size)
            nbytes = RAW_DTYPES[code].itemsize * math.prod(shape)
            table.append([code, list(shape), offset, nbytes])
            offsets.append(offset)
            size = offset + nbytes
        known = (json_text(table).encode(), offsets)
        if len(_tables) >= _MAX_TABLES:
            _tables.clear()
        _tables[layout] = known
    return known


def aligned(position: int) -> int:
    """``position`` rounded up to a multiple of ``ALIGNMENT``."""
    return -(-position // ALIGNMENT) * ALIGNMENT


def _repr(value: object) -> str:
    try:
        return repr(value)
    except Exception:  # a broken __repr__, or one too deep to finish
        return f"<{type(value).__qualname__} object>"


def _string(key: object) -> str:
    try:
        return str(key)
    except Exception:  # a broken __str__
        return _repr(key)


def convert(value: Any, depth: int, buffers: Buffers | None) -> Any:
    """The JSON tree of ``value``: numeric arrays as nested lists, or, given ``buffers``, as
    placeholders for raw buffers (and keys starting with ``$`` escaped)."""
    kind = type(value)
    if kind in _JSON_SCALARS:
        return value
    if kind is dict:  # the usual containers first, before the slower isinstance checks
        return _convert_dict(value, depth, buffers)
    if kind is np.ndarray or isinstance(value, np.ndarray):
        dtype = value.dtype
        if buffers is not None:
            placeholder = buffers.add(value)
            if placeholder is not None:
                return placeholder
        elif dtype.kind in "biu" or (dtype.kind == "f" and dtype.itemsize <= 8):
            return value.tolist()  # the common case, without a loop in Python
        # Object, string, date, complex (in JSON) and longdouble arrays, element by element;
        # one level deeper, so that a 0-d object array holding itself cannot loop forever.
        if depth > MAX_DEPTH:
            return _repr(value)
        if buffers is not None and dtype.kind == "O":  # kept an object array for the receiver
            items = [convert(item, depth + 1, buffers) for item in value.ravel().tolist()]
            return {OBJECTS_KEY: items, "shape": list(value.shape)}
        return convert(value.tolist(), depth + 1, buffers)
    if isinstance(value, Mapping):
        return _convert_dict(value, depth, buffers)
    if isinstance(value, (list, tuple)):
        if depth > MAX_DEPTH:
            return _repr(value)
        return [convert(item, depth + 1, buffers) for item in value]
    if isinstance(value, np.generic):
        if isinstance(value, np.floating) and value.dtype.itemsize > 8:
            return float(value)  # longdouble: .item() would give it back unchanged
        item = value.item()
        return _repr(value) if isinstance(item, np.generic) else convert(item, depth, buffers)
    for plain in (int, float, str):  # subclasses: IntEnum, StrEnum...
        if isinstance(value, plain):
            try:
                return plain(value)
            except Exception:  # a subclass with a broken __int__, __float__ or __str__
                break
    return _repr(value)


def _convert_dict(value: Mapping[Any, Any], depth: int, buffers: Buffers | None) -> Any:
    if depth > MAX_DEPTH:
        return _repr(value)
    converted = {}
    for key, item in value.items():
        if type(key) is not str:
            key = _string(key)
        if buffers is not None and key[:1] == "$":
            key = "$" + key
        kind = type(item)
        if kind in _JSON_SCALARS:
            converted[key] = item
        elif kind is np.ndarray and buffers is not None:  # most of a frame's values
            converted[key] = buffers.add(item) or convert(item, depth + 1, buffers)
        else:
            converted[key] = convert(item, depth + 1, buffers)
    return converted
