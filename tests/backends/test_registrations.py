"""Envs registered in the user's own script (or notebook) exist in the workers: a real script,
run as a user runs it, on the fork server, spawn and Ray, through ``aiovec.VectorEnv``,
``aiovec.make_vec``, ``gymnasium.make_vec("aiovec/...")`` and SB3's ``make_vec_env``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest

from aiovec._backends._registrations import export_registrations, install_registrations
from tests.ray_runtime import RAY_ENVIRONMENT, joining_environment

#: The user's script: ``CoinEnv`` defined in ``__main__``, registered twice (the class itself
#: as entry point, and ``"__main__:CoinEnv"`` by name); its arguments are VectorEnv keywords.
SCRIPT = Path(__file__).resolve().parent / "scripts" / "own_env_script.py"
REPO = Path(__file__).resolve().parents[2]


def run_script(tmp_path: Path, *arguments: str, **extra: str) -> str:
    """Run the script from a directory of its own, as ``python own_env_script.py``."""
    script = tmp_path / SCRIPT.name
    script.write_text(SCRIPT.read_text())
    environment = {**os.environ, **RAY_ENVIRONMENT, "PYTHONPATH": str(REPO), **extra}
    finished = subprocess.run([sys.executable, script.name, *arguments], cwd=tmp_path,
                              env=environment, capture_output=True, text=True, timeout=180,
                              check=False)
    assert finished.returncode == 0, finished.stderr
    assert "Overriding environment" not in finished.stderr
    return finished.stdout


EXPECTED = [
    # Coin-v0 truncates after 3 steps (the spec's max_episode_steps reached the workers);
    # CoinByName-v0's spec kwargs (bias 10) did too.
    "[3.0, 3.0] [1.0, 11.0] [True, False]",
    "make_vec [0.0, 1.0]",
    "gymnasium.make_vec VectorEnv [1.0, 0.0]",
]


@pytest.mark.parametrize("start_method", ["forkserver", "spawn"])
def test_a_scripts_own_registrations_reach_process_workers(tmp_path: Path,
                                                           start_method: str) -> None:
    output = run_script(tmp_path, "backend=process", f"start_method={start_method}")
    assert "vector process" in output
    for line in EXPECTED:
        assert line in output


@pytest.mark.ray
def test_a_scripts_own_registrations_reach_ray_actors(tmp_path: Path) -> None:
    """The script joins this session's Ray runtime, as a user's joins their cluster (by
    ``RAY_ADDRESS``, which ``address="auto"`` reads first: another Ray on the machine, say
    RLlib's tests, is never the one joined)."""
    output = run_script(tmp_path, "backend=ray", "address=auto", **joining_environment())
    assert "vector ray" in output
    for line in EXPECTED:
        assert line in output


def test_only_registrations_gymnasium_lacks_travel_and_installing_keeps_what_exists() -> None:
    gym.register("AiovecExportProbe-v0", entry_point=lambda: gym.make("CartPole-v1"))
    try:
        exported = dict(export_registrations())
        assert "AiovecExportProbe-v0" in exported
        assert "CartPole-v1" not in exported and "Reacher-v2" not in exported  # Gymnasium's
        probe = gym.registry.pop("AiovecExportProbe-v0")
        install_registrations(list(exported.items()))
        assert gym.registry["AiovecExportProbe-v0"] is not probe  # a copy, from the bytes
        env = gym.make("AiovecExportProbe-v0")
        assert env.reset(seed=0)[0].shape == (4,)
        env.close()
        install_registrations([("AiovecExportProbe-v0", b"not a pickle")])  # present: kept
        install_registrations([("AiovecBroken-v0", b"not a pickle")])  # unreadable: skipped
        assert "AiovecBroken-v0" not in gym.registry
    finally:
        gym.registry.pop("AiovecExportProbe-v0", None)


def test_sb3_make_vec_env_runs_a_scripts_own_env(tmp_path: Path) -> None:
    script = tmp_path / "sb3_script.py"
    script.write_text(SCRIPT.read_text().split('if __name__ == "__main__":')[0] + '''
if __name__ == "__main__":
    from stable_baselines3.common.env_util import make_vec_env
    from aiovec.sb3 import SB3VecEnv
    vec_env = make_vec_env("Coin-v0", n_envs=2, vec_env_cls=SB3VecEnv,
                           vec_env_kwargs={"backend": "process"})
    vec_env.reset()
    obs, rewards, dones, infos = vec_env.step(np.array([1, 0]))
    print("sb3", rewards.tolist(), obs.ravel().tolist())
    vec_env.close()
''')
    finished = subprocess.run([sys.executable, script.name], cwd=tmp_path, capture_output=True,
                              text=True, timeout=180, check=False,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    assert finished.returncode == 0, finished.stderr
    assert "sb3 [1.0, 0.0] [1.0, 1.0]" in finished.stdout
