"""Untrusted JSON request bodies, parsed within limits: size, then nesting depth, then syntax.

``json.loads`` recurses once per level of nesting, so a body of 100,000 ``[`` raises
``RecursionError``, which a server that lets it escape answers with a 500 or a dropped
connection. ``parse_json`` measures the depth first, without recursion and without a Python
loop over the characters (``nesting_depth``), and refuses a body too deep before ``json`` sees
it. Every refusal is a ``JSONRejected`` carrying a short code for the reply.

Bodies are UTF-8 (RFC 8259 section 8.1); a leading UTF-8 byte order mark is ignored, as that
section allows and as ``json.loads`` of bytes does. Anything else ``json.loads`` accepts is
accepted here too, with the same result (``NaN`` and ``Infinity`` included).
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

import numpy as np

__all__ = ["JSONRejected", "nesting_depth", "parse_json"]

RejectionCode = Literal["bad_json", "too_deep", "too_large"]

_QUOTE = ord('"')
_BOM = b"\xef\xbb\xbf"
# Every byte but the five that shape a JSON document once escapes are gone: " [ ] { }.
_NOT_STRUCTURE = bytes(sorted(set(range(256)) - set(b'"[]{}')))
# Each structural byte's change of depth, as a signed byte: +1 opens, -1 closes, 0 a quote.
_DEPTH_STEPS = bytes.maketrans(b'[{]}"', b"\x01\x01\xff\xff\x00")
# A string once escapes are gone: a quote, anything but quotes, the closing quote (or the end:
# an unterminated string). It always matches where it starts, so the scan stays linear.
_STRING = re.compile(rb'"[^"]*"?')
# Up to this many quotes the regex removes strings before numpy's fixed costs (a few us) are
# paid back; beyond, a running parity of quotes in numpy is faster (the regex costs ~0.1 us a
# string, numpy a few ns a byte).
_REGEX_QUOTES = 64


class JSONRejected(ValueError):
    """A request body refused: ``code`` says why (``"too_large"``, ``"too_deep"``,
    ``"bad_json"``), ``detail`` says where, for the reply. The client sent it."""

    def __init__(self, code: RejectionCode, detail: str) -> None:
        self.code: RejectionCode = code
        self.detail = detail
        super().__init__(f"{code}: {detail}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.code, self.detail))


def nesting_depth(body: bytes) -> int:
    """The deepest nesting of ``[`` and ``{`` in ``body``, not counting those inside strings.

    Exact for valid JSON (``1`` is 0 deep, ``[]`` 1, ``{"a": [1]}`` 2). For anything else it
    returns some number without failing: ``json`` then reports the syntax error. Linear in
    the body's length, in C and numpy.
    """
    if b"\\" in body:
        # Outside strings valid JSON has no backslash, so every escape pair is inside one:
        # dropping the pairs keeps each string's boundaries and leaves no escaped quote.
        # Pairs (backslash, any byte) run left to right; after the doubled backslashes go, a
        # backslash left over is a lone one before its escaped byte, so the second replace
        # sees exactly the escaped quotes.
        body = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    structure = body.translate(None, _NOT_STRUCTURE)
    quotes = structure.count(b'"')
    if 0 < quotes <= _REGEX_QUOTES:
        structure = _STRING.sub(b"", structure)
    if not structure:
        return 0
    wide = np.int32 if len(structure) < 2**31 else np.int64
    steps = np.frombuffer(structure.translate(_DEPTH_STEPS), dtype=np.int8).astype(wide)
    if quotes > _REGEX_QUOTES:
        # Quotes so far, odd: inside a string (an opening quote counts as inside, a closing
        # one as outside; neither moves the depth). An unterminated string runs to the end.
        codes = np.frombuffer(structure, dtype=np.uint8)
        steps[np.logical_xor.accumulate(codes == _QUOTE)] = 0
    return max(int(np.add.accumulate(steps, out=steps).max()), 0)


def parse_json(body: bytes, *, max_depth: int = 32, max_bytes: int | None = None) -> Any:
    """``json.loads(body)``, refusing with ``JSONRejected`` a body longer than ``max_bytes``
    (``"too_large"``), nested deeper than ``max_depth`` (``"too_deep"``), or not valid UTF-8
    JSON (``"bad_json"``, with ``json``'s message and position), in that order."""
    if max_bytes is not None and len(body) > max_bytes:
        raise JSONRejected("too_large", f"the body is {len(body)} bytes, "
                                        f"more than the {max_bytes} allowed")
    # No deeper than the number of opening brackets: a body with few skips the measure.
    if body.count(b"[") + body.count(b"{") > max_depth:
        depth = nesting_depth(body)
        if depth > max_depth:
            raise JSONRejected("too_deep", f"the body nests {depth} levels deep, "
                                           f"more than the {max_depth} allowed")
    try:
        if body.startswith(_BOM):
            body = body[len(_BOM):]
        return json.loads(body.decode("utf-8"))
    except RecursionError:  # not expected after the depth check; never a 500 if it happens
        raise JSONRejected("too_deep", "the body nests too deep to parse") from None
    except ValueError as exc:
        # JSONDecodeError, UnicodeDecodeError, and the int() digit limit (a 5,000-digit
        # number); all ValueErrors, each with a message saying where.
        raise JSONRejected("bad_json", str(exc)) from exc
