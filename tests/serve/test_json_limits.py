"""aiovec._serve._json (and aiovec._wire._depth, which measures depth for it and for frames):
untrusted bodies refused by size, depth and syntax, and never a
RecursionError; the depth measure checked against a recursive reference."""

from __future__ import annotations

import json
import math
import pickle
import random
import sys
from typing import Any

import pytest

from aiovec._serve import _json
from aiovec._serve._json import JSONRejected, nesting_depth, parse_json
from aiovec._wire import _depth

DEEP = 100_000


def reference_depth(value: Any) -> int:
    """Nesting of a parsed JSON value, by recursion (fine for the small values here)."""
    if isinstance(value, list):
        return 1 + max(map(reference_depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(reference_depth, value.values()), default=0)
    return 0


@pytest.fixture(params=["regex", "numpy"])
def string_removal(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways nesting_depth drops strings: the regex (few quotes) and the running parity
    of quotes in numpy (many), each forced for every body."""
    monkeypatch.setattr(_depth, "_REGEX_QUOTES", sys.maxsize if request.param == "regex" else 0)
    return str(request.param)


@pytest.mark.parametrize(("body", "depth"), [
    (b"1", 0),
    (b"", 0),
    (b'"plain"', 0),
    (b'"[[[{{{"', 0),
    (b"[]", 1),
    (b"{}", 1),
    (b"[[], {}]", 2),
    (b'{"a": [1, {"b": []}]}', 4),
    (b'[[[]], [[[[]]]], []]', 5),
    (b" \n[\t[ 1 ]\r\n] ", 2),
    # An escaped quote does not end the string, so its brackets stay inside.
    (rb'"a\"[[["', 0),
    (rb'["a\"[[[", [1]]', 2),
    (rb'["a\"]]]", [1]]', 2),
    # An escaped backslash ends in a real quote: the brackets after it count.
    (rb'["\\", [[1]]]', 3),
    (rb'["\\\\", [[]]]', 3),
    (rb'["\\\"[", []]', 2),
    (rb'["a\n", [1]]', 2),
    (rb'["\u005b\u005b", [1]]', 2),
    (rb'["\u0022[[", 1]', 1),
    (rb'{"k\"{": "v\\", "w": {"x": "]]]"}}', 2),
    ('["é[", {"ключ": "[[猫"}, "😀]"]'.encode(), 2),
    (b'\xef\xbb\xbf[[1]]', 2),
])
def test_nesting_depth(body: bytes, depth: int, string_removal: str) -> None:
    assert nesting_depth(body) == depth
    if body.strip():  # every case but the empty body is valid JSON: the reference agrees
        assert reference_depth(json.loads(body)) == depth


@pytest.mark.parametrize("body", [
    b"]]]", b"[[[", b"}{", b'"[[[', b'"\\', b"\\", b'[\\"', b'"\\"', b'"""', b'\\\\\\"[',
    b"[" * 50 + b"]" * 60, b"]" * 60 + b"[" * 50, b"\xff\xfe[\x00", b'"\\\xff"[',
])
def test_nesting_depth_never_fails_on_garbage(body: bytes, string_removal: str) -> None:
    depth = nesting_depth(body)
    assert isinstance(depth, int) and depth >= 0


def _random_string(rng: random.Random) -> str:
    pieces = ["a", "é", "猫", "😀", "[", "]", "{", "}", '"', "\\", "\n", "\t", ",", ":", " ",
              "\u2028", '\\"', "\\\\", "\x00"]
    return "".join(rng.choice(pieces) for _ in range(rng.randrange(7)))


def _random_value(rng: random.Random, levels: int) -> Any:
    roll = rng.random()
    if levels == 0 or roll < 0.35:
        return rng.choice([
            rng.randrange(-10**6, 10**6), rng.uniform(-1e3, 1e3), True, False, None,
            _random_string(rng)])
    if roll < 0.7:
        return [_random_value(rng, levels - 1) for _ in range(rng.randrange(5))]
    return {_random_string(rng): _random_value(rng, levels - 1) for _ in range(rng.randrange(5))}


def _random_body(seed: int) -> tuple[Any, bytes]:
    rng = random.Random(seed)
    value = _random_value(rng, rng.randrange(1, 9))
    text = json.dumps(value, ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, 0, 2]))
    return value, text.encode("utf-8")


@pytest.mark.parametrize("seed", range(300))
def test_nesting_depth_matches_the_reference(seed: int, string_removal: str) -> None:
    value, body = _random_body(seed)
    depth = reference_depth(value)
    assert nesting_depth(body) == depth, body
    assert parse_json(body, max_depth=depth) == json.loads(body)
    if depth:
        with pytest.raises(JSONRejected) as caught:
            parse_json(body, max_depth=depth - 1)
        assert caught.value.code == "too_deep"


