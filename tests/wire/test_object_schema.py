"""``aiovec.ObjectSpace`` and ``Text`` of any Unicode on the wire: their schemas rebuild equal
spaces, and batches of their values cross both encodings exactly, back as the local env
batches them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from gymnasium.spaces import Dict, Discrete, Text, Tuple

import aiovec
from aiovec._remote._replies import arrays_of
from aiovec._wire._codec import decode_frame, encode_frame, to_jsonable
from aiovec._wire._schema import space_from_schema, space_to_schema
from tests.helpers import assert_identical
from tests.object_envs import UNUSUAL, WIDE_CHARSET


def json_trip(value: Any) -> Any:
    """``value`` as strict JSON text carries it to a peer."""
    return json.loads(json.dumps(value, allow_nan=False))


SPACES = {
    "any": aiovec.ObjectSpace(),
    "chat": aiovec.ObjectSpace(list),
    "every-json-type": aiovec.ObjectSpace((str, int, float, bool, list, dict, type(None))),
    "wide-text": Text(4096, min_length=0, charset=WIDE_CHARSET + UNUSUAL),
    "dict": Dict({"chat": aiovec.ObjectSpace(list), "prompt": Text(8, charset=UNUSUAL),
                  "turn": Discrete(16)}),
}


@pytest.mark.parametrize("space", SPACES.values(), ids=SPACES.keys())
def test_schemas_rebuild_equal_spaces(space: Any) -> None:
    schema = space_to_schema(space)
    rebuilt = space_from_schema(json_trip(schema))
    assert rebuilt == space and type(rebuilt) is type(space)
    assert space_to_schema(rebuilt) == schema


def test_an_object_schema_names_its_types_and_a_text_schema_keeps_every_character() -> None:
    assert space_to_schema(aiovec.ObjectSpace()) == {"type": "Object", "types": []}
    assert space_to_schema(aiovec.ObjectSpace((str, type(None)))) == {
        "type": "Object", "types": ["str", "null"]}
    rebuilt = space_from_schema(json_trip(space_to_schema(SPACES["wide-text"])))
    assert isinstance(rebuilt, Text)
    assert rebuilt.character_list == SPACES["wide-text"].character_list
    assert set(UNUSUAL) <= set(rebuilt.character_list)


@pytest.mark.parametrize("types", [tuple, object, bytes, (str, set)])
def test_an_object_space_of_types_json_does_not_carry_has_no_schema(types: Any) -> None:
    with pytest.raises(TypeError, match="no wire schema"):
        space_to_schema(aiovec.ObjectSpace(types))


@pytest.mark.parametrize("schema", [
    {"type": "Object"},
    {"type": "Object", "types": "str"},
    {"type": "Object", "types": ["tuple"]},
    {"type": "Object", "types": [None]},
    {"type": "Object", "types": ["str"] * 9},
])
def test_a_malformed_object_schema_is_a_value_error(schema: Any) -> None:
    with pytest.raises(ValueError, match="bad space schema"):
        space_from_schema(schema)


CHATS = (
    [{"role": "user", "content": UNUSUAL, "token_ids": [1, 2, 50_000]}],
    [{"role": "assistant", "content": "", "tool": {"ok": True, "score": 0.25, "error": None,
                                                   "$ref": "escaped"}}],
    [],
)


@pytest.mark.parametrize("encoding", ["frame", "json"])
def test_batches_of_values_cross_exactly(encoding: str) -> None:
    space = Tuple([aiovec.ObjectSpace(list), Text(64, charset=UNUSUAL)])
    batch = (CHATS, (UNUSUAL, UNUSUAL[::-1], ""))
    message = {"observations": batch}
    if encoding == "frame":
        decoded = decode_frame(encode_frame(message))
    else:
        decoded = json.loads(json.dumps(to_jsonable(message), allow_nan=True))
    assert_identical(arrays_of(decoded["observations"], space), batch)
