"""Fixtures of the fault drills: their own broker and emulator, and a supervising orchestrator.

The drills are integration tests: they need Java 17 and the cached Kafka jars and
fake-gcs-server binary (``coach-stream stack up`` provisions both). With
``COACH_STREAM_REQUIRE_SERVICES=1`` (CI) a service that cannot start fails the drill;
otherwise it is skipped with the reason.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol, TypeVar

import pytest
from services import DrillBroker, DrillGcs, mount_tmpfs, unmount

from coach_stream.errors import CoachStreamError
from coach_stream.orchestrators import LocalOrchestrator, SupervisorConfig, warm_supervisor

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# As `coach-stream launch` supervises: tasks forked warm, restarted after a short backoff.
SUPERVISION = warm_supervisor(
    SupervisorConfig(initial_backoff_s=0.5, stop_grace_s=10.0, linger_s=10.0)
)


def unavailable(what: str, why: object) -> None:
    message = f"{what} is not available: {why}"
    if os.environ.get("COACH_STREAM_REQUIRE_SERVICES") == "1":
        pytest.fail(message + " (COACH_STREAM_REQUIRE_SERVICES=1)", pytrace=False)
    pytest.skip(message)


START_ATTEMPTS = 3
"""Tries at starting a drill's broker or emulator, each on new ports: under two busy loops
one drill in 20 once lost its services' start (the cause was not captured; a port taken
between its choice and the bind is the likeliest)."""


class _Service(Protocol):
    def start(self) -> None: ...
    def kill(self) -> None: ...


ServiceT = TypeVar("ServiceT", bound=_Service)


def started(make: Callable[[int], ServiceT], what: str) -> Iterator[ServiceT]:
    """``make(attempt)``'s service, started (up to ``START_ATTEMPTS`` times), for the test."""
    error: CoachStreamError | None = None
    for attempt in range(START_ATTEMPTS):
        service = make(attempt)
        try:
            service.start()
        except CoachStreamError as failed:
            service.kill()
            error = failed
            continue
        yield service
        service.kill()
        return
    unavailable(what, error)


@pytest.fixture
def drill_broker(tmp_path: Path) -> Iterator[DrillBroker]:
    yield from started(lambda a: DrillBroker(tmp_path / f"kafka-{a}"), "a Kafka broker")


@pytest.fixture
def small_disk_broker(tmp_path: Path) -> Iterator[DrillBroker]:
    """A broker whose log directory is a 256 MB tmpfs (a disk the drill can fill)."""
    broker = DrillBroker(tmp_path / "kafka")
    if why := mount_tmpfs(broker.layout.data, "256m"):
        unavailable("a small disk for the broker (root may mount a tmpfs)", why)
    try:
        broker.start()
    except CoachStreamError as error:
        broker.kill()
        unmount(broker.layout.data)
        unavailable("a Kafka broker for the drill", error)
    yield broker
    broker.kill()
    unmount(broker.layout.data)


@pytest.fixture
def drill_gcs(tmp_path: Path) -> Iterator[DrillGcs]:
    yield from started(lambda a: DrillGcs(tmp_path / f"gcs-{a}"), "fake-gcs-server")


@pytest.fixture
def orchestrator(tmp_path: Path) -> Iterator[LocalOrchestrator]:
    """Every run it still has at the end is stopped, so no drill leaves a process behind."""
    orchestrator = LocalOrchestrator(tmp_path / "state", config=SUPERVISION)
    yield orchestrator
    for run_id in orchestrator.runs():
        orchestrator.stop(run_id)
