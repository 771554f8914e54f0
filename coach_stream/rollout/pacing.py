"""The writer side of Reverb's rate limiter: an ASYNC worker waits while the trainer is behind.

The trainer's samples-per-insert limiter (``trainer/replay.py``) stops it *reading* once it
has more experience than it can learn from; without a limit on the writers, workers that
outrun it fill the log faster than it is read, and its consumer lag (and the age of what
it learns from) grows for as long as the run lasts. ``UnreadLimit`` is the bound on the
other side: a worker acts on only while the records the trainer has not read yet, from all
workers together, are at most ``max_unread``.

"Not read yet" is measured at the log (``ExperienceBacklog``: the Kafka topic's ends minus
the trainer group's committed positions), so the bound holds whatever the number of
workers, and workers need no word from each other. A measurement costs round trips to the
broker, so it is taken at most every ``recheck_s``; in between, this worker's own writes
are added to the last one. An unknown backlog (nothing committed yet, broker not
answering) admits: the limit is a rate limit, not a barrier, and a broker outage already
stops delivery by itself.

The limiter never times out: a worker whose trainer is down or restarting waits until it
reads again (or the run is finished), which is exactly when more experience is useful.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from coach_stream.core import ExperienceBacklog


def unread_records(max_unread_steps: int, chunk_steps: int) -> int:
    """The bound in records: whole chunks of ``chunk_steps`` (at least one) fit in it.

    A record holds at most ``chunk_steps`` env steps (fewer when an episode ends), so the
    env steps waiting stay at most ``max_unread_steps`` when the records do.
    """
    return max(1, math.floor(max_unread_steps / chunk_steps))


class UnreadLimit:
    """``admits()``: may the worker act another share now? (see the module docstring)."""

    def __init__(
        self,
        backlog: ExperienceBacklog,
        max_unread: int,
        *,
        recheck_s: float = 0.25,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_unread < 1:
            raise ValueError(f"max_unread must be at least 1 record, not {max_unread}")
        self.backlog, self.max_unread, self.recheck_s, self.clock = (
            backlog,
            max_unread,
            recheck_s,
            clock,
        )
        self.last_unread: int | None = None
        """The last measurement (records; None: unknown or never measured)."""
        self.measurements = 0
        self._measured_at: float | None = None
        self._written_since = 0  # records this worker wrote after the last measurement

    def wrote(self, records: int) -> None:
        """Count this worker's writes: they are unread until the next measurement says not."""
        self._written_since += records

    def admits(self, *, measure: bool = False) -> bool:
        """True while the estimated unread records are within the bound (or unknown).

        ``measure``: ask the log now, whatever ``recheck_s`` says (after a wait).
        """
        now = self.clock()
        due = self._measured_at is None or now - self._measured_at >= self.recheck_s
        if measure or due:
            self.last_unread = self.backlog.unread()
            self._measured_at, self._written_since = now, 0
            self.measurements += 1
        estimate = self.estimate()
        return estimate is None or estimate <= self.max_unread

    def estimate(self) -> int | None:
        """The last measurement plus this worker's writes since (records)."""
        if self.last_unread is None:
            return None
        return self.last_unread + self._written_since
