"""Gymnasium spaces as plain JSON, so that a client can rebuild the spaces of a served env.

``space_to_schema`` describes a space with dicts, lists, strings, numbers, booleans and ``None``
only, and ``space_from_schema`` rebuilds it: ``space_from_schema(space_to_schema(s)) == s``.
One schema per kind (every key shown is required; unknown keys are ignored)::

    {"type": "Box", "dtype": "float32", "shape": [3], "low": ARRAY, "high": ARRAY}
    {"type": "Discrete", "dtype": "int64", "n": 3, "start": 0}
    {"type": "MultiDiscrete", "dtype": "int64", "shape": [2], "nvec": ARRAY, "start": ARRAY}
    {"type": "MultiBinary", "n": 4}                       or a shape: {"n": [2, 3]}
    {"type": "Text", "min_length": 1, "max_length": 8, "charset": "abc"}
    {"type": "Object", "types": ["str", "list"]}          any object: {"types": []}
    {"type": "Dict", "spaces": [["position", SCHEMA], ["velocity", SCHEMA]]}
    {"type": "Tuple", "spaces": [SCHEMA, SCHEMA]}

- ``dtype`` is numpy's name for it: ``"bool"``, ``"int8"`` ... ``"uint64"``, ``"float16"``,
  ``"float32"``, ``"float64"``.
- An ARRAY is one value when all its elements are equal (or it has none), else nested lists in
  the space's shape, row-major, as ``ndarray.tolist()`` writes them. A float16 or float32
  element is written as the shortest number that converts back to it (``-4.8``, which a
  float32 space holds as -4.80000019...).
- Infinity: JSON numbers cannot be infinite, so an infinite bound is the string ``"inf"`` or
  ``"-inf"``. In a Box of signed integers, ``"-inf"`` in ``low`` and ``"inf"`` in ``high``
  mark an unbounded element, which Gymnasium holds as the dtype's minimum or maximum with
  ``bounded_below`` / ``bounded_above`` false (a rebuilt Box samples it the same way).
  NaN is never a bound.
- Integers are exact JSON integers: an ``int64`` or ``uint64`` bound may pass 2**53, which a
  client whose JSON numbers are doubles must read as a big integer.
- A Dict lists its string keys as ``[key, schema]`` pairs in the space's order (some JSON
  parsers do not keep an object's order). Text's charset keeps the space's character order,
  whatever its characters.
- An Object (``aiovec.ObjectSpace``) names its types among ``OBJECT_TYPES``: ``"str"``,
  ``"int"``, ``"float"``, ``"bool"``, ``"list"``, ``"dict"`` and ``"null"``, the values JSON
  carries (an ObjectSpace of any other type has no schema).
- Not carried: a space's seed and random state, an ObjectSpace's sampler, and whatever a
  subclass adds (a subclass of Box is described, and rebuilt, as a Box).

A schema comes from a peer, so ``space_from_schema`` trusts nothing in it: anything malformed
raises ``ValueError`` saying where; Dict/Tuple nesting is bounded by ``MAX_SPACE_DEPTH``, shapes
by ``MAX_DIMS``, and the elements of all the spaces in one schema by ``MAX_ELEMENTS`` (a schema
of a few bytes must not make the client allocate gigabytes).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import numpy as np
from gymnasium import Space
from gymnasium.spaces import Box, Dict, Discrete, MultiBinary, MultiDiscrete, Text, Tuple

from aiovec._object_space import ObjectSpace

__all__ = ["MAX_DIMS", "MAX_ELEMENTS", "MAX_SPACE_DEPTH", "OBJECT_TYPES", "space_from_schema",
           "space_to_schema"]

#: How many Dict/Tuple levels a space may be nested in.
MAX_SPACE_DEPTH = 32
#: How many dimensions a shape may have.
MAX_DIMS = 32
#: How many elements all the spaces of one schema may hold together (also bounds Text lengths).
MAX_ELEMENTS = 2**25

#: The dtypes a schema may name: Box takes them all, the discrete spaces only the integers.
_DTYPES = {np.dtype(name).name: np.dtype(name) for name in (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64")}
_FLOAT_INFINITIES: dict[str, float] = {"inf": math.inf, "-inf": -math.inf}
#: The types an ObjectSpace may name on the wire: those of the values JSON carries.
OBJECT_TYPES: dict[str, type] = {"str": str, "int": int, "float": float, "bool": bool,
                                 "list": list, "dict": dict, "null": type(None)}
_SpaceT = TypeVar("_SpaceT", bound=Space[Any])


def space_to_schema(space: Space[Any]) -> dict[str, Any]:
    """A JSON-serialisable description of ``space``, which ``space_from_schema`` rebuilds.

    Raises ``TypeError`` for a space kind (or a dtype, or a Dict key) with no wire form, and
    ``ValueError`` for Dict/Tuple spaces nested deeper than ``MAX_SPACE_DEPTH``."""
    return _describe(space, 0)


def space_from_schema(schema: Mapping[str, Any]) -> Space[Any]:
    """The space ``schema`` describes. Raises ``ValueError`` saying what is wrong, and where,
    for any schema that is not one ``space_to_schema`` could have written."""
    return _SchemaReader().space(schema, "", 0)


# --- describing -------------------------------------------------------------------------------

def _describe(space: Space[Any], depth: int) -> dict[str, Any]:
    if depth > MAX_SPACE_DEPTH:
        raise ValueError(f"the space is nested in more than {MAX_SPACE_DEPTH} Dict/Tuple levels")
    for kind in type(space).__mro__:
        describe = _DESCRIBERS.get(kind)
        if describe is not None:
            return describe(space, depth)
    supported = ", ".join(kind.__name__ for kind in _DESCRIBERS)
    raise TypeError(f"a {type(space).__name__} space has no wire schema (supported: {supported})")


def _dtype_name(dtype: np.dtype[Any], kind: str) -> str:
    if dtype.name not in _DTYPES or _DTYPES[dtype.name] != dtype:
        raise TypeError(f"a {kind} space of dtype {dtype} has no wire schema")
    return str(dtype.name)


def _array_to_json(values: np.ndarray[Any, Any],
                   markers: Mapping[str, np.ndarray[Any, Any]] | None = None) -> Any:
    """``values`` as one JSON value if all are equal, else as nested lists; where a mask in
    ``markers`` is true, the element is written as that marker (``"inf"``, ``"-inf"``)."""
    if values.size == 0:
        return np.zeros((), values.dtype).item()
    if values.dtype.kind == "f" and values.dtype.itemsize < 8:
        values = _shortest(values)
    marked = [(marker, mask) for marker, mask in (markers or {}).items() if mask.any()]
    # Equal bit for bit (so a -0.0 is not written as 0.0), and equally marked.
    bits = values.view(f"u{values.dtype.itemsize}") if values.dtype.kind == "f" else values
    if (bits == bits.flat[0]).all() and all(mask.all() for _, mask in marked):
        return marked[0][0] if marked else values.flat[0].item()
    if not marked:
        return values.tolist()
    elements = values.astype(object)
    for marker, mask in marked:
        elements[mask] = marker
    return elements.tolist()


def _shortest(values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """float16/float32 ``values`` as the shortest float64s that convert back to them exactly:
    ``-4.8``, not ``-4.800000190734863`` (where the short one would not, the exact one)."""
    shortest = values.astype(str).astype(np.float64)
    exact = values.astype(np.float64)
    return np.where(shortest.astype(values.dtype) == values, shortest, exact)


def _bound_to_json(bound: np.ndarray[Any, Any], bounded: np.ndarray[Any, Any],
                   unbounded_marker: str) -> Any:
    if bound.dtype.kind == "f":
        return _array_to_json(bound, {"inf": np.isposinf(bound), "-inf": np.isneginf(bound)})
    # An integer Box holds an infinite bound as the dtype's limit, marked unbounded.
    return _array_to_json(bound, {unbounded_marker: ~bounded})


def _box_schema(space: Box, depth: int) -> dict[str, Any]:
    return {"type": "Box", "dtype": _dtype_name(space.dtype, "Box"), "shape": list(space.shape),
            "low": _bound_to_json(space.low, space.bounded_below, "-inf"),
            "high": _bound_to_json(space.high, space.bounded_above, "inf")}


def _discrete_schema(space: Discrete, depth: int) -> dict[str, Any]:
    return {"type": "Discrete", "dtype": _dtype_name(space.dtype, "Discrete"),
            "n": int(space.n), "start": int(space.start)}


def _multi_discrete_schema(space: MultiDiscrete, depth: int) -> dict[str, Any]:
    return {"type": "MultiDiscrete", "dtype": _dtype_name(space.dtype, "MultiDiscrete"),
            "shape": list(space.shape), "nvec": _array_to_json(space.nvec),
            "start": _array_to_json(space.start)}


def _multi_binary_schema(space: MultiBinary, depth: int) -> dict[str, Any]:
    n = space.n
    return {"type": "MultiBinary", "n": int(n) if isinstance(n, (int, np.integer)) else list(n)}


def _text_schema(space: Text, depth: int) -> dict[str, Any]:
    return {"type": "Text", "min_length": space.min_length, "max_length": space.max_length,
            "charset": "".join(space.character_list)}


def _object_schema(space: ObjectSpace, depth: int) -> dict[str, Any]:
    names = {kind: name for name, kind in OBJECT_TYPES.items()}
    unknown = [kind.__qualname__ for kind in space.types if kind not in names]
    if unknown:
        raise TypeError(f"an ObjectSpace of {', '.join(unknown)} has no wire schema: only "
                        f"values JSON carries cross ({', '.join(OBJECT_TYPES)})")
    return {"type": "Object", "types": [names[kind] for kind in space.types]}


def _dict_schema(space: Dict, depth: int) -> dict[str, Any]:
    pairs = []
    for key, child in space.spaces.items():
        if not isinstance(key, str):
            raise TypeError(f"a Dict space key must be a string to have a wire schema, got {key!r}")
        pairs.append([key, _describe(child, depth + 1)])
    return {"type": "Dict", "spaces": pairs}


def _tuple_schema(space: Tuple[Any], depth: int) -> dict[str, Any]:
    return {"type": "Tuple", "spaces": [_describe(child, depth + 1) for child in space.spaces]}


_DESCRIBERS: dict[type[Any], Callable[[Any, int], dict[str, Any]]] = {
    Box: _box_schema, Discrete: _discrete_schema, MultiDiscrete: _multi_discrete_schema,
    MultiBinary: _multi_binary_schema, Text: _text_schema, ObjectSpace: _object_schema,
    Dict: _dict_schema, Tuple: _tuple_schema,
}


# --- rebuilding -------------------------------------------------------------------------------

def _malformed(where: str, problem: str) -> ValueError:
    return ValueError(f"bad space schema at {where or 'the top'}: {problem}")


def _field(schema: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in schema:
        raise _malformed(where, f"{schema['type']} needs {key!r}")
    return schema[key]


def _is_integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _integer(schema: Mapping[str, Any], key: str, where: str, low: int, high: int) -> int:
    value = _field(schema, key, where)
    if not _is_integer(value):
        raise _malformed(where, f"{key!r} must be an integer, got {value!r:.80}")
    if not low <= value <= high:
        raise _malformed(where, f"{key!r} must be in [{low}, {high}], got {value}")
    return int(value)


def _limits(dtype: np.dtype[Any]) -> tuple[int, int]:
    """The smallest and largest value of a bool or integer dtype."""
    if dtype.kind == "b":
        return 0, 1
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def _fits(value: int | float, dtype: np.dtype[Any]) -> bool:
    """Whether ``value`` converts to ``dtype`` without overflowing (a finite float to a finite
    float: below the largest float plus half its spacing, which still rounds down to it)."""
    if dtype.kind != "f":
        low, high = _limits(dtype)
        return low <= value <= high
    if isinstance(value, float) and math.isinf(value):
        return True
    info = np.finfo(dtype)
    half_spacing = math.ldexp(1.0, int(info.maxexp) - int(info.nmant) - 2)
    return abs(value) < float(info.max) + half_spacing


def _element(value: object, dtype: np.dtype[Any], markers: Mapping[str, int | float],
             where: str, key: str) -> int | float | bool:
    """One element of an ARRAY, checked to fit ``dtype``."""
    if isinstance(value, str):
        if value in markers:
            return markers[value]
        raise _malformed(where, f"{key!r} may not hold {value!r:.80} in a {dtype} space")
    if isinstance(value, bool):
        if dtype.kind == "b":
            return value
        raise _malformed(where, f"{key!r} holds a boolean in a {dtype} space")
    if isinstance(value, int) or (isinstance(value, float) and dtype.kind == "f"):
        if isinstance(value, float) and math.isnan(value):
            raise _malformed(where, f"{key!r} holds NaN")
        if not _fits(value, dtype):
            raise _malformed(where, f"{key!r} holds {value}, out of range for {dtype}")
        return value
    raise _malformed(where, f"{key!r} holds a {type(value).__name__} where a {dtype} space "
                            "needs a number")


def _flatten(value: object, shape: tuple[int, ...], into: list[object], where: str,
             key: str) -> None:
    """Append the leaves of nested lists of ``shape`` to ``into`` (recursion depth: the shape's
    length, at most ``MAX_DIMS``)."""
    if not shape:
        into.append(value)
        return
    if not isinstance(value, (list, tuple)) or len(value) != shape[0]:
        raise _malformed(where, f"{key!r} is neither one value nor nested lists of shape "
                                f"{list(shape)}")
    for item in value:
        _flatten(item, shape[1:], into, where, key)


def _array_from(schema: Mapping[str, Any], key: str, where: str, shape: tuple[int, ...],
                dtype: np.dtype[Any], markers: Mapping[str, int | float] | None = None,
                ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """The ARRAY ``schema[key]`` as a ``dtype`` array of ``shape``, and where it held a
    marker (``"inf"``, ``"-inf"``) that ``markers`` allowed."""
    value = _field(schema, key, where)
    markers = markers or {}
    if isinstance(value, (list, tuple)):
        leaves: list[object] = []
        _flatten(value, shape, leaves, where, key)
        numbers = [_element(leaf, dtype, markers, where, key) for leaf in leaves]
        array = np.array(numbers, dtype=dtype).reshape(shape)
        marked = np.array([isinstance(leaf, str) for leaf in leaves], dtype=bool).reshape(shape)
        return array, marked
    number = _element(value, dtype, markers, where, key)
    return np.full(shape, number, dtype=dtype), np.full(shape, isinstance(value, str))


def _build(where: str, kind: type[_SpaceT], *args: Any, **kwargs: Any) -> _SpaceT:
    """``kind(*args, **kwargs)``, with Gymnasium's own checks failing as a bad schema."""
    try:
        return kind(*args, **kwargs)
    except (TypeError, ValueError, OverflowError) as error:
        raise _malformed(where, f"not a valid {kind.__name__}: {error}") from None


