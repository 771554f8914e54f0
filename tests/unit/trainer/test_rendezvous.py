"""How trainer ranks find rank 0: addresses parsed once, announcements taken newest first.

The real broker and real ranks: tests/integration/test_rendezvous.py.
"""

from __future__ import annotations

import itertools

import pytest

from coach_stream.addresses import format_address, parse_address
from coach_stream.core import ControlMessage, PolicyVersion, TrainerRendezvous
from coach_stream.errors import ConfigError, RankLostError
from coach_stream.trainer.collective import TorchCollective
from coach_stream.trainer.rendezvous import AnnouncedRendezvous, FixedRendezvous


class Topic:
    """A control topic in a list: ``read_to_end`` and ``poll`` return what is new."""

    def __init__(self, *messages: ControlMessage) -> None:
        self.messages = list(messages)
        self.read = 0

    def _new(self) -> list[ControlMessage]:
        new, self.read = self.messages[self.read :], len(self.messages)
        return new

    def read_to_end(self, timeout: float) -> list[ControlMessage]:
        return self._new()

    def poll(self, timeout: float) -> list[ControlMessage]:
        return self._new()

    def close(self) -> None:
        pass


def ticking() -> object:
    """A clock that moves one second per reading: waits end without sleeping."""
    return itertools.count().__next__


@pytest.mark.parametrize(
    ("text", "address"),
    [("10.0.0.7:29500", ("10.0.0.7", 29500)), ("[fd00::1]:7", ("fd00::1", 7)), ("h:1", ("h", 1))],
)
def test_addresses_round_trip(text: str, address: tuple[str, int]) -> None:
    assert parse_address(text) == address
    assert format_address(address) == text


@pytest.mark.parametrize("text", [None, "", "host", ":80", "host:", "host:0", "h:65536", "h:x"])
def test_bad_addresses_are_one_line_naming_the_flag(text: str | None) -> None:
    with pytest.raises(ConfigError, match=r"^--rendezvous must be HOST:PORT .*, got"):
        parse_address(text)


def test_a_fixed_address_is_where_rank_0_listens_and_the_others_join() -> None:
    meeting = FixedRendezvous(("127.0.0.1", 4000))
    meeting.announce(("127.0.0.1", 4000))  # nothing to say, nothing sent
    assert meeting.listen_address() == meeting.find_rank0(0.0) == ("127.0.0.1", 4000)


def test_rank_0_announces_where_it_listens_for_its_run_and_world() -> None:
    sent: list[ControlMessage] = []
    AnnouncedRendezvous(("10.0.0.7", 4000), "run-1", 3, publish=sent.append).announce(
        ("10.0.0.7", 4000)
    )
    (message,) = sent
    assert isinstance(message, TrainerRendezvous)
    assert (message.run_id, message.address, message.world) == ("run-1", "10.0.0.7:4000", 3)


def test_the_others_join_the_newest_announcement_of_their_run_and_world() -> None:
    topic = Topic(
        TrainerRendezvous("run-1", "10.0.0.1:1", 2, 0),
        PolicyVersion("run-1", 0, "gs://b/p.pt", "ab" * 32, 1, 0, 0, 0),
        TrainerRendezvous("run-1", "10.0.0.2:2", 2, 0),
        TrainerRendezvous("run-1", "10.0.0.3:3", 4, 0),  # another launch's --trainers 4
        TrainerRendezvous("run-2", "10.0.0.4:4", 2, 0),  # another run's
    )
    meeting = AnnouncedRendezvous(("10.9.9.9", 9), "run-1", 2, subscriber=topic)
    assert meeting.listen_address() == ("10.9.9.9", 9)  # its own, were it rank 0
    assert meeting.find_rank0(0.0) == ("10.0.0.2", 2)
    topic.messages.append(TrainerRendezvous("run-1", "10.0.0.5:5", 2, 0))  # rank 0 moved
    assert meeting.find_rank0(0.0) == ("10.0.0.5", 5)


def test_with_no_announcement_the_others_wait_until_their_timeout_then_say_none() -> None:
    topic = Topic(TrainerRendezvous("run-2", "10.0.0.4:4", 2, 0))
    meeting = AnnouncedRendezvous(
        ("10.9.9.9", 9),
        "run-1",
        2,
        subscriber=topic,
        clock=ticking(),  # type: ignore[arg-type]
    )
    assert meeting.find_rank0(5.0) is None
    topic.messages.append(TrainerRendezvous("run-1", "10.0.0.6:6", 2, 0))
    assert meeting.find_rank0(5.0) == ("10.0.0.6", 6)


def test_a_rank_that_never_learns_where_rank_0_listens_loses_its_group_in_one_line() -> None:
    """Exit 3 (restarted), not a traceback: ``RankLostError`` names the cause and the fix."""
    meeting = AnnouncedRendezvous(("10.9.9.9", 9), "run-1", 2, subscriber=Topic())
    with pytest.raises(RankLostError, match=r"^trainer rank 1 of 2 lost its group while joining"):
        TorchCollective(1, 2, meeting, timeout_s=0.5)
