"""Messages as JSON and as binary frames: every dtype and tree survives a frame bit for bit, the
frame follows the layout its module documents, and a malformed frame is a ``ValueError``."""

from __future__ import annotations

import contextlib
import enum
import json
import math
import random
import struct
from typing import Any

import numpy as np
import pytest

from aiovec._wire import _codec, _convert
from aiovec._wire._codec import (
    FRAME_MAGIC,
    MAX_DEPTH,
    MAX_DIMS,
    RAW_DTYPES,
    FrameTooDeep,
    decode_frame,
    encode_frame,
    is_frame,
    to_jsonable,
)
from tests.helpers import assert_identical

DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
          "float16", "float32", "float64", "complex64", "complex128"]
SHAPES = [(), (0,), (5,), (3, 4), (2, 0, 3), (1, 1, 1, 2)]


def _array(dtype: str, shape: tuple[int, ...], seed: int = 0) -> np.ndarray[Any, Any]:
    """Random bits of ``dtype`` (floats include NaN payloads, infinities, -0.0)."""
    size = math.prod(shape)
    if dtype == "bool":
        return np.asarray(np.random.default_rng(seed).random(size) < 0.5).reshape(shape)
    itemsize = np.dtype(dtype).itemsize
    raw = np.random.default_rng(seed).integers(0, 256, size * itemsize, dtype=np.uint8)
    return raw.view(dtype).reshape(shape)


def _trip(message: Any) -> Any:
    return decode_frame(encode_frame(message))


def _step_message(num_envs: int = 64) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    return {"observations": rng.random((num_envs, 4), dtype=np.float32),
            "rewards": rng.random(num_envs), "terminations": rng.random(num_envs) < 0.1,
            "truncations": np.zeros(num_envs, bool), "infos": {}}


# --- round trips ------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
def test_an_array_comes_back_bit_for_bit(dtype: str, shape: tuple[int, ...]) -> None:
    array = _array(dtype, shape)
    assert type(array) is np.ndarray and array.shape == shape
    decoded = _trip({"x": array})["x"]
    assert_identical(decoded, array)
    assert decoded.flags.c_contiguous and decoded.flags.writeable and decoded.flags.owndata


def test_arrays_are_copies_that_outlive_a_reused_buffer() -> None:
    buffer = bytearray(encode_frame({"a": np.arange(4.0), "b": np.array([True, False])}))
    decoded = decode_frame(buffer)
    buffer[:] = bytes(len(buffer))
    assert decoded["a"].tolist() == [0.0, 1.0, 2.0, 3.0] and decoded["b"].tolist() == [True, False]
    decoded["a"][0] = 9.0


@pytest.mark.parametrize("layout", ["strided", "transposed", "fortran", "big-endian",
                                    "big-endian-strided", "read-only", "negative-strides"])
def test_any_memory_layout_comes_back_c_contiguous_little_endian(layout: str) -> None:
    base = _array("float32", (6, 5), seed=3)
    array = {"strided": base[::2, 1::2], "transposed": base.T,
             "fortran": np.asfortranarray(base), "big-endian": base.astype(">f4"),
             "big-endian-strided": base.astype(">f4")[:, ::2], "read-only": base.copy(),
             "negative-strides": base[::-1, ::-1]}[layout]
    array.flags.writeable = layout != "read-only"
    decoded = _trip(array)
    expected = np.ascontiguousarray(array, dtype="<f4")
    assert_identical(decoded, expected)
    assert decoded.flags.c_contiguous and decoded.flags.writeable


def test_a_step_message_comes_back_bit_for_bit() -> None:
    message = _step_message()
    assert_identical(_trip(message), message)


def test_a_nested_tree_comes_back_with_tuples_as_lists_and_numpy_scalars_as_python() -> None:
    message = {"a": [1, 2.5, "s", None, True, (np.arange(3), {"b": np.float32(1.5)})],
               "c": {"d": {"e": [[], {}, ()]}}, "f": np.int64(-3), "g": np.bool_(True),
               "h": np.float64("nan"), "i": float("-inf"), "j": np.str_("text"),
               "k": np.zeros((2, 2), np.uint8)}
    expected = {"a": [1, 2.5, "s", None, True, [np.arange(3), {"b": 1.5}]],
                "c": {"d": {"e": [[], {}, []]}}, "f": -3, "g": True, "h": float("nan"),
                "i": float("-inf"), "j": "text", "k": np.zeros((2, 2), np.uint8)}
    assert_identical(_trip(message), expected)