class _SchemaReader:
    """The rebuild of one schema, counting the elements of its spaces against ``MAX_ELEMENTS``."""

    def __init__(self) -> None:
        self.elements_left = MAX_ELEMENTS

    def space(self, schema: object, where: str, depth: int) -> Space[Any]:
        if depth > MAX_SPACE_DEPTH:
            raise _malformed(where, f"nested in more than {MAX_SPACE_DEPTH} Dict/Tuple levels")
        if not isinstance(schema, Mapping):
            raise _malformed(where, f"expected a JSON object, got {type(schema).__name__}")
        kind = schema.get("type")
        read = _READERS.get(kind) if isinstance(kind, str) else None
        if read is None:
            raise _malformed(where, f"unknown space type {kind!r:.80} (expected one of "
                                    f"{', '.join(_READERS)})")
        return read(self, schema, where, depth)

    def _take(self, shape: tuple[int, ...], where: str) -> None:
        size = math.prod(shape)
        if size > self.elements_left:
            raise _malformed(where, f"the spaces would hold more than {MAX_ELEMENTS} elements")
        self.elements_left -= size

    def _shape(self, value: object, where: str, key: str) -> tuple[int, ...]:
        if not isinstance(value, (list, tuple)) or len(value) > MAX_DIMS or not all(
                _is_integer(dim) and 0 <= dim <= MAX_ELEMENTS for dim in value):
            raise _malformed(where, f"{key!r} must be a list of at most {MAX_DIMS} integers in "
                                    f"[0, {MAX_ELEMENTS}], got {value!r:.80}")
        shape = tuple(int(dim) for dim in value)
        self._take(shape, where)
        return shape

    def _dtype(self, schema: Mapping[str, Any], where: str, kinds: str) -> np.dtype[Any]:
        name = _field(schema, "dtype", where)
        dtype = _DTYPES.get(name) if isinstance(name, str) else None
        if dtype is None or dtype.kind not in kinds:
            allowed = [known for known, each in _DTYPES.items() if each.kind in kinds]
            raise _malformed(where, f"a {schema['type']} dtype must be one of {allowed}, "
                                    f"got {name!r:.80}")
        return dtype

    def _box(self, schema: Mapping[str, Any], where: str, depth: int) -> Box:
        dtype = self._dtype(schema, where, "biuf")
        shape = self._shape(_field(schema, "shape", where), where, "shape")
        low_markers: Mapping[str, int | float] = {}
        high_markers: Mapping[str, int | float] = {}
        if dtype.kind == "f":
            low_markers = high_markers = _FLOAT_INFINITIES
        elif dtype.kind == "i":
            minimum, maximum = _limits(dtype)
            low_markers, high_markers = {"-inf": minimum}, {"inf": maximum}
        low, low_unbounded = _array_from(schema, "low", where, shape, dtype, low_markers)
        high, high_unbounded = _array_from(schema, "high", where, shape, dtype, high_markers)
        box = _build(where, Box, low, high, shape, dtype)
        if dtype.kind == "i":
            box.bounded_below &= ~low_unbounded
            box.bounded_above &= ~high_unbounded
        return box

    def _discrete(self, schema: Mapping[str, Any], where: str, depth: int) -> Discrete:
        dtype = self._dtype(schema, where, "iu")
        low, high = _limits(dtype)
        n = _integer(schema, "n", where, 1, high)
        start = _integer(schema, "start", where, low, high)
        return _build(where, Discrete, n, start=start, dtype=dtype)

    def _multi_discrete(self, schema: Mapping[str, Any], where: str,
                        depth: int) -> MultiDiscrete:
        dtype = self._dtype(schema, where, "iu")
        shape = self._shape(_field(schema, "shape", where), where, "shape")
        nvec, _ = _array_from(schema, "nvec", where, shape, dtype)
        start, _ = _array_from(schema, "start", where, shape, dtype)
        return _build(where, MultiDiscrete, nvec, dtype=dtype, start=start)

    def _multi_binary(self, schema: Mapping[str, Any], where: str, depth: int) -> MultiBinary:
        n = _field(schema, "n", where)
        shape = self._shape([n] if _is_integer(n) else n, where, "n")
        return _build(where, MultiBinary, shape[0] if _is_integer(n) else list(shape))

    def _text(self, schema: Mapping[str, Any], where: str, depth: int) -> Text:
        min_length = _integer(schema, "min_length", where, 0, MAX_ELEMENTS)
        max_length = _integer(schema, "max_length", where, 0, MAX_ELEMENTS)
        charset = _field(schema, "charset", where)
        if not isinstance(charset, str):
            raise _malformed(where, f"'charset' must be a string, got {type(charset).__name__}")
        self._take((len(charset),), where)
        return _build(where, Text, max_length, min_length=min_length, charset=charset)

    def _object(self, schema: Mapping[str, Any], where: str, depth: int) -> ObjectSpace:
        names = _field(schema, "types", where)
        if not (isinstance(names, (list, tuple)) and len(names) <= len(OBJECT_TYPES)
                and all(isinstance(name, str) and name in OBJECT_TYPES for name in names)):
            raise _malformed(where, f"an Object's 'types' must be a list of names among "
                                    f"{list(OBJECT_TYPES)}, got {names!r:.80}")
        return ObjectSpace([OBJECT_TYPES[name] for name in names])

    def _dict(self, schema: Mapping[str, Any], where: str, depth: int) -> Dict:
        pairs = _field(schema, "spaces", where)
        if not isinstance(pairs, (list, tuple)):
            raise _malformed(where, "a Dict's 'spaces' must be a list of [key, schema] pairs")
        children: dict[str, Space[Any]] = {}
        for pair in pairs:
            if not (isinstance(pair, (list, tuple)) and len(pair) == 2
                    and isinstance(pair[0], str)):
                raise _malformed(where, f"a Dict's 'spaces' must be a list of [key, schema] "
                                        f"pairs with string keys, got {pair!r:.80}")
            key, child = pair
            if key in children:
                raise _malformed(where, f"the Dict key {key!r:.80} appears twice")
            children[key] = self.space(child, f"{where}[{key!r}]", depth + 1)
        return _build(where, Dict, list(children.items()))

    def _tuple(self, schema: Mapping[str, Any], where: str, depth: int) -> Tuple[Any]:
        children = _field(schema, "spaces", where)
        if not isinstance(children, (list, tuple)):
            raise _malformed(where, "a Tuple's 'spaces' must be a list of schemas")
        return _build(where, Tuple, [self.space(child, f"{where}[{index}]", depth + 1)
                                     for index, child in enumerate(children)])


_READERS: dict[str, Callable[[_SchemaReader, Mapping[str, Any], str, int], Space[Any]]] = {
    "Box": _SchemaReader._box, "Discrete": _SchemaReader._discrete,
    "MultiDiscrete": _SchemaReader._multi_discrete, "MultiBinary": _SchemaReader._multi_binary,
    "Text": _SchemaReader._text, "Object": _SchemaReader._object, "Dict": _SchemaReader._dict,
    "Tuple": _SchemaReader._tuple,
}
