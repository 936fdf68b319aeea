"""The agent frameworks' tests run in a venv of their own (``make agents``: OpenEnv and
SkyRL-gym, pinned), as RLlib's do; here, a real OpenEnv server for them."""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

SERVER = Path(__file__).resolve().parent / "openenv_server.py"


@dataclass(frozen=True)
class OpenEnvServer:
    url: str
    ledger: Path

    def sessions(self) -> int:
        """How many sessions the server holds now (env instances made and not closed)."""
        return len(os.listdir(self.ledger))


def _read_port(process: subprocess.Popen[str], timeout: float) -> int:
    assert process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        if not selector.select(timeout):
            raise TimeoutError(f"the OpenEnv server printed no port within {timeout} s")
    line = process.stdout.readline()
    if not line.startswith("PORT "):
        raise RuntimeError(f"the OpenEnv server did not start: {line!r}")
    return int(line.split()[1])


@pytest.fixture(scope="module")
def openenv_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenEnvServer]:
    """``tests/agents/openenv_server.py`` under uvicorn on 127.0.0.1, ready (``/health``)."""
    ledger = tmp_path_factory.mktemp("openenv-sessions")
    process = subprocess.Popen([sys.executable, str(SERVER), str(ledger)],
                               stdout=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{_read_port(process, 120.0)}"
        deadline = time.monotonic() + 60.0
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=5.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError("the OpenEnv server never became healthy")
            time.sleep(0.1)
        yield OpenEnvServer(url, ledger)
    finally:
        process.terminate()
        try:
            process.wait(30.0)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        assert process.stdout is not None
        process.stdout.close()
