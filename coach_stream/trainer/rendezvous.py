"""Where data-parallel trainer ranks meet: rank 0 listens, the others find it.

Two ways, one protocol (``core.Rendezvous``):

- ``FixedRendezvous``: an address every rank is told up front. The local orchestrator
  picks a free port on 127.0.0.1 when it plans the run; rank 0 listens there for the life
  of the run, so a restarted rank finds it again.
- ``AnnouncedRendezvous``: rank 0 listens on an address of its own node (on Nomad,
  ``${NOMAD_ADDR_rendezvous}``, a port Nomad picked free there) and announces it on the
  run's control topic (``TrainerRendezvous``); the other ranks, on whatever nodes Nomad
  placed them, join the newest announcement. No address is known when the job is
  submitted, and none goes stale: a rank 0 rescheduled to another node announces its new
  one, and a rank that cannot reach an old one looks again (``TorchCollective``).
  docs/decisions.md says why the control topic and not Nomad's service discovery.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from coach_stream.addresses import Address, format_address, parse_address
from coach_stream.core import ControlLogReader, ControlMessage, TrainerRendezvous

log = logging.getLogger(__name__)


_POLL_S = 0.5  # one wait for new control messages while no announcement is known


class FixedRendezvous:
    """Every rank is told rank 0's address: rank 0 listens there, the others join it."""

    def __init__(self, address: Address) -> None:
        self._address = address

    def listen_address(self) -> Address:
        return self._address

    def announce(self, address: Address) -> None:
        """Nothing to say: the other ranks were given the address."""

    def find_rank0(self, timeout_s: float) -> Address | None:
        return self._address


class AnnouncedRendezvous:
    """Rank 0 announces where it listens on the control topic; the others join the newest.

    ``own``: where this rank would listen were it rank 0 (its node's address and port).
    ``publish`` (rank 0) puts a ``TrainerRendezvous`` on the run's control topic;
    ``subscriber`` (the others) reads that topic from its start. Only announcements of this
    run for a group of ``world`` ranks count: one left by an earlier launch of the same run
    with another ``--trainers`` is not this group's.
    """

    def __init__(
        self,
        own: Address,
        run_id: str,
        world: int,
        publish: Callable[[ControlMessage], None] | None = None,
        subscriber: ControlLogReader | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._own, self._run_id, self._world = own, run_id, world
        self._publish, self._subscriber, self._clock = publish, subscriber, clock
        self._newest: TrainerRendezvous | None = None
        self._caught_up = False

    def listen_address(self) -> Address:
        return self._own

    def announce(self, address: Address) -> None:
        if self._publish is None:
            raise RuntimeError("AnnouncedRendezvous.announce needs a publisher (rank 0's)")
        message = TrainerRendezvous(
            self._run_id, format_address(address), self._world, int(time.time() * 1000)
        )
        self._publish(message)
        log.info("trainer rank 0 announced it listens at %s", message.address)

    def find_rank0(self, timeout_s: float) -> Address | None:
        """The newest announced address (waiting up to ``timeout_s`` while there is none)."""
        if self._subscriber is None:
            raise RuntimeError("AnnouncedRendezvous.find_rank0 needs a control subscriber")
        deadline = self._clock() + timeout_s
        if not self._caught_up:
            self._take(self._subscriber.read_to_end(max(timeout_s, 1.0)))
            self._caught_up = True
        else:
            self._take(self._subscriber.poll(0.0))
        while self._newest is None and (left := deadline - self._clock()) > 0:
            self._take(self._subscriber.poll(min(left, _POLL_S)))
        return None if self._newest is None else parse_address(self._newest.address)

    def _take(self, messages: list[ControlMessage]) -> None:
        for message in messages:
            if (
                isinstance(message, TrainerRendezvous)
                and message.run_id == self._run_id
                and message.world == self._world
            ):
                self._newest = message
