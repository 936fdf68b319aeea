"""The client side of aiovec's network serving (``aiovec.remote``): its transport is
``_websocket``, a small WebSocket client on anyio and wsproto that runs on asyncio, uvloop and
trio alike."""
