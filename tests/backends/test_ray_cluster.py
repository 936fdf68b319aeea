"""Two Ray nodes on one machine (``ray.cluster_utils.Cluster``, all on loopback): sub-envs
placed on a node by a custom resource, that node killed, and the envs back on a live node.

This module runs its own cluster: it shuts the session's shared runtime down first (the next
Ray test starts it again).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import aiovec
from tests.envs import NodeEnv
from tests.ray_runtime import ray_environment

pytestmark = pytest.mark.anyio

#: Notice a dead node in ~1.5 s instead of Ray's default ~15 s.
FAST_HEALTH_CHECKS = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 500,
                      "health_check_timeout_ms": 500, "health_check_failure_threshold": 3}
SIMULATOR = "simulator"  # the custom resource only the simulator nodes have
ON_SIMULATOR = {"num_cpus": 0, "resources": {SIMULATOR: 1}}


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    ray_environment()
    import ray
    from ray.cluster_utils import Cluster

    ray.shutdown()  # the session's shared runtime, if any
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 2, "include_dashboard": False, "_system_config": FAST_HEALTH_CHECKS})
    try:
        ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_envs_on_a_killed_node_come_back_on_a_live_one(cluster: Any) -> None:
    simulator_node = cluster.add_node(num_cpus=2, resources={SIMULATOR: 4})
    cluster.wait_for_nodes()
    plain = aiovec.AsyncVectorEnv([NodeEnv] * 2, backend="ray", num_workers=2,
                                  actor_options=ON_SIMULATOR)
    restarting = aiovec.AsyncVectorEnv([NodeEnv] * 3, backend="ray", num_workers=2,
                                       actor_options=ON_SIMULATOR,
                                       restart=aiovec.RestartPolicy(backoff=0.01))
    async with plain, restarting:
        for envs in (plain, restarting):
            await envs.reset(seed=0)
            await envs.step(np.ones(envs.num_envs, dtype=np.int64))
            assert set(await envs.call("node_id")) == {simulator_node.node_id}

        cluster.remove_node(simulator_node, allow_graceful=False)  # kills its processes
        replacement = cluster.add_node(num_cpus=2, resources={SIMULATOR: 4})

        with pytest.raises(aiovec.WorkerDiedError) as caught:
            await plain.step(np.ones(2, dtype=np.int64))
        assert caught.value.env_ids == (0, 1)  # type: ignore[attr-defined]
        cause = caught.value.exceptions[0].__cause__  # type: ignore[attr-defined]
        assert isinstance(cause, aiovec.WorkerDiedError) and "died" in str(cause)

        obs, _rewards, terminations, truncations, infos = await restarting.step(
            np.ones(3, dtype=np.int64))
        assert truncations.tolist() == [True] * 3  # the episodes the node's death cut
        assert not terminations.any() and infos["_restart"].all()
        assert obs[:, 0].tolist() == [1, 1, 1]  # the last observations stand
        assert set(await restarting.call("node_id")) == {replacement.node_id}
        obs, *_ = await restarting.step(np.ones(3, dtype=np.int64))  # a new episode starts
        assert obs.tolist() == [[0, 1]] * 3
        assert restarting.statistics().restarts == 3
    cluster.remove_node(replacement)
