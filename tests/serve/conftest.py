"""A real server for the served-env tests: examples/serve/server.py under uvicorn, in its own
process on 127.0.0.1, stopped with SIGTERM at the end; nothing it started may outlive it."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.leaks import descendants, wait_for_exit, worker_processes_of

SERVER = Path(__file__).resolve().parents[2] / "examples" / "serve" / "server.py"


@dataclass
class Server:
    url: str
    process: subprocess.Popen[str]

    def workers(self) -> set[int]:
        """aiovec's sub-env worker processes under the server."""
        return worker_processes_of(self.process.pid)

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, then wait; returns the exit code. Everything it started must be gone."""
        below = descendants(self.process.pid)
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"the server did not stop within {timeout} s") from None
        assert wait_for_exit(sorted(below), 15) == [], "the server's children did not exit"
        return code


@pytest.fixture
def start_server() -> Iterator[Callable[..., Server]]:
    """Start ``server.py`` with extra arguments; stopped (and checked clean) at teardown."""
    started: list[Server] = []

    def start(*args: str) -> Server:
        process = subprocess.Popen(
            [sys.executable, str(SERVER), "--port", "0", *args], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        assert process.stdout is not None
        line = process.stdout.readline()  # printed once the app's lifespan has started
        if not line.startswith("serving on "):
            process.kill()
            _, errors = process.communicate()
            raise AssertionError(f"the server did not start: {line!r} {errors}")
        server = Server(line.split()[-1], process)
        started.append(server)
        return server

    yield start
    for server in started:
        code = server.stop()
        _, errors = server.process.communicate()
        assert code == 0, errors
        assert "Traceback" not in errors, errors
