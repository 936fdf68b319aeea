"""Environments for testing vector envs (and code built on them): deterministic, seedable, small.

``EpisodeEnv`` exercises every batching path (Box, Discrete, Dict and Tuple spaces; episodes
ending by termination and by truncation; infos of many types). ``CountingEnv`` counts what was
done to it, so a test can prove a rejected call touched nothing.
"""

from aiovec.testing._envs import SPACE_KINDS as SPACE_KINDS
from aiovec.testing._envs import CountingEnv as CountingEnv
from aiovec.testing._envs import EpisodeEnv as EpisodeEnv

__all__ = ("SPACE_KINDS", "CountingEnv", "EpisodeEnv")
