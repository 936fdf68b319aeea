"""Named shared limits: concurrency and rate caps on resources (a sandbox pool, a judge) that
sub-envs take from inside their calls, shared by every sub-env of a vector env wherever it runs
(``_limit``: what a limit allows; ``_broker``: who holds and who waits; ``_service``: the
thread serving worker processes; ``_take``: ``aiovec.limit``, and how backends bind it)."""
