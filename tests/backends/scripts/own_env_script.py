"""A user's script: its own env, registered here, run on aiovec's workers."""
import sys

import gymnasium as gym
import numpy as np
from gymnasium import spaces

import aiovec


class CoinEnv(gym.Env):
    observation_space = spaces.Box(0, 100, (1,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, bias=0.0):
        self.bias, self.count = bias, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.count = 0
        return np.array([self.count], np.float32), {}

    def step(self, action):
        self.count += 1
        return np.array([self.count], np.float32), float(action) + self.bias, False, False, {}


gym.register("Coin-v0", entry_point=CoinEnv, max_episode_steps=3)
gym.register("CoinByName-v0", entry_point="__main__:CoinEnv", kwargs={"bias": 10.0})

if __name__ == "__main__":
    vector_kwargs = dict(arg.split("=", 1) for arg in sys.argv[1:])
    envs = aiovec.VectorEnv([lambda: gym.make("Coin-v0"), lambda: gym.make("CoinByName-v0")],
                            **vector_kwargs)
    envs.reset(seed=0)
    for _ in range(3):
        obs, rewards, terminations, truncations, infos = envs.step(np.array([1, 1]))
    print("vector", envs.backend_name, obs.ravel().tolist(), rewards.tolist(),
          truncations.tolist())
    envs.close()
    made = aiovec.make_vec("Coin-v0", 2, vector_kwargs=vector_kwargs)
    made.reset(seed=0)
    print("make_vec", made.step(np.array([0, 1]))[1].tolist())
    made.close()
    aiovec.register_envs("Coin-v0")
    through_gymnasium = gym.make_vec("aiovec/Coin-v0", 2, **vector_kwargs)
    through_gymnasium.reset(seed=0)
    print("gymnasium.make_vec", type(through_gymnasium).__name__,
          through_gymnasium.step(np.array([1, 0]))[1].tolist())
    through_gymnasium.close()
