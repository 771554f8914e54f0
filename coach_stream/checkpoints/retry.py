"""Retry with capped exponential backoff, for stores that talk over a network.

GCS answers 5xx, 429, timeouts and connection resets now and then; a trainer must ride
those out rather than crash an hours-long run. Only errors a caller classifies as
transient are retried, and the attempt count and total time are bounded so an outage
surfaces as one clear ``StoreUnavailableError`` instead of a hang.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from coach_stream.errors import ConfigError, StoreUnavailableError

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How hard to try: ``attempts`` in total, backoff doubling from ``initial_backoff_s``."""

    attempts: int = 6
    initial_backoff_s: float = 0.2
    max_backoff_s: float = 5.0
    multiplier: float = 2.0
    deadline_s: float = 60.0  # no new attempt starts after this much time

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.initial_backoff_s < 0 or self.multiplier < 1:
            raise ConfigError(
                f"retry policy {self} is invalid; use attempts >= 1, a non-negative "
                "initial backoff and a multiplier >= 1."
            )

    def backoff(self, attempt: int, jitter: float) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based), jitter in [0, 1)."""
        base = min(self.max_backoff_s, self.initial_backoff_s * self.multiplier ** (attempt - 1))
        return base * (0.5 + 0.5 * jitter)  # "equal jitter": spread, but never near zero


def call_with_retry(
    fn: Callable[[], T],
    *,
    policy: RetryPolicy,
    is_transient: Callable[[BaseException], bool],
    describe: str,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    rng: random.Random | None = None,
) -> T:
    """``fn()``, retried on transient errors; other errors pass through unchanged.

    Raises ``StoreUnavailableError`` naming ``describe`` and the last error once the
    attempts or the deadline run out.
    """
    jitter = rng or random.Random()
    start = clock()
    attempt = 0
    while True:
        attempt += 1
        try:
            return fn()
        except Exception as exc:
            if not is_transient(exc):
                raise
            delay = policy.backoff(attempt, jitter.random())
            out_of_time = clock() - start + delay > policy.deadline_s
            if attempt >= policy.attempts or out_of_time:
                raise StoreUnavailableError(
                    f"could not {describe}: the checkpoint store kept failing for "
                    f"{clock() - start:.1f} s over {attempt} attempts (last error: "
                    f"{exc.__class__.__name__}: {str(exc)[:200]}); check that the store is "
                    "reachable and retry."
                ) from exc
            sleep(delay)
