"""The ASYNC rate limit: a worker waits while the trainer's backlog is over the bound.

Fake clock, scripted backlog and policy source: no sleeps, no broker. The waits that would
take seconds in a run advance the fake clock instead.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pytest

from coach_stream.core import Action, LoadedPolicy, Mode, PolicyVersion, RunFinished
from coach_stream.envs import make_vector_env
from coach_stream.errors import RunEndedError
from coach_stream.events import EventList
from coach_stream.rollout.pacing import UnreadLimit, unread_records
from coach_stream.rollout.worker import RolloutWorker, WorkerSettings
from coach_stream.testing.memory_log import (
    MemoryBacklog,
    MemoryExperienceReader,
    MemoryExperienceWriter,
    MemoryLog,
)

RECHECK_S = 0.25


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class ScriptedBacklog:
    """Answers ``unread()`` from a script; the last answer repeats."""

    def __init__(self, answers: Sequence[int | None]) -> None:
        self.answers, self.asked = answers, 0

    def unread(self) -> int | None:
        answer = self.answers[min(self.asked, len(self.answers) - 1)]
        self.asked += 1
        return answer


def policy(version: int) -> LoadedPolicy:
    announced = PolicyVersion("r", version, f"mem://{version}", "0" * 64, 1, version, 0, 0)
    return LoadedPolicy(announced, {})


class ScriptedSource:
    """A ``PolicySource``: ``wait_for`` spends its timeout on the fake clock unless the
    script has an event for that call ("v<N>": version N arrives; "finished")."""

    def __init__(self, clock: Clock, events: dict[int, str] | None = None) -> None:
        self.clock, self.events = clock, events or {}
        self.waits = 0
        self.finished: RunFinished | None = None
        self._current = policy(0)

    def latest(self, timeout: float) -> LoadedPolicy | None:
        return self._current

    def poll(self) -> LoadedPolicy | None:
        return None

    def wait_for(self, version: int, timeout: float) -> LoadedPolicy:
        self.waits += 1
        event = self.events.get(self.waits)
        if event == "finished":
            self.finished = RunFinished("r", self._current.version.version, "stopped", 0)
        elif event is not None:
            self.clock.now += 0.1  # a version arrives before the timeout
            self._current = policy(int(event.removeprefix("v")))
        if self.finished is not None:
            raise RunEndedError("run r finished; the worker should exit.")
        if self._current.version.version >= version:
            return self._current
        self.clock.now += timeout
        raise TimeoutError(f"version {version} not within {timeout}")


class CountingActor:
    def __init__(self) -> None:
        self.version = -1
        self.acted = 0

    def load(self, loaded: LoadedPolicy) -> None:
        self.version = loaded.version.version

    def act(self, obs: npt.NDArray[np.generic]) -> Action:
        self.acted += 1
        return Action(np.zeros(len(obs), np.int64))


def make_worker(
    source: ScriptedSource,
    backlog: ScriptedBacklog | MemoryBacklog | None,
    *,
    mode: Mode = Mode.ASYNC,
    log: MemoryLog | None = None,
    events: EventList | None = None,
) -> RolloutWorker:
    # 2 envs x 4 steps a share: 2 records of 4 steps; the bound, 16 steps, is 4 records
    settings = WorkerSettings(
        run_id="r", worker_id=0, mode=mode, chunk_steps=4, share_steps=4,
        max_unread_steps=16, limit_recheck_s=RECHECK_S,
    )  # fmt: skip
    worker = RolloutWorker(
        make_vector_env("CartPole-v1", 2),
        CountingActor(),
        MemoryExperienceWriter(log or MemoryLog()),
        source,
        settings,
        [1, 2],
        events if events is not None else EventList(),
        clock=source.clock,
        backlog=backlog,
    )
    worker.start()
    return worker


# --------------------------------------------------------------------------- the limit


@pytest.mark.parametrize(
    ("steps", "chunk", "records"), [(2048, 32, 64), (100, 32, 3), (32, 32, 1), (10, 32, 1)]
)
def test_the_bound_in_records_holds_whole_chunks(steps: int, chunk: int, records: int) -> None:
    assert unread_records(steps, chunk) == records


def test_limit_admits_within_the_bound_and_counts_own_writes_until_it_asks_again() -> None:
    clock, backlog = Clock(), ScriptedBacklog([3, 5, 1])
    limit = UnreadLimit(backlog, 4, recheck_s=RECHECK_S, clock=clock)
    assert limit.admits() and limit.last_unread == 3
    limit.wrote(1)
    assert limit.admits() and limit.estimate() == 4  # at the bound: still admitted
    limit.wrote(1)
    assert not limit.admits()  # 5 by its own count, without asking the broker again
    assert backlog.asked == 1
    clock.now += RECHECK_S
    assert not limit.admits() and limit.estimate() == 5  # asked: 5, its writes now included
    assert limit.admits(measure=True) and limit.estimate() == 1  # asked before recheck_s
    assert backlog.asked == 3


def test_an_unknown_backlog_admits() -> None:
    limit = UnreadLimit(ScriptedBacklog([None]), 1, clock=Clock())
    limit.wrote(1000)
    assert limit.admits() and limit.estimate() is None


def test_a_bound_below_one_record_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1 record"):
        UnreadLimit(ScriptedBacklog([0]), 0)


# --------------------------------------------------------------------------- the worker


def test_worker_waits_while_over_the_bound_and_takes_a_version_meanwhile() -> None:
    clock = Clock()
    source = ScriptedSource(clock, {2: "v1"})
    backlog = ScriptedBacklog([0, 9, 9, 9, 2])  # start; over 3 times; read down to 2
    worker = make_worker(source, backlog)
    worker.act_share()
    assert worker.pace() == 0.0 and worker.limit_waits == 0  # 0 unread + 2 written: fine
    clock.now += RECHECK_S
    acted = worker.actor.acted  # type: ignore[attr-defined]
    waited = worker.pace()
    assert backlog.asked == 5 and worker.limit_waits == 1
    assert worker.actor.version == 1  # taken while waiting, not after
    assert worker.actor.acted == acted  # type: ignore[attr-defined]  # no env step meanwhile
    assert waited == pytest.approx(0.1 + RECHECK_S + RECHECK_S)  # v1 came, then 2 timeouts
    assert worker.limit_wait_s == pytest.approx(waited)
    assert worker.pace() == 0.0  # 2 unread: acts on without asking


def test_a_waiting_worker_never_gives_up_while_the_trainer_is_away() -> None:
    """A trainer restart: nothing is read for 40 min; the worker waits it out, reporting."""
    clock, events = Clock(), EventList()
    checks = 10_000
    backlog = ScriptedBacklog([9] * checks + [0])
    worker = make_worker(ScriptedSource(clock), backlog, events=events)
    worker.act_share()
    clock.now += RECHECK_S
    waited = worker.pace()
    assert waited == pytest.approx(checks * RECHECK_S) and worker.limit_waits == 1
    assert worker.source.finished is None
    progress = events.of("progress")
    assert len(progress) >= checks * RECHECK_S - 1  # one per log_every_s while waiting
    assert progress[-1]["limit_waits"] == 1 and progress[-1]["unread"] == 9
    assert float(progress[-1]["limit_wait_s"]) > checks * RECHECK_S - 1  # type: ignore[arg-type]


def test_run_finished_ends_the_wait_and_the_run() -> None:
    clock = Clock()
    source = ScriptedSource(clock, {3: "finished"})
    worker = make_worker(source, ScriptedBacklog([9]))  # the trainer never reads again
    finished = worker.run()
    assert finished.reason == "stopped"
    assert source.waits == 3 and worker.limit_waits == 1


def test_without_a_backlog_or_in_sync_mode_the_worker_never_waits() -> None:
    clock = Clock()
    for worker in (
        make_worker(ScriptedSource(clock), None),
        make_worker(ScriptedSource(clock), ScriptedBacklog([99]), mode=Mode.SYNC),
    ):
        assert worker.limit is None
        worker.act_share()
        assert worker.pace() == 0.0 and worker.source.waits == 0  # type: ignore[attr-defined]


def test_the_memory_backlog_follows_the_trainers_commits() -> None:
    """The in-memory log as the limit sees it: chunks past the reader's last commit."""
    log, clock = MemoryLog(), Clock()
    backlog = MemoryBacklog(log)
    assert backlog.unread() is None  # nothing committed yet: unknown
    reader = MemoryExperienceReader(log)
    reader.commit()
    worker = make_worker(ScriptedSource(clock), backlog, log=log)
    assert worker.limit is not None and worker.limit.max_unread == 4
    while len(log.chunks) <= 4:
        worker.act_share()
    clock.now += RECHECK_S
    assert not worker.limit.admits()  # over 4 unread
    reader.read(len(log.chunks), 0.0)
    reader.commit()
    assert backlog.unread() == 0 and worker.limit.admits(measure=True)


