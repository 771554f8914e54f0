"""What a trainer reports: its rates, the policy lag of what it read, where its time went
(per progress interval), and the returns of training and evaluation episodes.

The interval starts again at every event, and at a resume: rates count the steps read since
then, not the steps a restored state already held.
"""

from __future__ import annotations

import logging
import math
from collections import Counter, deque
from collections.abc import Callable, Sequence

log = logging.getLogger(__name__)


class ProgressMeter:
    """Counts for one progress interval, read and restarted by ``interval``."""

    def __init__(self, clock: Callable[[], float], eval_episodes: int) -> None:
        self.clock = clock
        self.eval_returns: deque[float] = deque(maxlen=eval_episodes)  # the target's window
        self.train_returns: deque[float] = deque(maxlen=100)
        self.started = clock()
        self.seconds = {"read_s": 0.0, "learn_s": 0.0, "publish_s": 0.0}  # where time goes
        self._since = (self.started, 0, 0)  # (time, env steps, updates) at the last event
        self._lag_counts: Counter[int] = Counter()  # chunks per lag: the report's histogram

    def rebase(self, env_steps: int, updates: int) -> None:
        """Start the interval now, at these counts (a resumed trainer's restored ones)."""
        self._since = (self.clock(), env_steps, updates)

    def due(self, every_s: float) -> bool:
        return self.clock() - self._since[0] >= every_s

    def wall_s(self) -> float:
        return self.clock() - self.started

    def evaluated(self, returns: Sequence[float]) -> bool:
        """Take an evaluation's returns into the target's window; False (and taken not)
        when one is NaN or infinite: an inf would reach the target, a NaN hide it."""
        if not all(math.isfinite(r) for r in returns):
            log.warning("ignoring an evaluation report with non-finite returns")
            return False
        self.eval_returns.extend(returns)
        return True

    def eval_mean(self) -> float | None:
        return _mean(self.eval_returns)

    def train_mean(self) -> float | None:
        return _mean(self.train_returns)

    def target_reached(self, target_return: float) -> bool:
        """A full window of greedy returns whose mean is at least the target."""
        mean = self.eval_mean()
        full = len(self.eval_returns) == self.eval_returns.maxlen
        return full and mean is not None and mean >= target_return

    def chunk_read(self, lag: int) -> None:
        """A chunk read ``lag`` versions behind the newest announced one."""
        self._lag_counts[lag] += 1

    def interval(self, env_steps: int, updates: int) -> dict[str, object]:
        """The ``time/`` rates and ``rollout/`` policy lag since the last call; then restart."""
        now = self.clock()
        then, steps_then, updates_then = self._since
        elapsed = max(now - then, 1e-9)
        counts = dict(self._lag_counts)
        chunks = sum(counts.values())
        fields: dict[str, object] = {
            "time/env_steps_per_s": (env_steps - steps_then) / elapsed,
            "time/updates_per_s": (updates - updates_then) / elapsed,
            "time/wall_s": now - self.started,
            **{f"time/{name}": seconds for name, seconds in self.seconds.items()},
            "rollout/policy_lag_mean": (
                sum(lag * n for lag, n in counts.items()) / chunks if chunks else None
            ),
            "rollout/policy_lag_counts": counts,  # {lag: chunks} this interval
        }
        self._lag_counts.clear()
        self._since = (now, env_steps, updates)
        return fields


def _mean(values: deque[float]) -> float | None:
    return sum(values) / len(values) if values else None
