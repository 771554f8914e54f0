"""The ``coach-stream`` command line: one module per command group."""
