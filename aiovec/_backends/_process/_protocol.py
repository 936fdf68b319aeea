"""The wire protocol between the parent and a worker process: typed, numbered frames.

A frame is a fixed header (kind, sequence number, payload length) and a payload (pickled, or
empty on the hot path: a step's actions and results travel through shared memory). Every
request carries a sequence number that its reply echoes, so a late reply is matched to the
request it answers and can never be taken for the answer to a newer one.
"""

from __future__ import annotations

import enum
import pickle
import socket
import struct
from typing import Any

__all__ = ["HEADER", "Kind", "ReplyReader", "encode", "recv_frame"]

#: kind (1 byte), sequence number (4 bytes), payload length (4 bytes), little-endian.
HEADER = struct.Struct("<BII")


class Kind(enum.IntEnum):
    """Frame kinds. Requests go parent → worker; every request gets exactly one REPLY (a
    coroutine worker answers sub-env by sub-env instead: see ``_coroutine_worker``)."""

    INIT = 0  # parent → worker, once: the first env index, autoreset mode, the env factories
    HELLO = 1  # worker → parent, once: the sub-envs are made (descriptions or failures)
    ATTACH = 2  # map the shared memory block (its descriptor rides along, SCM_RIGHTS)
    RESET = 3
    STEP = 4
    CALL = 5
    SET_ATTR = 6
    CLOSE = 7
    REPLY = 8
    MAKE = 9  # make some hosted sub-envs afresh (a restart); payload: their env indices
    STEP_SOME = 10  # step some hosted sub-envs (first-ready); payload: their indices, actions
    RECORDED = 11  # worker → parent: the REPLY to a full step whose infos are in the records
    # Coroutine workers only (``_coroutine_worker``):
    DISCARD = 12  # give up on some hosted sub-envs (cancel what they run); acknowledged
    ABORT = 13  # withdraw some first-ready steps; payload: (step's sequence, env index) pairs
    OPTIONS = 14  # queue reset options of later episodes; payload: (env index, options) pairs


def encode(kind: Kind, sequence: int, payload: bytes = b"") -> bytes:
    """One frame, ready to send."""
    return HEADER.pack(kind, sequence & 0xFFFFFFFF, len(payload)) + payload


def dumps(value: Any) -> bytes:
    """Pickle with the fastest protocol both ends speak."""
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def recv_exact(sock: socket.socket, size: int) -> bytes:
    """Block until ``size`` bytes arrived; ``EOFError`` if the peer closed first."""
    if size == 0:
        return b""
    chunks = []
    while size:
        chunk = sock.recv(size)
        if not chunk:
            raise EOFError("the peer closed the connection")
        chunks.append(chunk)
        size -= len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def recv_frame(sock: socket.socket) -> tuple[Kind, int, bytes]:
    """Block for one whole frame (the worker side)."""
    kind, sequence, length = HEADER.unpack(recv_exact(sock, HEADER.size))
    return Kind(kind), sequence, recv_exact(sock, length)


class ReplyReader:
    """Reassembles frames from whatever a non-blocking socket had to offer (the parent side)."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = bytearray()

    @property
    def pending(self) -> bool:
        """True while part of a frame has arrived and the rest has not."""
        return bool(self._buffer)

    def feed(self, data: bytes | memoryview) -> list[tuple[Kind, int, bytes]]:
        """Add received bytes; return every frame now complete, in order."""
        buffer = self._buffer
        buffer += data
        frames = []
        start = 0
        size = HEADER.size
        while len(buffer) - start >= size:
            kind, sequence, length = HEADER.unpack_from(buffer, start)
            end = start + size + length
            if len(buffer) < end:
                break
            frames.append((Kind(kind), sequence, bytes(buffer[start + size:end])))
            start = end
        if start:
            del buffer[:start]
        return frames
