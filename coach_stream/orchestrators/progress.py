"""Following a run through its tasks' logs: the JSON event lines become one progress view.

Every process of a run prints one JSON object per line on stdout (``{"event":
"progress", ...}``, ``"evaluation"``, ``"finished"``) next to human logging on stderr;
the supervisor appends both to ``logs/<task>.log``. The launcher's live display,
`coach-stream status` and the end-to-end tests all read the run this way, so what they
show is exactly what the processes reported, from any process, even after the run.
"""

from __future__ import annotations

import json
import math
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def parse_event(line: str) -> dict[str, Any] | None:
    """The JSON event on ``line``, or None for human log lines and partial writes."""
    text = line.strip()
    if not text.startswith("{") or '"event"' not in text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) and isinstance(value.get("event"), str) else None


class LogFollower:
    """Yields complete new lines of every ``*.log`` in a directory, remembering offsets."""

    def __init__(self, logs_dir: Path) -> None:
        self._dir = logs_dir
        self._offsets: dict[Path, int] = {}
        self._partial: dict[Path, bytes] = {}

    def poll(self) -> list[tuple[str, str]]:
        """``(task, line)`` pairs written since the last call (a half-written line waits)."""
        lines: list[tuple[str, str]] = []
        if not self._dir.is_dir():
            return lines
        for path in sorted(self._dir.glob("*.log")):
            offset = self._offsets.get(path, 0)
            try:
                with path.open("rb") as handle:
                    handle.seek(offset)
                    data = handle.read()
            except OSError:
                continue
            self._offsets[path] = offset + len(data)
            data = self._partial.pop(path, b"") + data
            *complete, rest = data.split(b"\n")
            if rest:
                self._partial[path] = rest
            lines += [(path.stem, raw.decode("utf-8", errors="replace")) for raw in complete]
        return lines


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


@dataclass
class RunProgress:
    """The latest figures of a run, as reported by its tasks."""

    eval_episodes: int = 20
    trainer: dict[str, Any] = field(default_factory=dict)
    """The trainer's last "progress" event: namespaced keys (``time/env_steps``,
    ``time/policy_version``, ``rollout/policy_lag_mean``, ``eval/mean_return``,
    ``train/loss``, ...; docs/algorithms.md lists them)."""
    workers: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Each rollout task's last "progress" event."""
    evaluation: dict[str, Any] | None = None
    finished: dict[str, Any] | None = None
    """The trainer's "finished" event: reason, final_version, checkpoint_uri."""
    trainer_starts: int = 0
    """How many times the trainer started (restarts resume from a checkpoint)."""
    resumed: list[dict[str, Any]] = field(default_factory=list)
    """Events in which a restarted trainer reported where it resumed from."""
    _eval_returns: deque[float] = field(default_factory=deque)

    def feed(self, task: str, line: str) -> None:
        if task == "trainer" and line.startswith("# coach-stream") and ": start trainer" in line:
            self.trainer_starts += 1
        event = parse_event(line)
        if event is not None:
            self.feed_event(task, event)

    def feed_event(self, task: str, event: dict[str, Any]) -> None:
        """One event as a task reported it (a parsed JSON line or a telemetry record)."""
        kind = event["event"]
        if kind == "started" and task == "trainer":  # published on the telemetry topic only
            self.trainer_starts += 1
        elif kind == "progress":
            if task == "trainer":
                self.trainer = event
            else:
                self.workers[task] = event
        elif kind == "evaluation" and task != "trainer":  # the trainer echoes the evaluator
            self._add_evaluation(event)
        elif kind == "finished" and task == "trainer":
            self.finished = event
        elif kind == "resumed" and task == "trainer":
            self.resumed.append(event)

    def _add_evaluation(self, event: dict[str, Any]) -> None:
        self.evaluation = event
        mean = _number(event.get("mean_return"))
        episodes = event.get("episodes")
        if mean is None or not isinstance(episodes, int) or episodes < 1:
            return
        # Only the round means travel in the log; each stands for its episodes here.
        self._eval_returns.extend([mean] * episodes)
        while len(self._eval_returns) > self.eval_episodes:
            self._eval_returns.popleft()

    @property
    def mean_eval_return(self) -> float | None:
        """Mean greedy return over the last ``eval_episodes`` evaluation episodes.

        The trainer's figure is the one that ends the run, so it wins once reported; until
        then the evaluator's round means stand in.
        """
        finished, trainer = self.finished or {}, self.trainer
        for exact in (finished.get("eval_mean_return"), trainer.get("eval/mean_return")):
            if (number := _number(exact)) is not None:
                return number
        if not self._eval_returns:
            return None
        return sum(self._eval_returns) / len(self._eval_returns)

    @property
    def env_steps(self) -> int | None:
        value = _number(self.trainer.get("time/env_steps"))
        return int(value) if value is not None else None

    @property
    def worker_env_steps_per_s(self) -> float | None:
        """Sum of the rollout workers' latest rates: how fast experience is produced."""
        rates = [_number(w.get("env_steps_per_s")) for w in self.workers.values()]
        known = [rate for rate in rates if rate is not None]
        return sum(known) if known else None

    def figure(self, key: str) -> float | None:
        """A number from the trainer's last progress event by its namespaced key, such as
        ``"time/env_steps_per_s"`` (None until reported)."""
        return _number(self.trainer.get(key))


def read_progress(logs_dir: Path, eval_episodes: int = 20) -> RunProgress:
    """A run's progress from its logs, read once (`coach-stream status`)."""
    progress = RunProgress(eval_episodes=eval_episodes)
    for task, line in LogFollower(logs_dir).poll():
        progress.feed(task, line)
    return progress
