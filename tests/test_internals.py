"""The private internals aiovec uses (``aiovec._internals``): each in use on every Python the
package claims, each fallback doing what its internal does, and the shim and the codec run
whole on the fallbacks (``AIOVEC_PRIVATE_INTERNALS=0``)."""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aiovec._internals import INTERNALS, SWITCH, look_up

ROOT = Path(__file__).resolve().parent.parent
SWITCHED_OFF = os.environ.get(SWITCH) == "0"
#: Internals that some supported Pythons do not have, and the first version that has each.
SINCE = {"asyncio.tasks._swap_current_task": (3, 12)}


def test_each_internal_is_in_use_on_this_python() -> None:
    """On every Python CI runs (3.10 to 3.13) each look-up finds its internal and its check
    passes, so that the fast paths are what runs there; with the switch off, none is used."""
    expected = {name: not SWITCHED_OFF and sys.version_info >= SINCE.get(name, (0,))
                for name in INTERNALS.found}
    assert INTERNALS.found == expected
    assert len(expected) == 7
    assert INTERNALS.borrows_threads is not SWITCHED_OFF


def test_switched_off_every_look_up_takes_its_fallback() -> None:
    public = look_up(False)
    assert not any(public.found.values())
    assert public.set_running_loop is None and public.swap_current_task is None
    assert not public.borrows_threads
    assert public.signal_handler is signal.getsignal
    assert public.set_signal_handler is signal.signal


#: JSON texts: values of every kind, and texts that hold no value at the position.
TEXTS = ['{"a":[1,-2.5,NaN,Infinity,-Infinity,true,false,null,"\\u00e9\\n"],"b":{}}',
         '[[[]]]', '"x"', "12345678901234567890123", "-0.0", " 1", "", "]", '{"a":', "nul",
         '[1,2] trailing']
#: Trees as aiovec's converter makes them.
TREES: list[Any] = [{"a": [1, -2.5, math.nan, math.inf, -math.inf, True, None, "é\n\"\\"]},
                    [], {}, "", 0, 2**80, -0.0, 1e-310, [[{"$array": 3}]], "\u2028\ud83d"]


def _scan(scan: Any, text: str, at: int) -> Any:
    try:
        return scan(text, at)
    except StopIteration:
        return "no value"
    except ValueError:
        return "no value"


@pytest.mark.parametrize("text", TEXTS)
def test_the_json_scanner_and_its_fallback_read_alike(text: str) -> None:
    public = look_up(False)
    for at in range(len(text) + 1):
        internal, fallback = _scan(INTERNALS.scan_json, text, at), _scan(public.scan_json,
                                                                        text, at)
        assert repr(internal) == repr(fallback), (text, at)  # repr: NaN equals itself


@pytest.mark.parametrize("tree", TREES, ids=repr)
def test_the_json_writer_and_its_fallback_write_alike(tree: Any) -> None:
    text = INTERNALS.json_text(tree)
    assert text == look_up(False).json_text(tree)
    assert text == json.dumps(tree, allow_nan=True, separators=(",", ":"))


def test_both_loop_runners_run_a_loop_until_the_task_is_done() -> None:
    for internals in (INTERNALS, look_up(False)):
        loop = asyncio.new_event_loop()
        try:
            async def ends_by_stopping(loop: asyncio.AbstractEventLoop) -> str:
                await asyncio.sleep(0.01)
                loop.stop()
                return "done"

            task = loop.create_task(ends_by_stopping(loop))
            internals.runner_for(loop)(task)
            assert task.result() == "done"
            assert not loop.is_running()
        finally:
            loop.close()


def test_a_loop_of_another_kind_runs_the_public_way() -> None:
    """uvloop's loop (or any loop whose ``run_forever`` set-up is its own) is never stepped
    with asyncio's internals, whatever a look-up found."""
    import uvloop

    loop = uvloop.new_event_loop()
    try:
        runner = INTERNALS.runner_for(loop)
        assert runner.__name__ == look_up(False).runner_for(loop).__name__
    finally:
        loop.close()


#: What runs again with every internal switched off: the shim's event loop (in a script, in
#: and out of a running asyncio, uvloop or trio loop, from two threads, Ctrl-C), the shim,
#: the codec's round trips, and this module (which then checks that none is in use).
ON_THE_FALLBACKS = ["tests/shim/test_loop_driver.py", "tests/shim/test_vector_env.py",
                    "tests/wire/test_codec.py", "tests/test_internals.py"]


def test_the_shim_and_the_codec_pass_their_tests_on_every_fallback(
        request: pytest.FixtureRequest) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q",
         "-m", "not slow", "--deselect", request.node.nodeid, *ON_THE_FALLBACKS],
        cwd=ROOT, env={**os.environ, SWITCH: "0"}, capture_output=True, text=True,
        timeout=600, check=False)
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    passed = re.search(r"(\d+) passed", summary)
    assert passed is not None and int(passed.group(1)) > 50, summary
