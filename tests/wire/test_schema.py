"""Spaces as JSON schemas: every kind survives the round trip through JSON text, compactly, and
a malformed schema from a peer fails with ``ValueError`` saying where."""

from __future__ import annotations

import contextlib
import copy
import json
import random
from typing import Any

import numpy as np
import pytest
from gymnasium import Space
from gymnasium.spaces import (
    Box,
    Dict,
    Discrete,
    Graph,
    MultiBinary,
    MultiDiscrete,
    OneOf,
    Sequence,
    Text,
    Tuple,
)
from gymnasium.vector.utils import batch_space

from aiovec._wire._schema import (
    MAX_DIMS,
    MAX_ELEMENTS,
    MAX_SPACE_DEPTH,
    space_from_schema,
    space_to_schema,
)

INF = np.inf
CARTPOLE = Box(np.array([-4.8, -INF, -0.42, -INF], np.float32),
               np.array([4.8, INF, 0.42, INF], np.float32))

SPACES: dict[str, Space[Any]] = {
    "box": Box(-1.0, 1.0, (3,)),
    "box-cartpole": CARTPOLE,
    "box-float64-unbounded": Box(-INF, INF, (2, 2), np.float64),
    "box-float16": Box(-2.5, 65504.0, (4,), np.float16),
    "box-float32-extremes": Box(np.array([np.finfo(np.float32).min, np.finfo(np.float32).tiny,
                                          -1e-45], np.float32),
                                np.array([np.finfo(np.float32).max, 1.0, 0.0], np.float32)),
    "box-scalar": Box(0.0, 1.0, ()),
    "box-empty": Box(0.0, 1.0, (0, 3)),
    "box-half-bounded": Box(0.0, INF, (2,)),
    "box-uint8-image": Box(0, 255, (8, 8, 3), np.uint8),
    "box-int32-unbounded": Box(-INF, INF, (2, 3), np.int32),
    "box-int32-mixed": Box(np.array([0, -INF]), np.array([INF, 3]), dtype=np.int32),
    "box-int64-beyond-2**53": Box(np.array([-(2**62), 2**53 + 1]), np.array([2**62, 2**63 - 1]),
                                  dtype=np.int64),
    "box-uint64-max": Box(0, np.iinfo(np.uint64).max, (2,), np.uint64),
    "box-bool": Box(0, 1, (5,), bool),
    "box-signed-zeros": Box(np.array([-0.0, 0.0], np.float32), np.array([1.0, 1.0], np.float32)),
    "box-non-uniform-2d": Box(np.arange(6.0).reshape(2, 3), np.arange(6.0).reshape(2, 3) + 0.1,
                              dtype=np.float64),
    "discrete": Discrete(4),
    "discrete-start": Discrete(3, start=-2),
    "discrete-int32": Discrete(5, start=7, dtype=np.int32),
    "discrete-uint8": Discrete(255, dtype=np.uint8),
    "multi-discrete": MultiDiscrete([2, 3, 4]),
    "multi-discrete-2d-start": MultiDiscrete(np.array([[2, 3], [4, 5]]), start=[[1, -1], [0, 9]]),
    "multi-discrete-int32": MultiDiscrete([3, 3], dtype=np.int32),
    "multi-binary": MultiBinary(5),
    "multi-binary-shape": MultiBinary([2, 3]),
    "text": Text(8),
    "text-charset": Text(5, min_length=0, charset="zyx!é"),
    "dict": Dict({"position": Box(-1.0, 1.0, (2,)), "gear": Discrete(3, start=1)}),
    "dict-unsorted-keys": Dict([("zeta", Discrete(2)), ("alpha", MultiBinary(2))]),
    "tuple": Tuple([Discrete(2), Box(0, 255, (2,), np.uint8), Text(3)]),
    "nested": Dict({"outer": Tuple([Dict({"inner": CARTPOLE}), MultiDiscrete([2, 2])]),
                    "empty": Dict({}), "none": Tuple([])}),
    "batched-box": batch_space(CARTPOLE, 4),
    "batched-uniform-box": batch_space(Box(0, 255, (3, 3), np.uint8), 16),
    "batched-discrete": batch_space(Discrete(3, start=2), 5),
    "batched-multi-discrete": batch_space(MultiDiscrete([2, 3], start=[1, -1]), 3),
    "batched-multi-binary": batch_space(MultiBinary([2, 2]), 2),
    "batched-dict": batch_space(Dict({"a": Discrete(2), "b": Tuple([Box(-1, 1), Text(4)])}), 3),
}


