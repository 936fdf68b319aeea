"""Messages as JSON, or as binary frames that carry numeric arrays as raw bytes.

A message is a tree of dicts, lists, tuples, strings, numbers, booleans, ``None``, numpy arrays
and numpy scalars: what a vector env's ``reset`` and ``step`` return, and the requests that
drive it. Either form carries the same tree; both turn tuples into lists, numpy scalars into
Python scalars (a float32 scalar's value, widened exactly to a Python float), dict keys into
strings (``str(key)``), and anything else that JSON cannot hold into its ``repr`` (infos may
hold any object). Containers nested deeper than ``MAX_DEPTH`` become their ``repr`` too.

**JSON**: ``to_jsonable`` gives the tree with arrays as nested lists (an object array element
by element, a complex number as its ``repr``). Its non-finite floats stay floats, so render it
with ``json.dumps(..., allow_nan=True)``: they appear as the tokens ``NaN``, ``Infinity`` and
``-Infinity``, which Python's and many other JSON parsers read but strict JSON does not allow.

**Binary frame**, version 1 (integers little-endian; positions from the frame's first byte)::

    position         size          content
    0                4             magic: 0x89 'A' 'V' '1' (FRAME_MAGIC; '1' is the version)
    4                4             header_size, u32
    8                header_size   header: UTF-8 JSON
    8 + header_size  0 to 7        zero padding up to data_start, the next multiple of 8
    data_start       data_size     the array buffers

The frame is exactly ``data_start + data_size`` bytes, where ``data_size`` is the largest
``offset + nbytes`` of its arrays (0 when it has none). The header is the JSON object
``{"arrays": [[dtype, shape, offset, nbytes], ...], "tree": TREE}``:

- ``dtype`` is numpy's type string, one of ``RAW_DTYPES``: ``"|b1"`` (bool: one byte, 0 or 1
  and read as true unless 0),
  ``"|i1"``, ``"|u1"``, ``"<i2"``, ``"<u2"``, ``"<i4"``, ``"<u4"``, ``"<i8"``, ``"<u8"``,
  ``"<f2"``, ``"<f4"``, ``"<f8"``, ``"<c8"``, ``"<c16"``. Always little-endian: a big-endian
  array is converted before it is sent.
- ``shape`` is a list of at most ``MAX_DIMS`` non-negative integers; the buffer holds the
  ``product(shape)`` elements in row-major (C) order: ``nbytes = itemsize * product(shape)``.
- ``offset`` is where the buffer starts, counted from ``data_start``: a multiple of 8, so
  every buffer is 8-byte aligned within the frame. A writer lays the buffers out in the
  table's order, without overlap, zero bytes padding the gaps.
- ``TREE`` is the message, as JSON, in which the i-th array of ``"arrays"`` stands as the
  object ``{"$array": i}``; every array appears exactly once. So that no user dict can pass for
  one, a user key starting with ``$`` is sent with one more ``$`` in front (``"$array"`` as
  ``"$$array"``) and the receiver strips it: on the wire, a key starting with a single ``$``
  is never a user's, and a receiver rejects any but ``"$array"``.
- An object array (a vector env's infos hold them) stands as ``{"$objects": ITEMS,
  "shape": SHAPE}``, its elements in row-major order, each as this tree writes it (a numeric
  array held in an object array still goes raw); the receiver rebuilds an object array.
- Arrays of other dtypes (strings, dates, ``longdouble``) go into ``TREE`` as JSON lists,
  element by element as ``to_jsonable`` writes them.
- Non-finite floats in ``TREE`` are written as ``NaN``, ``Infinity`` and ``-Infinity``, as
  in the JSON form.

``decode_frame`` gives back the tree with each array as a new, writeable, C-contiguous ndarray
of its dtype and shape, owning its memory (copied out of the frame, which may be reused).
A frame comes from a peer, so nothing in it is trusted: any frame that breaks the layout above,
or holds more than ``MAX_DEPTH`` levels of nesting or a header over ``MAX_HEADER_SIZE`` bytes,
raises ``ValueError`` saying what is wrong.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from aiovec._internals import INTERNALS
from aiovec._wire._convert import (
    ALIGNMENT,
    ARRAY_KEY,
    MAX_DEPTH,
    OBJECTS_KEY,
    RAW_DTYPES,
    Buffers,
    aligned,
    convert,
    json_text,
    table_of,
    to_jsonable,
)
from aiovec._wire._depth import nesting_depth

__all__ = ["FRAME_MAGIC", "MAX_DEPTH", "MAX_DIMS", "MAX_HEADER_SIZE", "RAW_DTYPES",
           "FrameTooDeep", "decode_frame", "encode_frame", "is_frame", "to_jsonable"]

#: The first four bytes of every frame: 0x89 (never the start of UTF-8 text), "AV", version "1".
FRAME_MAGIC = b"\x89AV1"
#: How many dimensions an array in a frame may have.
MAX_DIMS = 32
#: The largest JSON header a frame may carry.
MAX_HEADER_SIZE = 2**26

class FrameTooDeep(ValueError):
    """A frame whose tree nests deeper than the reader allows (a server answers
    ``too_deep``, as for JSON)."""


#: Levels of a frame's header around its tree: the header object, the arrays table and its
#: entries, an array's reference below the deepest level.
_HEADER_LEVELS = 4
_BOOL = RAW_DTYPES["|b1"]
_HEADER_START = b'{"arrays":'
_TREE_KEY = b',"tree":'
_PREFIX = len(FRAME_MAGIC) + 4
_PADDING = bytes(ALIGNMENT)
_HEADER_DECODER = json.JSONDecoder()
#: One JSON value at a position → (value, end): the C scanner ``JSONDecoder`` wraps, where
#: ``_internals`` found it.
_scan_json = INTERNALS.scan_json


def encode_frame(message: Any) -> bytes:
    """``message`` as one binary frame, its numeric arrays as raw bytes (the layout is in this
    module's docstring). Raises ``ValueError`` only if its JSON part passes
    ``MAX_HEADER_SIZE``."""
    buffers = Buffers()
    tree = convert(message, 0, buffers)
    table, offsets = table_of(tuple(buffers.layout))
    header = b"".join((_HEADER_START, table, _TREE_KEY, json_text(tree).encode(), b"}"))
    if len(header) > MAX_HEADER_SIZE:
        raise ValueError(f"the message's JSON part is {len(header)} bytes, more than a frame "
                         f"carries ({MAX_HEADER_SIZE})")
    end = _PREFIX + len(header)
    parts: list[Any] = [FRAME_MAGIC, len(header).to_bytes(4, "little"), header,
                        _PADDING[:aligned(end) - end]]
    position = 0
    for offset, array in zip(offsets, buffers.arrays):
        parts.append(_PADDING[:offset - position])
        parts.append(array)
        position = offset + array.nbytes
    return b"".join(parts)


def decode_frame(frame: bytes | bytearray | memoryview, *,
                 max_header_size: int = MAX_HEADER_SIZE, max_depth: int = MAX_DEPTH) -> Any:
    """The message a frame carries, its arrays as writeable copies. Raises ``ValueError``
    saying what is wrong with a frame that is not one ``encode_frame`` could have written,
    or whose header is over ``max_header_size`` bytes or nests deeper than ``max_depth``."""
    # bytes are sliced and read as they are (numpy reads the arrays straight out of them);
    # any other buffer through a flat byte view.
    if type(frame) is bytes:
        message = _decode_known(frame, max_header_size, max_depth)
        if message is not _UNKNOWN:
            return message
    view: bytes | memoryview = frame if type(frame) is bytes else _byte_view(frame)
    size = len(view)
    if size < _PREFIX:
        raise ValueError(f"not a frame: {size} bytes, fewer than the {_PREFIX} every frame "
                         "begins with")
    magic = bytes(view[:len(FRAME_MAGIC)])
    if magic != FRAME_MAGIC:
        if magic[:3] == FRAME_MAGIC[:3]:
            raise ValueError(f"frame version {magic[3:]!r} is not supported (only "
                             f"{FRAME_MAGIC[3:]!r})")
        raise ValueError(f"not a frame: it begins with {magic!r}, not {FRAME_MAGIC!r}")
    header_size = int.from_bytes(view[len(FRAME_MAGIC):_PREFIX], "little")
    if header_size > max_header_size:
        raise ValueError(f"the frame's header would be {header_size} bytes, more than "
                         f"{max_header_size}")
    data_start = aligned(_PREFIX + header_size)
    if data_start > size:
        raise ValueError(f"the frame is truncated: {size} bytes, but its header and padding "
                         f"take {data_start}")
    text = bytes(view[_PREFIX:_PREFIX + header_size])
    # The tree sits a few levels down the header, and an object array's level takes two
    # (``{"$objects": [...]}``): deeper than that allows, the header is refused before
    # ``json`` recurses into it; ``_rebuild`` checks the tree's own depth exactly.
    bound = 2 * max_depth + _HEADER_LEVELS
    if text.count(b"[") + text.count(b"{") > bound:
        depth = nesting_depth(text)
        if depth > bound:
            raise FrameTooDeep(f"the frame's header nests {depth} levels deep: its tree nests "
                               f"deeper than {max_depth} levels")
    try:
        header = _HEADER_DECODER.decode(str(text, "utf-8"))
    except (ValueError, RecursionError) as error:  # UnicodeDecodeError is a ValueError
        raise ValueError(f"the frame's header is not UTF-8 JSON: {error}") from None
    if not (isinstance(header, dict) and "arrays" in header and "tree" in header):
        raise ValueError("the frame's header must be a JSON object with 'arrays' and 'tree'")
    arrays = _read_arrays(header["arrays"], view, data_start)
    message = _whole(header["tree"], arrays, max_depth)
    _remember_layout(text, header["arrays"])  # read whole: its table may serve the next ones
    return message


def is_frame(data: object) -> bool:
    """Whether ``data`` is bytes that begin like a frame, of any version (``decode_frame``
    says when it cannot read that version); a JSON message never does."""
    if isinstance(data, (bytes, bytearray)):
        return data[:3] == FRAME_MAGIC[:3]
    if isinstance(data, memoryview):
        return (data.c_contiguous and data.nbytes >= 3
                and bytes(data.cast("B")[:3]) == FRAME_MAGIC[:3])
    return False


# --- decoding -------------------------------------------------------------------------------

def _byte_view(frame: bytes | bytearray | memoryview) -> memoryview:
    view = memoryview(frame)
    if not view.c_contiguous:
        raise ValueError("a frame must be contiguous bytes, not a strided view")
    return view if view.ndim == 1 and view.format == "B" else view.cast("B")


def _is_count(value: object) -> bool:
    """A non-negative JSON integer."""
    return type(value) is int and value >= 0


def _read_arrays(table: object, frame: bytes | memoryview,
                 data_start: int) -> list[np.ndarray[Any, Any]]:
    """The arrays ``table`` describes, copied out of ``frame`` (offsets count from
    ``data_start``)."""
    if type(table) is not list:
        raise ValueError("the frame's 'arrays' must be a list")
    arrays = []
    end = 0
    size = len(frame) - data_start
    for index, entry in enumerate(table):
        if type(entry) is not list or len(entry) != 4:
            raise ValueError(f"the frame's array {index} must be [dtype, shape, offset, nbytes]")
        code, shape, offset, nbytes = entry
        dtype = RAW_DTYPES.get(code) if type(code) is str else None
        if dtype is None:
            raise ValueError(f"the frame's array {index} has dtype {code!r:.40}, not one of "
                             f"{list(RAW_DTYPES)}")
        count = _element_count(shape)
        if count < 0:
            raise ValueError(f"the frame's array {index} has shape {shape!r:.80}, not a list of "
                             f"at most {MAX_DIMS} non-negative integers")
        if not (type(offset) is int and type(nbytes) is int and offset >= 0 and nbytes >= 0
                and offset % ALIGNMENT == 0):
            raise ValueError(f"the frame's array {index} has offset {offset!r:.40} and nbytes "
                             f"{nbytes!r:.40}: not a multiple of {ALIGNMENT} and a count")
        if nbytes != dtype.itemsize * count:
            raise ValueError(f"the frame's array {index} has nbytes {nbytes}, but a {code} "
                             f"array of shape {shape} takes {dtype.itemsize * count}")
        if offset < end:  # each array after the last: a frame cannot claim its bytes twice
            raise ValueError(f"the frame's array {index} starts at byte {offset}, inside the "
                             f"array before it (which ends at {end})")
        end = offset + nbytes
        if end > size:
            raise ValueError(f"the frame's array {index} ends at byte {end} of the data, which "
                             f"has {size}: the frame is truncated")
        arrays.append(_copy_array(frame, data_start + offset, count, dtype, shape, index))
    if end != size:
        raise ValueError(f"the frame's data has {size} bytes, but its arrays end at {end}")
    return arrays


# A stream of frames of one kind (a session's step answers, its step requests) carries the
# same arrays table in each: checked once, its layout is remembered by the table's exact
# text, and the next frames with that text parse only their tree. encode_frame writes the
# header as '{"arrays":' TABLE ',"tree":' TREE '}' (_HEADER_START, _TREE_KEY); a header
# written otherwise (or whose tree does not parse alone) takes the full path.
#: The most layouts remembered (then forgotten all at once, and learnt again), and the
#: longest table text remembered: at most ~1 MiB in all, whatever peers send.
_MAX_LAYOUTS = 256
_MAX_TABLE_BYTES = 4096
_Layout = tuple[tuple[tuple[np.dtype[Any], int, tuple[int, ...], int], ...], int]
_layouts: dict[bytes, _Layout] = {}


def _split_header(text: bytes) -> tuple[bytes, bytes] | None:
    """(table text, tree text) of a header written as encode_frame writes it."""
    if not text.startswith(_HEADER_START) or text[-1:] != b"}":
        return None
    end = text.find(_TREE_KEY, len(_HEADER_START))
    if end < 0:
        return None
    return text[len(_HEADER_START):end], text[end + len(_TREE_KEY):-1]


_UNKNOWN = object()
_TABLE_START = _PREFIX + len(_HEADER_START)


def _decode_known(frame: bytes, max_header_size: int, max_depth: int) -> Any:
    """The message of a frame whose table is one checked before and whose tree is shallow,
    read straight out of it; ``_UNKNOWN`` for any other (``decode_frame``'s full path then
    reads it, or says what is wrong)."""
    header_end = _PREFIX + int.from_bytes(frame[4:_PREFIX], "little")
    if (frame[:4] != FRAME_MAGIC or header_end - _PREFIX > max_header_size
            or not frame.startswith(_HEADER_START, _PREFIX)):
        return _UNKNOWN
    table_end = frame.find(_TREE_KEY, _TABLE_START, header_end)
    layout = _layouts.get(frame[_TABLE_START:table_end]) if table_end > 0 else None
    if layout is None:
        return _UNKNOWN
    entries, data_size = layout
    data_start = aligned(header_end)
    tree_text = frame[table_end + len(_TREE_KEY):header_end - 1]
    if (len(frame) != data_start + data_size or frame[header_end - 1] != 0x7D  # '}'
            or tree_text.count(b"[") + tree_text.count(b"{") > max_depth):
        return _UNKNOWN
    try:  # exactly one JSON value, as encode_frame writes it
        text = tree_text.decode()
        tree, end = _scan_json(text, 0)
    except (StopIteration, ValueError, RecursionError):  # UnicodeDecodeError included
        return _UNKNOWN
    if end != len(text):
        return _UNKNOWN
    return _whole(tree, _arrays_of(entries, frame, data_start), max_depth)


def _whole(tree: Any, arrays: list[np.ndarray[Any, Any]], max_depth: int) -> Any:
    """The message ``tree`` stands for, in which each of ``arrays`` appears once."""
    used = [False] * len(arrays)
    message = _rebuild(tree, arrays, used, 0, max_depth)
    if not all(used):
        raise ValueError(f"the frame's array {used.index(False)} is not in its tree")
    return message


def _arrays_of(entries: tuple[tuple[np.dtype[Any], int, tuple[int, ...], int], ...],
               frame: bytes, data_start: int) -> list[np.ndarray[Any, Any]]:
    """The arrays of a remembered layout, copied out of ``frame``."""
    return [_copy_array(frame, data_start + offset, count, dtype, shape, index)
            for index, (dtype, count, shape, offset) in enumerate(entries)]


def _remember_layout(text: bytes, table: list[list[Any]]) -> None:
    """Remember the layout of a table the full path just checked (in a frame that decoded
    whole), by its text: only a small table, written exactly as ``encode_frame`` writes it
    (so no other text, e.g. ``0.0`` for ``0`` or a header with two 'arrays' keys, of which
    JSON takes the last, can stand for it), and only ``_MAX_LAYOUTS`` of them."""
    split = _split_header(text)
    if split is None or len(split[0]) > _MAX_TABLE_BYTES or split[0] in _layouts:
        return
    if json_text(table).encode() != split[0]:
        return
    entries = tuple((RAW_DTYPES[code], _element_count(shape), tuple(shape), offset)
                    for code, shape, offset, _nbytes in table)
    data_size = max((offset + nbytes for _code, _shape, offset, nbytes in table), default=0)
    if len(_layouts) >= _MAX_LAYOUTS:
        _layouts.clear()
    _layouts[split[0]] = (entries, data_size)


def _element_count(shape: object) -> int:
    """How many elements an array of ``shape`` holds; -1 if ``shape`` is not a list of at
    most ``MAX_DIMS`` non-negative integers."""
    if type(shape) is not list or len(shape) > MAX_DIMS:
        return -1
    count = 1
    for dim in shape:
        if type(dim) is not int or dim < 0:
            return -1
        count *= dim
    return count


def _copy_array(frame: bytes | memoryview, offset: int, count: int, dtype: np.dtype[Any],
                shape: Sequence[int], index: int) -> np.ndarray[Any, Any]:
    """Array ``index`` as a new array owning its memory (its ``count`` elements start at
    byte ``offset`` of ``frame``)."""
    if not count:
        try:
            return np.zeros(shape, dtype)
        except ValueError as error:  # the other dimensions are too big for numpy
            raise ValueError(f"the frame's array {index} of shape {shape}: {error}") from None
    array: np.ndarray[Any, Any]
    if dtype is _BOOL:  # any byte but 0 is True, as one byte 1
        raw = np.frombuffer(frame, np.uint8, count, offset)
        array = (raw if len(shape) == 1 else raw.reshape(shape)).astype(bool)
    else:
        raw = np.frombuffer(frame, dtype, count, offset)
        array = (raw if len(shape) == 1 else raw.reshape(shape)).copy()
    return array


def _rebuild(node: Any, arrays: list[np.ndarray[Any, Any]], used: list[bool], depth: int,
             limit: int) -> Any:
    """The message a header's tree stands for: placeholders replaced, ``$`` keys unescaped."""
    kind = type(node)
    if kind is dict:
        index = node.get(ARRAY_KEY)
        if index is not None:
            if type(index) is int and len(node) == 1 and 0 <= index < len(arrays) \
                    and not used[index]:
                used[index] = True
                return arrays[index]
            return _placeholder(node, arrays, used)  # says what is wrong with it
        if OBJECTS_KEY in node:
            return _object_array(node, arrays, used, depth, limit)
        if depth > limit:
            raise FrameTooDeep(f"the frame's tree nests deeper than {limit} levels")
        rebuilt = {}
        for key, child in node.items():
            if key[:1] == "$":
                if key[:2] != "$$":
                    raise ValueError(f"the frame's tree has a reserved key {key!r:.80} (a key "
                                     "starting with '$' is sent with one more '$')")
                key = key[1:]
            # Scalars and array placeholders without a call: most of a tree's leaves are.
            child_kind = type(child)
            if child_kind is dict:
                index = child.get(ARRAY_KEY)
                if type(index) is int and len(child) == 1 and 0 <= index < len(arrays) \
                        and not used[index]:
                    used[index] = True
                    child = arrays[index]
                elif child:
                    child = _rebuild(child, arrays, used, depth + 1, limit)
                elif depth >= limit:  # (an empty one: as deep as a full one could be)
                    raise FrameTooDeep(f"the frame's tree nests deeper than {limit} levels")
            elif child_kind is list:
                child = _rebuild(child, arrays, used, depth + 1, limit)
            rebuilt[key] = child
        return rebuilt
    if kind is list:
        if depth > limit:
            raise FrameTooDeep(f"the frame's tree nests deeper than {limit} levels")
        return [_rebuild(child, arrays, used, depth + 1, limit)
                if type(child) is dict or type(child) is list else child for child in node]
    return node


def _object_array(node: dict[str, Any], arrays: list[np.ndarray[Any, Any]], used: list[bool],
                  depth: int, limit: int) -> np.ndarray[Any, Any]:
    items, shape = node[OBJECTS_KEY], node.get("shape")
    if len(node) != 2 or type(items) is not list or _element_count(shape) != len(items):
        raise ValueError(f"the frame's tree has a bad object array {node!r:.80}: expected "
                         f"{{{OBJECTS_KEY!r}: items, 'shape': sizes}}, len(items) == "
                         "product(sizes)")
    array = np.empty(len(items), dtype=object)
    for index, item in enumerate(items):  # one by one: a list item stays one element
        array[index] = _rebuild(item, arrays, used, depth + 1, limit)
    shaped: np.ndarray[Any, Any] = array.reshape(shape)
    return shaped


def _placeholder(node: dict[str, Any], arrays: list[np.ndarray[Any, Any]],
                 used: list[bool]) -> np.ndarray[Any, Any]:
    index = node[ARRAY_KEY]
    if len(node) != 1 or not _is_count(index) or index >= len(arrays):
        raise ValueError(f"the frame's tree has a bad array placeholder {node!r:.80}: "
                         f"expected {{{ARRAY_KEY!r}: i}} with 0 <= i < {len(arrays)}")
    if used[index]:
        raise ValueError(f"the frame's array {index} appears twice in its tree")
    used[index] = True
    array: np.ndarray[Any, Any] = arrays[index]
    return array
