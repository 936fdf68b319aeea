"""The backends: where sub-envs live and how requests reach them.

Each implements ``aiovec._core._backend.Backend`` and speaks the vocabulary of
``aiovec._core._requests``; ``aiovec._core._selection`` loads them by name. Code that runs next
to the sub-envs (in a worker process, a thread or a Ray actor) lives here too (``_slot``).
"""
