"""A broker address that refuses the connection is answered at once, not after a wait."""

from __future__ import annotations

import socket

import pytest

from coach_stream.errors import ServiceUnavailableError
from coach_stream.transport.admin import refuse_at_once
from coach_stream.transport.settings import KafkaSettings


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # nothing listens once the socket is closed


def test_every_address_refusing_is_unreachable_now() -> None:
    servers = f"127.0.0.1:{_closed_port()},127.0.0.1:{_closed_port()}"
    with pytest.raises(ServiceUnavailableError, match="did not answer within 600s"):
        refuse_at_once(KafkaSettings(bootstrap_servers=servers), timeout=600.0)


def test_one_listening_address_is_left_to_the_client() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        servers = f"127.0.0.1:{_closed_port()},127.0.0.1:{port}"
        refuse_at_once(KafkaSettings(bootstrap_servers=servers), timeout=600.0)  # no error


def test_a_name_that_does_not_resolve_is_left_to_the_client() -> None:
    refuse_at_once(KafkaSettings(bootstrap_servers="no-such-host.invalid:9092"), timeout=1.0)
