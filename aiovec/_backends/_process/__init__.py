"""The process backend: worker processes hosting shares of the sub-envs, results in shared
memory (``_backend``); the worker side (``_worker``), the wire protocol (``_protocol``), the
shared memory block (``_shared_memory``) and the fork server that starts workers
(``_forkserver``).

Empty on purpose: a worker imports ``_worker`` alone, and must not pay for the parent side.
"""
