"""Moved to ``coach_stream.transport.retention`` (a topic setting, not a replay concern).

Kept only as an alias for the callers not yet moved (``config.py``,
``orchestrators/launcher.py``); import from ``transport.retention``.
"""

from coach_stream.transport.retention import (
    FOREVER,
    Retention,
    describe,
    describe_retention,
    parse_retention,
)

__all__ = ["FOREVER", "Retention", "describe", "describe_retention", "parse_retention"]
