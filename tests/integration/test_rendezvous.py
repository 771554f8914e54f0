"""Trainer ranks find rank 0 through the run's control topic on the real broker.

What ``launch --trainers K`` on Nomad relies on: no address is known when the job is
submitted; rank 0 announces its own and the others join the newest announcement, looking
again when the one they found is gone (a rank 0 that moved to another node).
"""

from __future__ import annotations

import multiprocessing
import uuid
from typing import Any

import pytest

from coach_stream.core import TrainerRendezvous
from coach_stream.processes import free_port
from coach_stream.testing.rendezvous import announced_rank
from coach_stream.transport.admin import ensure_run_topics
from coach_stream.transport.control import KafkaControlPublisher, KafkaControlSubscriber
from coach_stream.transport.settings import KafkaSettings, RunTopics

pytestmark = pytest.mark.timeout(300)

WAIT_S = 120.0  # each event; the join itself gives up after 60 s


def _next(events: Any, kind: str) -> tuple[str, int, Any]:
    while True:
        event = events.get(timeout=WAIT_S)
        if event[0] == kind:
            return event  # type: ignore[no-any-return]


def test_a_rank_that_found_a_stale_address_joins_the_one_rank_0_announces_next(
    kafka_bootstrap: str,
) -> None:
    settings = KafkaSettings(bootstrap_servers=kafka_bootstrap)
    run_id = f"rdv-{uuid.uuid4().hex[:12]}"
    topics = RunTopics.for_run(run_id)
    ensure_run_topics(settings, topics, experience_partitions=2)
    stale = f"127.0.0.1:{free_port('127.0.0.1')}"  # a rank 0 that is gone: nothing listens
    with KafkaControlPublisher(settings, topics) as publisher:
        publisher.publish(TrainerRendezvous(run_id, "127.0.0.1:1", 3, 0))  # another world
        publisher.publish(TrainerRendezvous(run_id, stale, 2, 0))
        publisher.publish(TrainerRendezvous("other-run", "127.0.0.1:2", 2, 0))
    context = multiprocessing.get_context("spawn")
    events = context.Queue()
    rank0_port = free_port("127.0.0.1")

    def rank(number: int, port: int) -> Any:
        return context.Process(
            target=announced_rank, args=(number, 2, kafka_bootstrap, run_id, port, events)
        )

    joiner, leader = rank(1, free_port("127.0.0.1")), rank(0, rank0_port)
    joiner.start()
    try:
        # rank 1 goes first and finds only the stale announcement of this group...
        assert _next(events, "tried") == ("tried", 1, stale)
        leader.start()  # ...then rank 0 starts, listens and announces its own address
        tried = [stale]
        while (event := events.get(timeout=WAIT_S))[0] == "tried":
            tried.append(event[2])
        sums = {event[1]: event[2]}
        sums.update({e[1]: e[2] for e in [_next(events, "sum")]})
        assert sums == {0: 3.0, 1: 3.0}  # 1 + 2, on both ranks: they formed one group
        assert tried[-1] == f"127.0.0.1:{rank0_port}"
        assert set(tried) == {stale, f"127.0.0.1:{rank0_port}"}
    finally:
        for process in (joiner, leader):
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
    assert (joiner.exitcode, leader.exitcode) == (0, 0)
    with KafkaControlSubscriber(settings, topics) as control:
        announced = [m for m in control.read_to_end(30) if isinstance(m, TrainerRendezvous)]
    assert announced[-1] == TrainerRendezvous(
        run_id, f"127.0.0.1:{rank0_port}", 2, announced[-1].created_at_ms
    )
