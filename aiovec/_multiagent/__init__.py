"""Multi-agent (PettingZoo ``ParallelEnv``) vector envs over the single-agent engine."""