class ArrivingSource(ScriptedSource):
    """SYNC: version N+1 comes ``arrivals[N]`` seconds after the worker starts waiting for it
    (0: it came while the worker acted); None: not before the wait times out, but by the
    next wait. Records every timeout the worker waited with."""

    def __init__(self, clock: Clock, arrivals: Sequence[float | None]) -> None:
        super().__init__(clock)
        self.arrivals, self.timeouts = list(arrivals), []  # type: list[float | None], list[float]

    def wait_for(self, version: int, timeout: float) -> LoadedPolicy:
        self.timeouts.append(timeout)
        if self._current.version.version < version:
            after = self.arrivals.pop(0)
            if after is None or after > timeout:
                self.clock.now += timeout
                self.arrivals.insert(0, 0.0)  # it comes while the worker acts another share
                raise TimeoutError(f"version {version} not within {timeout}")
            self.clock.now += after
            self._current = policy(version)
        return self._current


def test_a_sync_worker_does_not_learn_to_stop_waiting_from_its_extra_shares() -> None:
    """After an extra share the next version was already there (a 0 s wait): counted, that
    shrank the wait until the worker never waited and acted mostly stale shares."""
    clock = Clock()
    source = ArrivingSource(clock, [0.25, 0.25] + [None, 0.25] * 6)
    worker = make_worker(source, None, mode=Mode.SYNC)
    for _ in range(2 + 3 * 6):  # each timed-out wait: an extra share, then v+1 at once
        worker.act_share()
        worker.sync(60.0)
    assert worker.extra_shares == 6
    # the first wait is the full sync_wait_s (2 s); then 4x the trainer's usual 0.25 s
    assert source.timeouts[0] == 2.0
    assert set(source.timeouts[1:]) == {1.0}, source.timeouts