@pytest.mark.parametrize("message", [
    {"$array": 0},
    {"$array": np.arange(2)},
    {"$$array": 1, "$": 2, "$x": [{"$array": "no"}], "a$": 3},
    [{"$array": 0}, np.arange(3), {"$array": 1}],
    {"$array": {"$array": {"$array": np.ones(1)}}},
], ids=["placeholder-lookalike", "lookalike-holding-an-array", "dollar-keys",
        "lookalikes-beside-arrays", "nested-lookalikes"])
def test_user_keys_that_look_like_the_placeholder_come_back_unchanged(message: Any) -> None:
    assert_identical(_trip(message), message)


def test_non_string_keys_become_strings_in_both_forms() -> None:
    message = {1: "a", (1, 2): "b", None: "c", np.int64(4): "d", "$5": "e"}
    expected = {"1": "a", "(1, 2)": "b", "None": "c", "4": "d", "$5": "e"}
    assert_identical(_trip(message), expected)
    assert_identical(to_jsonable(message), expected)


def test_string_and_date_arrays_go_as_json_trees() -> None:
    message = {"text": np.array([["x", "yz"]]),
               "dates": np.array(["2020-01-02"], dtype="datetime64[D]"),
               "long": np.array([1.5], dtype=np.longdouble)}
    expected = {"text": [["x", "yz"]], "dates": ["datetime.date(2020, 1, 2)"], "long": [1.5]}
    assert_identical(_trip(message), expected)


def test_a_frame_and_json_carry_the_same_tree() -> None:
    """Differential: decoding a frame, then rendering it as JSON, gives the JSON form."""
    objects = np.empty(2, dtype=object)
    objects[:] = [{"k": np.float32(0.5)}, None]
    message = {**_step_message(4), "infos": {
        "episode": {"r": np.array([1.0, np.nan]), "_r": np.array([True, False])},
        "final_obs": objects, "names": ("a", "b"), "weird": object, "n": np.uint8(7)}}
    direct = json.dumps(to_jsonable(message), allow_nan=True)
    assert json.dumps(to_jsonable(_trip(message)), allow_nan=True) == direct


# --- the documented layout --------------------------------------------------------------------

