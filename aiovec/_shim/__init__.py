"""The synchronous shim: a Gymnasium ``VectorEnv`` driving the async core on a private loop."""
