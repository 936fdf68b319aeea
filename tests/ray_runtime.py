"""The Ray runtime the tests share: started once, on loopback, by the first test that needs it.

Starting Ray takes seconds, so one runtime serves the whole session (the two-node cluster test
shuts it down and starts its own; the next Ray test starts the shared one again).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

#: Keep every Ray listener on 127.0.0.1 (these machines allow no other traffic), and no token
#: authentication for a runtime that only this test session reaches. Ray starts its workers
#: (the actors' processes) at nice 15; beside the suite's other pytest-xdist workers, on a
#: busy 2-core machine, that left an actor ~1 % of a core: a 300-step rollout took minutes
#: and timed out. At nice 0 the actors take their share like every other test's processes.
RAY_ENVIRONMENT = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled",
                   "RAY_worker_niceness": "0"}
#: Logical CPUs: actors hold one each by default, and tests give each sub-env its own actor.
NUM_CPUS = 8
#: A custom resource of the shared runtime, for the placement tests.
TEST_RESOURCE = "aiovec_test_slot"
#: The title Ray gives the process of each of aiovec's actors.
ACTOR_TITLE = b"ray::EnvHost"


def ray_environment() -> None:
    for key, value in RAY_ENVIRONMENT.items():
        os.environ.setdefault(key, value)


def ensure_ray() -> Any:
    """The ``ray`` module, with the shared runtime initialised.

    Always a runtime of its own (``address="local"``): with no address, ``ray.init`` joins
    a live cluster named by ``RAY_ADDRESS`` or ``/tmp/ray/ray_current_cluster`` (a
    developer's ``ray start``, or a ``ray.cluster_utils.Cluster`` of another test run) and
    then refuses ``num_cpus``. Scripts the tests run join it by ``RAY_ADDRESS``.
    """
    ray_environment()
    import ray

    if not ray.is_initialized():
        ray.init(address="local", num_cpus=NUM_CPUS, resources={TEST_RESOURCE: 4},
                 include_dashboard=False, log_to_driver=False, configure_logging=False)
    return ray


def joining_environment() -> dict[str, str]:
    """The environment a script the tests run needs to join the shared runtime: its address
    in ``RAY_ADDRESS`` (which ``ray.init()`` and ``address="auto"`` read first, so another Ray
    on the machine is never the one joined)."""
    return {**RAY_ENVIRONMENT, "RAY_ADDRESS": ensure_ray().get_runtime_context().gcs_address}


def actor_pids() -> set[int]:
    """Processes on this machine that host one of aiovec's Ray actors."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_bytes().startswith(ACTOR_TITLE):
                    found.add(int(entry.name))
            except OSError:
                continue
    return found