def _json_trip(schema: dict[str, Any]) -> Any:
    """The schema through strict JSON text, as a peer receives it."""
    return json.loads(json.dumps(schema, allow_nan=False))


def _assert_plain_json(value: Any, path: str = "schema") -> None:
    """Only dict (string keys), list, str, int, float, bool and None: no tuples, no numpy."""
    if isinstance(value, dict):
        for key, item in value.items():
            assert type(key) is str, f"{path}: key {key!r}"
            _assert_plain_json(item, f"{path}[{key!r}]")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _assert_plain_json(item, f"{path}[{index}]")
    else:
        assert type(value) in (str, int, float, bool, type(None)), f"{path}: {type(value)}"


def _assert_same_space(actual: Space[Any], expected: Space[Any], path: str = "space") -> None:
    """Stricter than Gymnasium's ``==``: exact bounds and flags, dtypes, key and charset order."""
    assert type(actual) is type(expected), path
    assert actual == expected, path
    if isinstance(expected, Box):
        assert actual.dtype == expected.dtype and actual.shape == expected.shape, path
        assert actual.low.dtype == expected.dtype and actual.high.dtype == expected.dtype, path
        assert actual.low.tobytes() == expected.low.tobytes(), path
        assert actual.high.tobytes() == expected.high.tobytes(), path
        assert np.array_equal(actual.bounded_below, expected.bounded_below), path
        assert np.array_equal(actual.bounded_above, expected.bounded_above), path
    elif isinstance(expected, Discrete):
        assert type(actual.n) is type(expected.n) and type(actual.start) is type(expected.start)
    elif isinstance(expected, MultiDiscrete):
        assert actual.nvec.dtype == expected.nvec.dtype, path
        assert actual.start.dtype == expected.start.dtype, path
    elif isinstance(expected, Text):
        assert actual.character_list == expected.character_list, path
        assert (actual.min_length, actual.max_length) == (expected.min_length,
                                                          expected.max_length)
    elif isinstance(expected, Dict):
        assert list(actual.spaces) == list(expected.spaces), path
        for key in expected.spaces:
            _assert_same_space(actual[key], expected[key], f"{path}[{key!r}]")
    elif isinstance(expected, Tuple):
        assert len(actual.spaces) == len(expected.spaces), path
        for index, (child, expected_child) in enumerate(zip(actual.spaces, expected.spaces)):
            _assert_same_space(child, expected_child, f"{path}[{index}]")


@pytest.mark.parametrize("space", SPACES.values(), ids=SPACES.keys())
def test_every_space_kind_survives_json(space: Space[Any]) -> None:
    schema = space_to_schema(space)
    _assert_plain_json(schema)
    rebuilt = space_from_schema(_json_trip(schema))
    _assert_same_space(rebuilt, space)
    assert space_to_schema(rebuilt) == schema


def test_the_schema_names_the_kind_and_numpy_dtype() -> None:
    assert space_to_schema(Box(0, 1, (2,), np.float32)) == {
        "type": "Box", "dtype": "float32", "shape": [2], "low": 0.0, "high": 1.0}
    assert space_to_schema(Discrete(3, start=-1)) == {
        "type": "Discrete", "dtype": "int64", "n": 3, "start": -1}
    assert space_to_schema(MultiBinary([2, 3])) == {"type": "MultiBinary", "n": [2, 3]}
    assert space_to_schema(Text(4, min_length=0, charset="ba")) == {
        "type": "Text", "min_length": 0, "max_length": 4, "charset": "ba"}


def test_uniform_bounds_are_one_value() -> None:
    schema = space_to_schema(Box(0, 255, (64, 84, 84, 3), np.uint8))
    assert (schema["low"], schema["high"]) == (0, 255)
    assert len(json.dumps(schema)) < 120
    batched = space_to_schema(batch_space(Discrete(5, start=1), 256))
    assert (batched["nvec"], batched["start"], batched["shape"]) == (5, 1, [256])


def test_non_uniform_bounds_are_nested_lists_in_the_shape() -> None:
    space = Box(np.arange(6.0).reshape(2, 3), np.full((2, 3), 10.0), dtype=np.float64)
    schema = space_to_schema(space)
    assert schema["low"] == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert schema["high"] == 10.0
    nvec = space_to_schema(MultiDiscrete([[2, 3], [4, 5]]))["nvec"]
    assert nvec == [[2, 3], [4, 5]]


