"""Adapters that present aiovec vector envs through other libraries' interfaces."""
