"""The wire format shared by ``aiovec.serve`` and ``aiovec.remote``, as pure functions: spaces as
plain JSON (``_schema``), messages as JSON or as binary frames (``_codec``). No I/O here."""