def test_the_frame_follows_the_documented_layout() -> None:
    """Parse a frame by the docstring's spec alone, as a client in another language would."""
    message = {"obs": np.arange(6, dtype=">i2").reshape(2, 3), "flag": np.array(True),
               "r": np.array([0.5], np.float32), "x": [1, np.nan]}
    frame = encode_frame(message)
    assert frame[:4] == FRAME_MAGIC == b"\x89AV1"
    header_size = int.from_bytes(frame[4:8], "little")
    header = json.loads(frame[8:8 + header_size].decode("utf-8"))
    data_start = -(-(8 + header_size) // 8) * 8
    assert frame[8 + header_size:data_start] == bytes(data_start - 8 - header_size)
    assert header["tree"] == {"obs": {"$array": 0}, "flag": {"$array": 1},
                              "r": {"$array": 2}, "x": [1, header["tree"]["x"][1]]}
    assert math.isnan(header["tree"]["x"][1])
    assert b"NaN" in frame[8:8 + header_size]
    expected = [np.arange(6, dtype="<i2").reshape(2, 3), np.array(True),
                np.array([0.5], np.float32)]
    ends = []
    for (dtype, shape, offset, nbytes), array in zip(header["arrays"], expected):
        assert (dtype, shape, nbytes) == (array.dtype.str, list(array.shape), array.nbytes)
        assert offset % 8 == 0 and dtype in RAW_DTYPES
        assert frame[data_start + offset:data_start + offset + nbytes] == array.tobytes()
        ends.append(offset + nbytes)
    assert len(frame) == data_start + max(ends)


def test_a_frame_is_much_smaller_than_json() -> None:
    message = _step_message()
    assert len(encode_frame(message)) * 3 < len(json.dumps(to_jsonable(message)))


def test_is_frame_tells_a_frame_from_json() -> None:
    frame = encode_frame({"a": 1})
    assert is_frame(frame) and is_frame(bytearray(frame)) and is_frame(memoryview(frame))
    assert is_frame(b"\x89AV2 a later version")
    assert not is_frame(b'{"op": "step"}') and not is_frame('{"op": "step"}')
    assert not is_frame(b"") and not is_frame(b"\x89A") and not is_frame(None)


def test_a_frame_is_read_from_any_bytes_like_object() -> None:
    message = _step_message(3)
    frame = encode_frame(message)
    for data in (bytearray(frame), memoryview(frame), memoryview(frame).cast("B", (len(frame),))):
        assert_identical(decode_frame(data), message)
    padded = bytearray(b"xx" + frame)
    assert_identical(decode_frame(memoryview(padded)[2:]), message)


# --- nesting ----------------------------------------------------------------------------------

def _nested_lists(levels: int, leaf: Any) -> Any:
    value = leaf
    for _ in range(levels):
        value = [value]
    return value


def test_nesting_up_to_the_limit_survives_and_deeper_becomes_a_repr() -> None:
    deepest = _nested_lists(MAX_DEPTH + 1, np.arange(2))  # containers at depth 0..MAX_DEPTH
    assert_identical(_trip(deepest), deepest)
    deeper = _trip(_nested_lists(MAX_DEPTH + 2, 7))
    innermost = deeper
    for _ in range(MAX_DEPTH + 1):
        innermost = innermost[0]
    assert innermost == "[7]"


def test_cycles_and_very_deep_trees_are_cut_not_raised() -> None:
    cycle: list[Any] = [1]
    cycle.append(cycle)
    looped = np.empty((), dtype=object)
    looped[()] = looped
    very_deep = _nested_lists(50_000, 0)
    for value in (cycle, looped, very_deep, {"info": cycle}):
        json.dumps(to_jsonable(value), allow_nan=True)
        decode_frame(encode_frame(value))


# --- to_jsonable ------------------------------------------------------------------------------

class Color(enum.IntEnum):
    RED = 1


class BrokenRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no")


def test_to_jsonable_turns_numpy_into_python() -> None:
    assert_identical(to_jsonable(np.float32(1.5)), 1.5)
    assert_identical(to_jsonable(np.int64(-2)), -2)
    assert_identical(to_jsonable(np.uint8(200)), 200)
    assert_identical(to_jsonable(np.bool_(False)), False)
    assert_identical(to_jsonable(np.str_("s")), "s")
    assert_identical(to_jsonable(np.float16(0.25)), 0.25)
    assert_identical(to_jsonable(np.longdouble(2.5)), 2.5)
    array = np.arange(12, dtype=np.float32).reshape(3, 4) / 3
    assert_identical(to_jsonable(array), array.tolist())
    assert_identical(to_jsonable(np.arange(3, dtype=">i4")), [0, 1, 2])
    assert_identical(to_jsonable(np.array(True)), True)
    assert_identical(to_jsonable({"t": (1, np.zeros(2, bool))}), {"t": [1, [False, False]]})


def test_to_jsonable_goes_into_object_arrays() -> None:
    objects = np.empty((2, 2), dtype=object)
    objects[:] = [[np.float32(1.0), None], [{"a": np.arange(2)}, "x"]]
    assert_identical(to_jsonable(objects), [[1.0, None], [{"a": [0, 1]}, "x"]])


def test_to_jsonable_leaves_non_finite_floats_for_json_with_nan() -> None:
    converted = to_jsonable({"x": np.array([np.nan, np.inf, -np.inf]), "y": float("nan")})
    assert math.isnan(converted["x"][0]) and converted["x"][1:] == [math.inf, -math.inf]
    assert math.isnan(converted["y"])
    assert json.dumps(converted, allow_nan=True) == (
        '{"x": [NaN, Infinity, -Infinity], "y": NaN}')


def test_to_jsonable_writes_anything_else_as_its_repr_and_never_raises() -> None:
    converted = to_jsonable({"obj": object, "enum": Color.RED, "bytes": b"\x00",
                             "complex": np.complex64(1 + 2j), "set": {1}, "broken": BrokenRepr(),
                             "complexes": np.array([1j])})
    assert converted == {"obj": "<class 'object'>", "enum": 1, "bytes": "b'\\x00'",
                         "complex": "(1+2j)", "set": "{1}", "broken": "<BrokenRepr object>",
                         "complexes": ["1j"]}
    assert type(converted["enum"]) is int
    json.dumps(converted)


# --- malformed frames -------------------------------------------------------------------------

def _frame(header: Any, data: bytes = b"", *, raw_header: bytes | None = None) -> bytes:
    """A frame laid out by the spec around any header and data, however wrong they are."""
    text = raw_header if raw_header is not None else json.dumps(header).encode()
    end = 8 + len(text)
    return (FRAME_MAGIC + len(text).to_bytes(4, "little") + text
            + bytes(-(-end // 8) * 8 - end) + data)


def _one_array(entry: list[Any], data: bytes = bytes(8), tree: Any = None) -> bytes:
    return _frame({"arrays": [entry], "tree": {"$array": 0} if tree is None else tree}, data)


def test_the_frame_helper_builds_valid_frames() -> None:
    """The malformed frames below differ from a valid one only where they say."""
    assert_identical(decode_frame(_one_array(["<f8", [1], 0, 8], np.ones(1).tobytes())),
                     np.ones(1))
    assert decode_frame(_frame({"arrays": [], "tree": {"$$a": [1]}})) == {"$a": [1]}


def test_a_frame_truncated_anywhere_is_a_value_error() -> None:
    frame = encode_frame({"a": np.arange(3, dtype=np.int16), "b": [1, "x"],
                          "c": np.array([True]), "d": np.zeros((0, 2))})
    for size in range(len(frame)):
        with pytest.raises(ValueError, match="frame"):
            decode_frame(frame[:size])


def test_a_frame_with_trailing_bytes_is_a_value_error() -> None:
    frame = encode_frame({"a": np.arange(3, dtype=np.int16)})
    with pytest.raises(ValueError, match="arrays end at"):
        decode_frame(frame + b"\x00")
    with pytest.raises(ValueError, match="arrays end at"):
        decode_frame(encode_frame({"a": 1}) + bytes(8))


def _deep_json(levels: int) -> bytes:
    return b'{"arrays": [], "tree": ' + b"[" * levels + b"]" * levels + b"}"


MALFORMED: dict[str, tuple[bytes, str]] = {
    "empty": (b"", "fewer than"),
    "bad-magic": (b"GIF8" + _frame({"arrays": [], "tree": 1})[4:], "not a frame"),
    "json-instead": (b'{"arrays": [], "tree": 1}', "not a frame"),
    "later-version": (b"\x89AV2" + _frame({"arrays": [], "tree": 1})[4:], "version"),
    "huge-header-size": (FRAME_MAGIC + (2**32 - 1).to_bytes(4, "little") + bytes(64),
                         "header would be"),
    "header-size-past-the-end": (FRAME_MAGIC + (100).to_bytes(4, "little") + b"{}",
                                 "truncated"),
    "header-not-json": (_frame(None, raw_header=b"{not json"), "not UTF-8 JSON"),
    "header-not-utf8": (_frame(None, raw_header=b'{"tree": "\xff"}'), "not UTF-8 JSON"),
    "header-utf16": (_frame(None, raw_header='{"arrays": [], "tree": 1}'.encode("utf-16")),
                     "not UTF-8 JSON"),
    "header-too-deep-for-json": (_frame(None, raw_header=_deep_json(100_000)),
                                 "not UTF-8 JSON|nests deeper"),
    "header-a-list": (_frame([]), "must be a JSON object"),
    "header-without-tree": (_frame({"arrays": []}), "must be a JSON object"),
    "arrays-not-a-list": (_frame({"arrays": {}, "tree": 1}), "'arrays' must be a list"),
    "entry-too-short": (_one_array(["<f8", [1], 0]), r"\[dtype, shape, offset, nbytes\]"),
    "object-dtype": (_one_array(["|O", [1], 0, 8]), "has dtype '|O'"),
    "object-dtype-letter": (_one_array(["O", [1], 0, 8]), "has dtype 'O'"),
    "void-dtype": (_one_array(["|V8", [1], 0, 8]), "has dtype '|V8'"),
    "datetime-dtype": (_one_array(["<M8[s]", [1], 0, 8]), "has dtype"),
    "big-endian-dtype": (_one_array([">f8", [1], 0, 8]), "has dtype"),
    "dtype-not-a-string": (_one_array([8, [1], 0, 8]), "has dtype"),
    "shape-negative": (_one_array(["<f8", [-1], 0, 8]), "has shape"),
    "shape-bool": (_one_array(["<f8", [True], 0, 8]), "has shape"),
    "shape-float": (_one_array(["<f8", [1.0], 0, 8]), "has shape"),
    "shape-not-a-list": (_one_array(["<f8", 1, 0, 8]), "has shape"),
    "shape-too-many-dims": (_one_array(["|u1", [1] * (MAX_DIMS + 1), 0, 1]), "has shape"),
    "offset-unaligned": (_one_array(["|u1", [1], 4, 1]), "not a multiple of 8"),
    "offset-negative": (_one_array(["|u1", [1], -8, 1]), "not a multiple of 8"),
    "offset-a-float": (_one_array(["|u1", [1], 0.0, 1]), "not a multiple of 8"),
    "nbytes-negative": (_one_array(["|u1", [1], 0, -1]), "not a multiple of 8"),
    "nbytes-mismatch": (_one_array(["<f8", [2], 0, 8]), "takes 16"),
    "beyond-the-data": (_one_array(["<f8", [1], 8, 8]), "truncated"),
    "huge-offset": (_one_array(["<f8", [1], 2**70, 8]), "truncated"),
    "huge-shape": (_one_array(["<f8", [2**40, 2**40], 0, 8 * 2**80]), "takes|truncated"),
    "huge-empty-shape": (_one_array(["<f8", [0, 2**62, 2**62], 0, 0], b""), "shape"),
    "index-out-of-range": (_one_array(["<f8", [1], 0, 8], tree={"$array": 1}), "placeholder"),
    "index-negative": (_one_array(["<f8", [1], 0, 8], tree={"$array": -1}), "placeholder"),
    "index-bool": (_one_array(["<f8", [1], 0, 8], tree={"$array": False}), "placeholder"),
    "index-a-string": (_one_array(["<f8", [1], 0, 8], tree={"$array": "0"}), "placeholder"),
    "placeholder-extra-key": (_one_array(["<f8", [1], 0, 8], tree={"$array": 0, "b": 1}),
                              "placeholder"),
    "array-twice": (_one_array(["<f8", [1], 0, 8], tree=[{"$array": 0}, {"$array": 0}]),
                    "appears twice"),
    "array-unreferenced": (_one_array(["<f8", [1], 0, 8], tree=[]), "not in its tree"),
    "reserved-key": (_frame({"arrays": [], "tree": {"$ref": 1}}), "reserved key"),
    "nested-too-deep": (_frame({"arrays": [], "tree": _nested_lists(MAX_DEPTH + 2, 0)}),
                        "nests deeper"),
    "objects-nested-too-deep": (_frame({"arrays": [], "tree": json.loads(
        '{"a":' * (MAX_DEPTH + 2) + "1" + "}" * (MAX_DEPTH + 2))}), "nests deeper"),
}


@pytest.mark.parametrize(("frame", "message"), MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_frame_is_a_value_error_saying_what(frame: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        decode_frame(frame)


def test_a_frame_of_strided_memory_is_a_value_error() -> None:
    strided = memoryview(np.frombuffer(encode_frame(1) * 2, np.uint8)[::2])
    with pytest.raises(ValueError, match="contiguous"):
        decode_frame(strided)


def test_a_bool_byte_other_than_zero_or_one_reads_as_true() -> None:
    decoded = decode_frame(_one_array(["|b1", [3], 0, 3], bytes([0, 1, 2])))
    assert decoded.tolist() == [False, True, True]
    assert decoded.view(np.uint8).tolist() == [0, 1, 1]


def test_the_header_size_limit_holds_on_both_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_codec, "MAX_HEADER_SIZE", 64)
    with pytest.raises(ValueError, match="more than a frame carries"):
        encode_frame({"info": "x" * 100})
    small = encode_frame({"info": "x"})
    with pytest.raises(ValueError, match="header would be"):
        decode_frame(small, max_header_size=16)  # a server's own, tighter limit


def test_a_frame_cannot_claim_its_bytes_twice() -> None:
    """Overlapping arrays would let a small frame make the reader allocate without bound."""
    import struct

    data = bytes(64)
    table = [["<f8", [8], 0, 64]] * 5  # five arrays over the same 64 bytes
    header = json.dumps({"arrays": table,
                         "tree": [{"$array": index} for index in range(5)]}).encode()
    frame = FRAME_MAGIC + struct.pack("<I", len(header)) + header
    frame += b"\0" * (-len(frame) % 8) + data
    with pytest.raises(ValueError, match="inside the array before it"):
        decode_frame(frame)


def test_a_frame_deeper_than_the_readers_limit_is_refused() -> None:
    deep: object = 1
    for _ in range(10):
        deep = [deep]
    frame = encode_frame({"x": deep})
    assert decode_frame(frame)["x"] == deep
    with pytest.raises(ValueError, match="deeper than 5"):
        decode_frame(frame, max_depth=5)


def test_a_tampered_frame_decodes_or_is_a_value_error() -> None:
    """Flip, drop or insert bytes of valid frames, many times over: nothing but a message or a
    ValueError comes out (no IndexError, KeyError, TypeError, MemoryError or warning)."""
    objects = np.empty(1, dtype=object)
    objects[0] = {"k": [1, 2]}
    frames = [encode_frame(_step_message(3)),
              encode_frame({"$a": [np.zeros((2, 0)), np.array(1.5, ">f8")], "o": objects})]
    chooser = random.Random(20)
    for _ in range(3000):
        frame = bytearray(chooser.choice(frames))
        position = chooser.randrange(len(frame))
        action = chooser.random()
        if action < 0.6:
            frame[position] = chooser.randrange(256)
        elif action < 0.8:
            del frame[position]
        else:
            frame.insert(position, chooser.choice(b'0123456789[]{}",:-e$ \xff'))
        with contextlib.suppress(ValueError):
            decode_frame(bytes(frame))


def test_object_arrays_come_back_as_object_arrays() -> None:
    """A vector env's infos hold object arrays (Gymnasium makes one for numpy bools, strings,
    mixed values): a frame keeps the dtype, the shape and every element."""
    flags = np.array([np.True_, np.False_, None], dtype=object)
    grid = np.empty((2, 2), dtype=object)
    grid[0, 0], grid[0, 1], grid[1, 0], grid[1, 1] = [1, 2], "text", {"a": 1.5}, np.arange(3)
    decoded = decode_frame(encode_frame({"infos": {"flag": flags, "grid": grid}}))
    assert decoded["infos"]["flag"].dtype == object
    assert decoded["infos"]["flag"].tolist() == [True, False, None]
    rebuilt = decoded["infos"]["grid"]
    assert rebuilt.dtype == object and rebuilt.shape == (2, 2)
    assert rebuilt[0, 0] == [1, 2] and rebuilt[0, 1] == "text" and rebuilt[1, 0] == {"a": 1.5}
    assert isinstance(rebuilt[1, 1], np.ndarray) and rebuilt[1, 1].tolist() == [0, 1, 2]


@pytest.mark.parametrize("node", [
    {"$objects": [1, 2], "shape": [3]},
    {"$objects": [1], "shape": [1], "extra": 0},
    {"$objects": "no", "shape": [2]},
    {"$objects": [1, 2], "shape": [-1, -2]},
    {"$objects": [1]},
])
def test_a_bad_object_array_is_refused(node: dict[str, object]) -> None:
    import struct

    header = json.dumps({"arrays": [], "tree": {"x": node}}).encode()
    frame = FRAME_MAGIC + struct.pack("<I", len(header)) + header
    frame += b"\0" * (-len(frame) % 8)
    with pytest.raises(ValueError, match="object array"):
        decode_frame(frame)


@pytest.mark.parametrize("levels", [1_000, 100_000])
def test_a_frame_nested_past_the_recursion_limit_is_refused_before_it_is_parsed(
        levels: int) -> None:
    """Its header's depth is measured first (as a JSON body's is): refused as too deep,
    saying so, where parsing it would have hit Python's recursion limit."""
    tree = "[" * levels + "]" * levels
    header = json.dumps({"arrays": [], "tree": 0}).replace("0}", tree + "}").encode()
    frame = FRAME_MAGIC + struct.pack("<I", len(header)) + header
    frame += b"\0" * (-len(frame) % 8)
    with pytest.raises(FrameTooDeep, match=f"nests {levels + 1} levels deep"):
        decode_frame(frame)


def test_the_deepest_trees_the_writer_writes_are_read_back() -> None:
    """The measure before parsing leaves room for the header around the tree: a tree at
    the reader's limit, ending in an array or an object array, still decodes."""
    objects = np.empty(2, dtype=object)
    objects[0], objects[1] = np.arange(2), "x"
    for leaf in (1, np.arange(3), objects):
        deep: object = leaf
        for _ in range(MAX_DEPTH - 1):
            deep = [deep]
        message = {"x": deep}  # the top object at depth 0: the innermost list at the limit
        assert_identical(decode_frame(encode_frame(message)), message)


def _decoded_or_error(frame: bytes) -> Any:
    try:
        return ("ok", decode_frame(frame))
    except ValueError as error:
        return ("error", type(error).__name__)


def test_a_remembered_layout_decodes_exactly_as_the_full_path() -> None:
    """The reader remembers each arrays table it checked, by its text, and then parses only
    a frame's tree: tampered frames (valid or not) decode to the same message, or fail the
    same way, with the layouts remembered and with none."""
    frames = [encode_frame({"id": 3, **_step_message(3)}),
              encode_frame({"op": "step", "actions": np.arange(2), "timeout": 0.5})]
    chooser = random.Random(29)
    for _ in range(2000):
        frame = bytearray(chooser.choice(frames))
        for _ in range(chooser.randint(1, 2)):
            position = chooser.randrange(len(frame))
            if chooser.random() < 0.7:
                frame[position] = chooser.randrange(256)
            else:
                frame.insert(position, chooser.choice(b'0123456789[]{}",:$ '))
        for original in frames:
            decode_frame(original)  # its table remembered
        remembered = _decoded_or_error(bytes(frame))
        _codec._layouts.clear()
        fresh = _decoded_or_error(bytes(frame))
        assert remembered[0] == fresh[0]
        if fresh[0] == "ok":
            assert_identical(remembered[1], fresh[1])
        else:
            assert remembered[1] == fresh[1]


def test_a_header_with_two_tables_cannot_teach_a_wrong_layout() -> None:
    """JSON takes the last of two 'arrays' keys: such a header's first table text is not
    remembered with the second's layout (a peer could make later frames misread)."""
    _codec._layouts.clear()
    honest = encode_frame({"x": np.arange(2, dtype=np.int64)})
    header = json.loads(honest[8:8 + int.from_bytes(honest[4:8], "little")])
    table = json.dumps(header["arrays"], separators=(",", ":"))
    forged_header = (f'{{"arrays":{table},"tree":{{"x":{{"$array":0}}}},'
                     f'"arrays":[["<f8",[2],0,16]]}}').encode()
    start = 8 + len(forged_header)
    forged = (b"\x89AV1" + len(forged_header).to_bytes(4, "little") + forged_header
              + bytes(-start % 8) + np.array([1.5, 2.5]).tobytes())
    assert_identical(decode_frame(forged), {"x": np.array([1.5, 2.5])})
    assert_identical(decode_frame(honest), {"x": np.arange(2, dtype=np.int64)})


def _frame_with_header(header: bytes, data: bytes) -> bytes:
    start = 8 + len(header)
    return (FRAME_MAGIC + len(header).to_bytes(4, "little") + header + bytes(-start % 8)
            + data)


def test_a_table_written_otherwise_cannot_teach_its_text() -> None:
    """JSON reads ``0.0`` as equal to ``0``: a header whose first of two tables says so must
    not make that text acceptable later (the full path refuses it: an offset is a count)."""
    _codec._layouts.clear()
    data = np.array([1.5, 2.5]).tobytes()
    loose = '[["<f8",[2],0.0,16]]'
    victim = _frame_with_header(f'{{"arrays":{loose},"tree":{{"x":{{"$array":0}}}}}}'.encode(),
                                data)
    teacher = _frame_with_header(
        f'{{"arrays":{loose},"tree":{{"x":{{"$array":0}}}},"arrays":[["<f8",[2],0,16]]}}'
        .encode(), data)
    for frame in (victim, teacher, victim):
        first = _decoded_or_error(frame)
        assert first[0] == ("ok" if frame is teacher else "error"), first
    assert not _codec._layouts


def test_only_small_tables_are_remembered() -> None:
    """A peer cannot fill the reader's memory with big tables (a frame's header may hold
    megabytes): a table longer than 4 KiB is read, never remembered."""
    _codec._layouts.clear()
    big = {"parts": [np.zeros(0)] * 400}
    assert_identical(decode_frame(encode_frame(big)), {"parts": [np.zeros(0)] * 400})
    assert not _codec._layouts
    small = encode_frame({"x": np.arange(3)})
    decode_frame(small)
    assert len(_codec._layouts) == 1


def test_the_writers_remembered_tables_give_each_layout_its_own_offsets() -> None:
    """A writer remembers the table of each (dtype, shape) sequence: frames of different
    layouts, written in turns and past the bound of remembered tables (then forgotten and
    learnt again), each carry their own table and decode to what was written."""
    _convert._tables.clear()
    messages = [{"a": np.arange(size, dtype=np.float32), "b": np.ones((size, 2), dtype=bool),
                 "c": np.full(3, size, dtype=np.int16)} for size in range(300)]
    for _ in range(2):
        for message in messages:
            assert_identical(decode_frame(encode_frame(message)), message)
    assert 0 < len(_convert._tables) <= 256
    first = encode_frame(messages[1])
    assert encode_frame(messages[1]) == first  # the same text, remembered or not
    _convert._tables.clear()
    assert encode_frame(messages[1]) == first


def test_a_stream_of_frames_takes_the_remembered_layouts(monkeypatch: pytest.MonkeyPatch) -> None:
    """A session's frames repeat a few layouts (its step answers, its step requests): the
    writer builds each layout's arrays table once (the text it remembers is the one every
    later frame of that layout carries), and the reader checks each table once (it counts
    the full path's table checks: later frames parse only their tree), every frame decoding
    to what was written."""
    _convert._tables.clear()
    _codec._layouts.clear()
    checked: list[int] = []
    read_arrays = _codec._read_arrays

    def counting_read_arrays(table: object, frame: Any, data_start: int) -> Any:
        checked.append(data_start)
        return read_arrays(table, frame, data_start)

    monkeypatch.setattr(_codec, "_read_arrays", counting_read_arrays)
    rng = np.random.default_rng(34)
    messages: list[Any] = []
    for step in range(20):
        messages.append({"op": "step", "id": step, "actions": rng.integers(0, 2, 8)})
        messages.append({"id": step, "observations": rng.random((8, 4), dtype=np.float32),
                         "rewards": rng.random(8), "terminations": rng.random(8) < 0.1,
                         "truncations": np.zeros(8, bool), "infos": {"score": rng.random(8)}})
    frames = [encode_frame(messages[0]), encode_frame(messages[1])]
    tables = {layout: text for layout, (text, _) in _convert._tables.items()}
    assert len(tables) == 2
    frames += [encode_frame(message) for message in messages[2:]]
    assert {layout: text for layout, (text, _) in _convert._tables.items()} == tables
    assert all(_convert._tables[layout][0] is text for layout, text in tables.items())
    for frame, message in zip(frames, messages):
        assert_identical(decode_frame(frame), message)
    assert len(checked) == 2  # the first frame of each layout
    assert len(_codec._layouts) == 2