def test_the_random_bodies_exercise_what_they_claim() -> None:
    """Guard for the fuzz above: its bodies hold escaped quotes and backslashes, brackets
    inside strings, raw non-ASCII, and range over depths."""
    bodies = [_random_body(seed) for seed in range(300)]
    joined = b"".join(body for _, body in bodies)
    assert b'\\"' in joined and b"\\\\" in joined and "猫".encode() in joined
    assert sum(b'[' in json.dumps(_strings(value)).encode() for value, _ in bodies) > 30
    depths = {reference_depth(value) for value, _ in bodies}
    assert depths >= set(range(9))
    # Enough quotes in some bodies that the default choice takes the numpy path too.
    assert max(body.count(b'"') for _, body in bodies) > _depth._REGEX_QUOTES


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [text for item in value for text in _strings(item)]
    if isinstance(value, dict):
        return list(value) + [text for item in value.values() for text in _strings(item)]
    return []


@pytest.mark.parametrize("seed", range(100))
def test_garbage_is_refused_never_crashes(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    alphabet = b'[]{}"\\:,0a \n\xff'
    body = bytes(rng.choice(alphabet) for _ in range(rng.randrange(1, 200)))
    # Any depth will do for garbage, but one: how many quotes a body has (which picks how
    # strings are dropped) does not change it. An unterminated string runs to the end.
    depths = []
    for regex_quotes in (sys.maxsize, 0):
        monkeypatch.setattr(_depth, "_REGEX_QUOTES", regex_quotes)
        depths.append(nesting_depth(body))
    monkeypatch.undo()
    assert depths[0] == depths[1] >= 0
    try:
        parse_json(body, max_depth=8)
    except JSONRejected as exc:  # anything else (a RecursionError, an IndexError) fails
        code = exc.code
    else:
        code = "parsed"  # a few of these bodies are valid JSON
    assert code in ("bad_json", "too_deep", "parsed")


@pytest.mark.parametrize("body", [
    b"[" * DEEP + b"]" * DEEP,
    b"[" * DEEP,
    b'{"a":' * DEEP + b"1" + b"}" * DEEP,
    b'["x",' * DEEP + b"1" + b"]" * DEEP,  # many quotes: the numpy path
    b'[{"k":' * (DEEP // 2) + b"0" + b"}]" * (DEEP // 2),
], ids=["arrays", "unclosed", "objects", "with-strings", "mixed"])
def test_deep_bodies_are_too_deep_not_a_recursion_error(body: bytes) -> None:
    with pytest.raises(RecursionError):  # what the server would otherwise meet
        json.loads(body)
    assert nesting_depth(body) == DEEP
    with pytest.raises(JSONRejected) as caught:
        parse_json(body)
    assert caught.value.code == "too_deep"
    assert f"{DEEP} levels" in caught.value.detail and "32 allowed" in caught.value.detail


@pytest.mark.parametrize("body", [
    b'"\\"' * 1_000_000,  # every quote a candidate string start
    b'"' + b"\\" * 1_000_001,
    b'"[' * 1_000_000,
    b"[" * 3_000_000,
], ids=["escaped-quotes", "backslashes", "open-strings", "brackets"])
def test_hostile_megabyte_bodies_finish(body: bytes) -> None:
    """Linear time: a quadratic scan of these would run for hours (the suite's timeout)."""
    assert nesting_depth(body) >= 0
    with pytest.raises(JSONRejected):
        parse_json(body, max_depth=4)


@pytest.mark.parametrize("max_depth", [0, 1, 2, 32])
def test_depth_limit_is_inclusive(max_depth: int) -> None:
    at_limit = b"[" * max_depth + b"1" + b"]" * max_depth
    assert reference_depth(parse_json(at_limit, max_depth=max_depth)) == max_depth
    over = b"[" + at_limit + b"]"
    with pytest.raises(JSONRejected) as caught:
        parse_json(over, max_depth=max_depth)
    assert caught.value.code == "too_deep"


def test_many_brackets_but_shallow_parse() -> None:
    """More opening brackets than max_depth, so the depth is measured; shallow, so it passes."""
    body = json.dumps({"actions": [[i, -i] for i in range(64)]}).encode()
    assert parse_json(body, max_depth=3) == json.loads(body)
    with pytest.raises(JSONRejected):
        parse_json(body, max_depth=2)


def test_brackets_inside_strings_do_not_count_against_the_limit() -> None:
    body = json.dumps({"note": "[" * 1000 + "{" * 1000}).encode()
    assert parse_json(body, max_depth=1) == {"note": "[" * 1000 + "{" * 1000}


def test_a_recursion_error_is_still_too_deep(monkeypatch: pytest.MonkeyPatch) -> None:
    """Belt and braces: were the depth measure ever wrong, the RecursionError is caught."""
    monkeypatch.setattr(_json, "nesting_depth", lambda body: 0)
    with pytest.raises(JSONRejected) as caught:
        parse_json(b"[" * DEEP + b"]" * DEEP)
    assert caught.value.code == "too_deep"
    assert caught.value.__cause__ is None


def test_too_large() -> None:
    body = b'{"op": "step", "actions": [0, 1, 1, 0]}'
    assert parse_json(body, max_bytes=len(body)) == json.loads(body)
    with pytest.raises(JSONRejected) as caught:
        parse_json(body, max_bytes=len(body) - 1)
    assert caught.value.code == "too_large"
    assert caught.value.detail == (
        f"the body is {len(body)} bytes, more than the {len(body) - 1} allowed")


def test_limits_apply_in_order() -> None:
    """Size first (nothing else is looked at), then depth, then syntax."""
    deep_and_broken = b"[" * 100 + b"}"
    with pytest.raises(JSONRejected) as caught:
        parse_json(deep_and_broken, max_bytes=50)
    assert caught.value.code == "too_large"
    with pytest.raises(JSONRejected) as caught:
        parse_json(deep_and_broken, max_bytes=1000)
    assert caught.value.code == "too_deep"
    with pytest.raises(JSONRejected) as caught:
        parse_json(deep_and_broken, max_depth=100)
    assert caught.value.code == "bad_json"


def _jsons_own_message(text: str) -> str:
    try:
        json.loads(text)
    except json.JSONDecodeError as error:
        return error.msg
    raise AssertionError(f"{text!r} is JSON")


@pytest.mark.parametrize(("body", "message"), [
    (b'{"op": "step", "actions": [0, 1', "Expecting ',' delimiter: line 1 column 32 (char 31)"),
    (b'{"a":', "Expecting value: line 1 column 6 (char 5)"),
    (b"", "Expecting value: line 1 column 1 (char 0)"),
    (b"[1]\n[2]", "Extra data: line 2 column 1 (char 4)"),
    # Worded by this Python's json (3.13: "Illegal trailing comma before end of object").
    (b'{"a": 1,}', _jsons_own_message('{"a": 1,}')),
    (b'["\xff"]', "'utf-8' codec can't decode byte 0xff in position 2"),
    ('[1, "é"]'.encode("utf-16"), "codec can't decode"),
    (b"\xef\xbb\xbf\xef\xbb\xbf[1]", "Unexpected UTF-8 BOM"),  # one BOM is forgiven, not two
])
def test_bad_json_carries_jsons_message(body: bytes, message: str) -> None:
    with pytest.raises(JSONRejected) as caught:
        parse_json(body)
    assert caught.value.code == "bad_json"
    assert message in caught.value.detail
    assert str(caught.value) == f"bad_json: {caught.value.detail}"


@pytest.mark.skipif(not hasattr(sys, "get_int_max_str_digits"), reason="no int digit limit")
def test_a_number_too_long_for_int_is_bad_json() -> None:
    body = b"[" + b"7" * (sys.get_int_max_str_digits() + 1) + b"]"
    with pytest.raises(ValueError, match="Exceeds the limit"):
        json.loads(body)  # a ValueError, though not a JSONDecodeError
    with pytest.raises(JSONRejected) as caught:
        parse_json(body)
    assert caught.value.code == "bad_json"


@pytest.mark.parametrize("body", [
    b'{"op":"step","actions":[0,1,1,0]}',
    json.dumps({"op": "step", "actions": list(range(64))}).encode(),
    json.dumps({"op": "reset", "seed": 7, "options": {"a": [1, {"b": None}]}}).encode(),
    '{"name": "猫 😀", "esc": "\\"\\\\\\n\\u005b"}'.encode(),
    b"null", b"0", b"-1.5e3", b'"text"', b"[]", b"{}", b" \t\n[1]\n",
])
def test_valid_bodies_parse_as_json_loads(body: bytes) -> None:
    assert parse_json(body) == json.loads(body)


def test_a_utf8_bom_is_ignored() -> None:
    assert parse_json(b"\xef\xbb\xbf" + b'{"a": [1]}') == {"a": [1]}


def test_non_finite_numbers_are_what_json_loads_gives() -> None:
    value = parse_json(b"[NaN, Infinity, -Infinity]")
    assert math.isnan(value[0]) and value[1:] == [math.inf, -math.inf]


def test_rejection_is_a_value_error_and_pickles() -> None:
    error = JSONRejected("too_deep", "the body nests 40 levels deep, more than the 32 allowed")
    assert isinstance(error, ValueError)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is JSONRejected
    assert (copy.code, copy.detail, str(copy)) == (error.code, error.detail, str(error))