def test_infinite_bounds_are_strings() -> None:
    schema = space_to_schema(CARTPOLE)
    assert schema["low"] == [-4.8, "-inf", -0.42, "-inf"]
    assert schema["high"] == [4.8, "inf", 0.42, "inf"]
    unbounded = space_to_schema(Box(-INF, INF, (3,)))
    assert (unbounded["low"], unbounded["high"]) == ("-inf", "inf")


def test_a_float_bound_is_the_shortest_number_that_round_trips() -> None:
    assert space_to_schema(Box(-0.1, 0.3, (2,), np.float16))["low"] == -0.1
    largest = space_to_schema(Box(0.0, np.finfo(np.float32).max, (1,)))["high"]
    assert largest == 3.4028235e38 > float(np.finfo(np.float32).max)
    almost = space_from_schema(_box(dtype="float16", low=65519.0, high=65519.0))
    assert almost.high[0] == 65504.0


def test_an_unbounded_integer_box_stays_unbounded() -> None:
    """Gymnasium holds -inf as the dtype's minimum, marked unbounded: sampling depends on it."""
    space = Box(np.array([0, -INF, 1]), np.array([INF, 3, 2]), dtype=np.int16)
    schema = space_to_schema(space)
    assert schema["low"] == [0, "-inf", 1] and schema["high"] == ["inf", 3, 2]
    rebuilt = space_from_schema(_json_trip(schema))
    assert rebuilt.bounded_below.tolist() == [True, False, True]
    assert rebuilt.bounded_above.tolist() == [False, True, True]
    assert rebuilt.low[1] == np.iinfo(np.int16).min and rebuilt.high[0] == np.iinfo(np.int16).max


def test_the_rebuilt_space_samples_like_the_original() -> None:
    space = SPACES["nested"]
    rebuilt = space_from_schema(_json_trip(space_to_schema(space)))
    space.seed(7)
    rebuilt.seed(7)
    for _ in range(5):
        sample, rebuilt_sample = space.sample(), rebuilt.sample()
        assert json.dumps(_plain(sample)) == json.dumps(_plain(rebuilt_sample))


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return [_plain(item) for item in value]
    return np.asarray(value).tolist()


@pytest.mark.parametrize("space", [
    Graph(node_space=Box(0, 1, (2,)), edge_space=Discrete(2)),
    Sequence(Discrete(2)),
    OneOf([Discrete(2), Box(0, 1)]),
    Tuple([Discrete(2), Sequence(Discrete(2))]),
], ids=["graph", "sequence", "oneof", "sequence-in-tuple"])
def test_an_unsupported_space_is_a_type_error_naming_it(space: Space[Any]) -> None:
    name = "Sequence" if isinstance(space, Tuple) else type(space).__name__
    with pytest.raises(TypeError, match=f"a {name} space has no wire schema"):
        space_to_schema(space)


def test_a_box_of_an_exotic_dtype_or_a_non_string_key_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"longdouble|float128"):
        space_to_schema(Box(0, 1, (2,), np.longdouble))
    with pytest.raises(TypeError, match="string"):
        space_to_schema(Dict({1: Discrete(2)}))  # type: ignore[dict-item]


def _nested_tuples(levels: int) -> Space[Any]:
    space: Space[Any] = Discrete(2)
    for _ in range(levels):
        space = Tuple([space])
    return space


def test_nesting_is_bounded_on_both_ends() -> None:
    deepest = _nested_tuples(MAX_SPACE_DEPTH)
    assert space_from_schema(_json_trip(space_to_schema(deepest))) == deepest
    with pytest.raises(ValueError, match="nested"):
        space_to_schema(_nested_tuples(MAX_SPACE_DEPTH + 1))
    schema: dict[str, Any] = {"type": "Discrete", "dtype": "int64", "n": 2, "start": 0}
    for _ in range(MAX_SPACE_DEPTH + 1):
        schema = {"type": "Tuple", "spaces": [schema]}
    with pytest.raises(ValueError, match="nested"):
        space_from_schema(schema)


