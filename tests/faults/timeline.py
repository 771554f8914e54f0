"""What a drill reads from a run: every task's events, in order, with the tasks' own clocks.

Recovery is measured from the tasks' event times (wall clock, ``time.time()`` in each
task), so it is what the run saw, not when the test happened to look: a fault has
*recovered* when, after it ended, the trainer has published two more policy versions and
every rollout worker has reported progress again. Tasks report once a second, so a
figure is accurate to about a second.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from coach_stream.observability.fold import parse_event
from coach_stream.orchestrators import LocalOrchestrator
from coach_stream.orchestrators.progress import LogFollower

Event = tuple[str, dict[str, Any]]


@dataclass
class Timeline:
    orchestrator: LocalOrchestrator
    run_id: str
    events: list[Event] = field(default_factory=list)
    lines: list[tuple[str, str]] = field(default_factory=list)
    """Every log line, events and the tasks' log records alike."""

    def __post_init__(self) -> None:
        self.follower = LogFollower(self.orchestrator.run_dir(self.run_id).logs_dir)

    def poll(self) -> None:
        for task, line in self.follower.poll():
            self.lines.append((task, line))
            if (event := parse_event(line)) is not None:
                self.events.append((task, event))

    def of(self, kind: str, task: str | None = None, since: float = 0.0) -> list[dict[str, Any]]:
        return [
            event
            for name, event in self.events
            if event["event"] == kind
            and (task is None or name == task)
            and float(event.get("time", 0.0)) >= since
        ]

    def logged(self, task: str, text: str) -> bool:
        return any(name == task and text in line for name, line in self.lines)

    def trainer_version(self) -> int:
        """The newest policy version the trainer has reported (-1 before any)."""
        versions = [int(e["time/policy_version"]) for e in self.of("progress", "trainer")]
        return max(versions, default=-1)

    def wait(self, what: str, check: Callable[[], bool], timeout_s: float) -> None:
        """Poll the logs until ``check()`` holds; the run's log tail explains a timeout."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.poll()
            if check():
                return
            finished = self.of("finished", "trainer")
            assert not finished, f"the run ended before {what}: {finished}\n{self.tail()}"
            assert time.monotonic() < deadline, f"{what} did not happen in {timeout_s:.0f} s\n" + (
                self.tail()
            )
            time.sleep(0.2)  # the tasks write their logs; there is nothing to block on

    def recovered_after(self, ended: float, workers: Iterable[str], version: int) -> float | None:
        """Seconds from ``ended`` (wall clock) until the run was training again, or None yet.

        Training again: the trainer reported a policy version at least ``version + 2`` and
        every worker in ``workers`` reported progress, all after ``ended``.
        """
        trainer = [
            e
            for e in self.of("progress", "trainer", since=ended)
            if int(e["time/policy_version"]) >= version + 2
        ]
        if not trainer:
            return None
        times = [float(trainer[0]["time"])]
        for worker in workers:
            progress = self.of("progress", worker, since=ended)
            if not progress:
                return None
            times.append(float(progress[0]["time"]))
        return max(times) - ended

    def tail(self, lines: int = 60) -> str:
        return "\n".join(list(self.orchestrator.logs(self.run_id))[-lines:])
