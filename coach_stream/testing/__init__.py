"""In-memory implementations of the core protocols, for unit tests (no processes, no network)."""
