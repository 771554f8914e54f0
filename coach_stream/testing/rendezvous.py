"""Trainer ranks that meet through a run's control topic, each in a real process, for tests.

``announced_rank`` is one rank: it joins the group through an ``AnnouncedRendezvous`` on
the real broker, all-reduces ``rank + 1`` and reports, on ``events``, every address it
tried to reach rank 0 at (``("tried", rank, "HOST:PORT")``) and the sum it got
(``("sum", rank, total)``). A test orders the ranks by waiting on those events.
"""

from __future__ import annotations

from typing import Any

import torch

from coach_stream.addresses import Address, format_address
from coach_stream.trainer.collective import TorchCollective
from coach_stream.trainer.rendezvous import AnnouncedRendezvous
from coach_stream.transport.control import KafkaControlPublisher, KafkaControlSubscriber
from coach_stream.transport.settings import KafkaSettings, RunTopics


class _Reporting:
    """An ``AnnouncedRendezvous`` that reports each address it returns."""

    def __init__(self, inner: AnnouncedRendezvous, rank: int, events: Any) -> None:
        self._inner, self._rank, self._events = inner, rank, events

    def listen_address(self) -> Address:
        return self._inner.listen_address()

    def announce(self, address: Address) -> None:
        self._inner.announce(address)

    def find_rank0(self, timeout_s: float) -> Address | None:
        found = self._inner.find_rank0(timeout_s)
        if found is not None:
            self._events.put(("tried", self._rank, format_address(found)))
        return found


def announced_rank(
    rank: int, world: int, bootstrap: str, run_id: str, own_port: int, events: Any
) -> None:
    """One trainer rank of ``run_id`` meeting the others through its control topic."""
    torch.set_num_threads(1)
    settings = KafkaSettings(bootstrap_servers=bootstrap)
    topics = RunTopics.for_run(run_id)
    with (
        KafkaControlPublisher(settings, topics) as publisher,
        KafkaControlSubscriber(settings, topics) as subscriber,
    ):
        way = AnnouncedRendezvous(
            ("127.0.0.1", own_port), run_id, world, publish=publisher.publish, subscriber=subscriber
        )
        group = TorchCollective(rank, world, _Reporting(way, rank, events), timeout_s=60)
        try:
            total = group.sum(torch.tensor([float(rank + 1)]))
            events.put(("sum", rank, float(total.item())))
        finally:
            group.close()
