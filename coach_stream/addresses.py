"""``HOST:PORT``: where a process listens, as written on a command line or on the wire.

One parser for every place an address comes from: a flag (``train --rendezvous``) and a
``TrainerRendezvous`` message read off the control topic (the codec refuses a forged one
with the same check), so the two can never disagree on what an address is.
"""

from __future__ import annotations

import re

from coach_stream.errors import ConfigError

Address = tuple[str, int]

# A DNS name, an IPv4 address or an IPv6 address (its brackets already stripped).
_HOST = re.compile(r"[A-Za-z0-9._:-]{1,253}")


def parse_address(text: str | None, flag: str = "--rendezvous") -> Address:
    """``HOST:PORT`` as a pair, or a one-line ``ConfigError`` naming ``flag``."""
    host, _, port = (text or "").rpartition(":")
    host = host.strip("[]")  # an IPv6 address is written [::1]:29500
    if (
        not _HOST.fullmatch(host)
        or not port.isdigit()
        or len(port) > 5
        or not 0 < int(port) < 65536
    ):
        raise ConfigError(f"{flag} must be HOST:PORT (where rank 0 listens), got {text!r}.")
    return host, int(port)


def format_address(address: Address) -> str:
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
