"""How deeply a JSON text nests, measured without parsing it: ``json.loads`` recurses once
per level, so a peer's text of 100,000 ``[`` raises ``RecursionError`` in it. Request bodies
(``_serve._json.parse_json``) and frame headers (``_codec.decode_frame``) are measured first
and refused when too deep, before ``json`` sees them."""

from __future__ import annotations

import re

import numpy as np

__all__ = ["nesting_depth"]

_QUOTE = ord('"')
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
