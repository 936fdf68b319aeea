"""The backends: where sub-envs live and how requests reach them.

Each implements ``aiovec._core._backend.Backend`` and speaks the vocabulary of
``aiovec._core._requests``; ``aiovec._core._selection`` loads them by name. Code that runs next
to the sub-envs (in a worker process, a thread or a Ray actor) lives here too (``_slot``).
"""

from aiovec._core._cleanups import set_keeper_starter


def _start_cleanup_keeper() -> tuple[int, int] | None:
    from aiovec._backends._keeper import start_cleanup_keeper  # a subprocess: on first use

    return start_cleanup_keeper()


set_keeper_starter(_start_cleanup_keeper)
