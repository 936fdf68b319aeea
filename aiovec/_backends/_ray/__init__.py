"""The Ray backend: sub-envs hosted by Ray actors (``_actor``), driven from ``_backend``.

Empty on purpose: importing the package must not import Ray.
"""
