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
from typing import Any, Literal

from aiovec._wire._depth import nesting_depth

__all__ = ["JSONRejected", "nesting_depth", "parse_json"]

RejectionCode = Literal["bad_json", "too_deep", "too_large"]

_BOM = b"\xef\xbb\xbf"


class JSONRejected(ValueError):
    """A request body refused: ``code`` says why (``"too_large"``, ``"too_deep"``,
    ``"bad_json"``), ``detail`` says where, for the reply. The client sent it."""

    def __init__(self, code: RejectionCode, detail: str) -> None:
        self.code: RejectionCode = code
        self.detail = detail
        super().__init__(f"{code}: {detail}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.code, self.detail))


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