def test_a_schema_nested_past_the_recursion_limit_is_a_value_error() -> None:
    schema: dict[str, Any] = {"type": "Discrete", "dtype": "int64", "n": 2, "start": 0}
    for index in range(20_000):
        schema = ({"type": "Tuple", "spaces": [schema]} if index % 2
                  else {"type": "Dict", "spaces": [["k", schema]]})
    with pytest.raises(ValueError, match="nested"):
        space_from_schema(schema)


def _box(**fields: Any) -> dict[str, Any]:
    return {"type": "Box", "dtype": "float32", "shape": [3], "low": 0.0, "high": 1.0, **fields}


def _discrete(**fields: Any) -> dict[str, Any]:
    return {"type": "Discrete", "dtype": "int64", "n": 3, "start": 0, **fields}


MALFORMED: dict[str, tuple[Any, str]] = {
    "not-an-object": ([1, 2], "expected a JSON object"),
    "a-string": ("Box", "expected a JSON object"),
    "no-type": ({"dtype": "float32"}, "unknown space type None"),
    "unknown-type": ({"type": "Graph"}, "unknown space type 'Graph'"),
    "type-not-a-string": ({"type": ["Box"]}, "unknown space type"),
    "box-no-low": ({k: v for k, v in _box().items() if k != "low"}, "Box needs 'low'"),
    "box-no-shape": ({k: v for k, v in _box().items() if k != "shape"}, "Box needs 'shape'"),
    "box-object-dtype": (_box(dtype="object"), "dtype must be one of"),
    "box-numpy-code-dtype": (_box(dtype="O"), "dtype must be one of"),
    "box-structured-dtype": (_box(dtype="f4,f4"), "dtype must be one of"),
    "box-dtype-not-a-string": (_box(dtype=5), "dtype must be one of"),
    "box-shape-a-string": (_box(shape="3"), "'shape' must be a list"),
    "box-shape-negative": (_box(shape=[-1]), "'shape' must be a list"),
    "box-shape-bool": (_box(shape=[True]), "'shape' must be a list"),
    "box-shape-float": (_box(shape=[3.0]), "'shape' must be a list"),
    "box-too-many-dims": (_box(shape=[1] * (MAX_DIMS + 1)), "'shape' must be a list"),
    "box-huge-dim": (_box(shape=[0, 2**62]), "'shape' must be a list"),
    "box-too-many-elements": (_box(shape=[2**13, 2**13, 2**13]), "more than"),
    "box-low-wrong-length": (_box(low=[0.0, 1.0]), "'low' is neither one value nor"),
    "box-low-wrong-nesting": (_box(low=[[0.0], [0.0], [0.0]]), "holds a list"),
    "box-low-ragged": (_box(shape=[2, 2], low=[[0.0, 0.0], [0.0]]), "nested lists of shape"),
    "box-low-nan-string": (_box(low="nan"), "may not hold 'nan'"),
    "box-low-nan": (_box(low=float("nan")), "NaN"),
    "box-low-null": (_box(low=None), "needs a number"),
    "box-low-bool-in-float": (_box(low=False), "boolean"),
    "box-low-over-float32": (_box(low=-1e300), "out of range for float32"),
    "box-low-rounds-to-inf": (_box(low=-3.4028236e38), "out of range for float32"),
    "box-float16-halfway-to-inf": (_box(dtype="float16", high=65520.0), "out of range"),
    "box-float-huge-integer": (_box(high=10**400), "out of range for float32"),
    "box-low-above-high": (_box(low=2.0), "not a valid Box"),
    "box-uint8-minus-inf": (_box(dtype="uint8", low="-inf", high=3), "may not hold '-inf'"),
    "box-int-inf-low": (_box(dtype="int32", low="inf", high="inf"), "may not hold 'inf'"),
    "box-uint8-300": (_box(dtype="uint8", low=0, high=300), "out of range for uint8"),
    "box-int-fraction": (_box(dtype="int32", low=0.5), "needs a number"),
    "box-int64-beyond": (_box(dtype="int64", low=0, high=2**64), "out of range for int64"),
    "box-bool-two": (_box(dtype="bool", low=0, high=2), "out of range for bool"),
    "discrete-n-zero": (_discrete(n=0), "'n' must be in"),
    "discrete-n-string": (_discrete(n="3"), "'n' must be an integer"),
    "discrete-n-bool": (_discrete(n=True), "'n' must be an integer"),
    "discrete-n-huge": (_discrete(n=2**70), "'n' must be in"),
    "discrete-start-out-of-int8": (_discrete(dtype="int8", start=200), "'start' must be in"),
    "discrete-float-dtype": (_discrete(dtype="float32"), "dtype must be one of"),
    "discrete-no-start": ({"type": "Discrete", "dtype": "int64", "n": 3}, "needs 'start'"),
    "multi-discrete-zero": ({"type": "MultiDiscrete", "dtype": "int64", "shape": [2],
                             "nvec": [2, 0], "start": 0}, "not a valid MultiDiscrete"),
    "multi-discrete-shape": ({"type": "MultiDiscrete", "dtype": "int64", "shape": [2],
                              "nvec": [2, 2, 2], "start": 0}, "'nvec' is neither"),
    "multi-binary-zero": ({"type": "MultiBinary", "n": 0}, "not a valid MultiBinary"),
    "multi-binary-negative": ({"type": "MultiBinary", "n": [2, -1]}, "'n' must be a list"),
    "multi-binary-float": ({"type": "MultiBinary", "n": 3.5}, "'n' must be a list"),
    "text-min-above-max": ({"type": "Text", "min_length": 5, "max_length": 2, "charset": "ab"},
                           "not a valid Text"),
    "text-charset-list": ({"type": "Text", "min_length": 1, "max_length": 2,
                           "charset": ["a"]}, "'charset' must be a string"),
    "text-huge": ({"type": "Text", "min_length": 1, "max_length": 2**40, "charset": "a"},
                  "'max_length' must be in"),
    "dict-spaces-object": ({"type": "Dict", "spaces": {"a": _box()}}, "pairs"),
    "dict-pair-length": ({"type": "Dict", "spaces": [["a"]]}, "pairs"),
    "dict-key-not-string": ({"type": "Dict", "spaces": [[1, _box()]]}, "string keys"),
    "dict-duplicate-key": ({"type": "Dict", "spaces": [["a", _box()], ["a", _box()]]},
                           "appears twice"),
    "dict-bad-child-says-where": ({"type": "Dict", "spaces": [["obs", _box(low="x")]]},
                                  r"at \['obs'\]: 'low' may not hold 'x'"),
    "tuple-spaces-object": ({"type": "Tuple", "spaces": {"0": _box()}}, "list of schemas"),
    "tuple-bad-child-says-where": ({"type": "Tuple", "spaces": [_box(), None]},
                                   r"at \[1\]: expected a JSON object"),
    "elements-summed-over-children": ({"type": "Tuple", "spaces": [
        _box(dtype="uint8", low=0, high=1, shape=[MAX_ELEMENTS // 2 + 1])] * 2}, "more than"),
}


@pytest.mark.parametrize(("schema", "message"), MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_schema_is_a_value_error_saying_what(schema: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        space_from_schema(schema)
    assert str(caught.value).startswith("bad space schema at ")


def _nodes(tree: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The path of every node of a JSON tree (the root's is empty)."""
    found = [path]
    if isinstance(tree, dict):
        for key, item in tree.items():
            found += _nodes(item, (*path, key))
    elif isinstance(tree, list):
        for index, item in enumerate(tree):
            found += _nodes(item, (*path, index))
    return found


STRANGE_VALUES = [None, True, -1, 0, 1, 2**70, -(2**70), 0.5, float("nan"), float("inf"), "inf",
                  "-inf", "Box", "", [], [[]], [1, 2], {}, {"type": "Box"}, [0] * 40]


@pytest.mark.parametrize("name", SPACES.keys())
def test_a_tampered_schema_rebuilds_or_is_a_value_error(name: str) -> None:
    """Replace or delete one node of a valid schema, many times over: nothing but a space or a
    ValueError comes out (no KeyError, IndexError, TypeError, overflow or warning)."""
    original = _json_trip(space_to_schema(SPACES[name]))
    chooser = random.Random(name)
    paths = _nodes(original)
    for _ in range(150):
        schema = copy.deepcopy(original)
        path = chooser.choice(paths)
        if not path:
            schema = chooser.choice(STRANGE_VALUES)
        else:
            parent = schema
            for step in path[:-1]:
                parent = parent[step]
            if isinstance(parent, dict) and chooser.random() < 0.3:
                del parent[path[-1]]
            else:
                parent[path[-1]] = copy.deepcopy(chooser.choice(STRANGE_VALUES))
        with contextlib.suppress(ValueError):
            space_from_schema(schema)
