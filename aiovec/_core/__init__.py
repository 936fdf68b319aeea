"""The async core: pure per-env logic (autoreset, batching, infos) and the async vector env."""
