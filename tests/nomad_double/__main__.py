"""Run the double by hand: ``cd tests && ../.venv/bin/python -m nomad_double``.

Prints the ``NOMAD_ADDR``/``NOMAD_TOKEN`` lines to export for ``coach-stream ... --orchestrator
nomad`` (or ``eval "$(...)"`` them), serves until Ctrl-C, then kills every task it started
and prints the violations it recorded (requests outside Nomad's API).
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import threading
import uuid
from collections.abc import Callable, Sequence

from .apicheck import ApiCheckUnavailableError
from .double import NomadDouble, shared_contract


def main(
    argv: Sequence[str] | None = None,
    stop: threading.Event | None = None,
    on_ready: Callable[[NomadDouble], None] | None = None,
) -> int:
    """Serve until ``stop`` is set (by default: until SIGINT/SIGTERM); ``on_ready`` gets the
    double once its address is printed."""
    parser = argparse.ArgumentParser(prog="python -m nomad_double", description=__doc__)
    parser.add_argument("--no-acl", action="store_true", help="run without an ACL token")
    parser.add_argument("--token", help="the ACL token (default: a random one)")
    parser.add_argument(
        "--gpus", type=int, default=0, help="nvidia/gpu devices on the node (default 0)"
    )
    args = parser.parse_args(argv)
    try:
        contract = shared_contract()
    except (ApiCheckUnavailableError, FileNotFoundError) as error:
        print(f"nomad_double: {error}", file=sys.stderr)
        return 2
    token = None if args.no_acl else (args.token or str(uuid.uuid4()))
    devices = {"nvidia/gpu/double": args.gpus} if args.gpus else None
    double = NomadDouble(contract=contract, token=token, node_devices=devices)
    print(f"export NOMAD_ADDR={shlex.quote(double.address)}")
    print(f"export NOMAD_TOKEN={shlex.quote(token or '')}", flush=True)
    if on_ready is not None:
        on_ready(double)
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    double.stop()
    for violation in double.violations:
        print(f"# violation: {violation}", file=sys.stderr)
    return 1 if double.violations else 0


if __name__ == "__main__":
    raise SystemExit(main())
