"""Waiting in tests for something another process or thread does: poll a condition.

A test that sleeps a fixed time either waits too long or fails on a slow machine; one
that polls returns as soon as the condition holds and fails with a message when it never
does.
"""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(condition: Callable[[], bool], timeout: float = 20.0, what: str = "") -> None:
    """Return once ``condition()`` is true; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what or 'condition'} not met within {timeout:g} s")
        time.sleep(0.02)
