"""The zygote server: a warm interpreter forking run supervisors (``zygote_client`` says why).

``python -m coach_stream.orchestrators.zygote_server --socket PATH --preload m1,m2``
imports the modules, then serves fork requests on the Unix socket until it has been idle
for ``--idle-s`` with no live child, or its socket was replaced or removed. Each request
is one JSON line (``module``, ``args``, ``env``, ``cwd``, ``log``), answered with one
(``pid`` and ``start_time``, or ``error``). Only the socket's user is served, and only
modules this server preloaded are run.

``python -m coach_stream.orchestrators.zygote_server --stop`` ends instead every zygote of
the socket directory (``COACH_STREAM_ZYGOTE_DIR``, else the per-user one) and waits until
each has exited: ``scripts/with-stack.sh`` ends the zygote of its command this way, and it
is how to end one by hand. The runs whose supervisors they forked go on.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import signal
import socket
import struct
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from coach_stream.orchestrators.zygote import fork_module
from coach_stream.orchestrators.zygote_client import (
    DEFAULT_IDLE_S,
    read_line,
    runtime_dir,
    stop_zygotes,
)
from coach_stream.processes import process_start_time

_ACCEPT_S = 0.5  # how often the server reaps children and checks its idle time and socket


class ZygoteServer:
    """Accepts fork requests on a Unix socket until idle; ``serve()`` blocks."""

    def __init__(self, path: Path, preload: Sequence[str], idle_s: float) -> None:
        self.path, self.preload, self.idle_s = path, tuple(preload), idle_s
        self._children: set[int] = set()
        self._last_used = time.monotonic()

    def serve(self) -> None:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        staging = self.path.with_name(f"{self.path.name}.{os.getpid()}")
        listener.bind(str(staging))
        listener.listen(16)
        listener.settimeout(_ACCEPT_S)
        os.replace(staging, self.path)  # ready at once and as a whole: clients may connect
        inode = self.path.stat().st_ino
        print(f"zygote {os.getpid()} serving {self.path}", flush=True)
        try:
            while self._wanted(inode):
                try:
                    conn, _ = listener.accept()
                except TimeoutError:
                    continue
                with conn:
                    self._handle(conn, listener)
        finally:
            listener.close()
            with contextlib.suppress(OSError):
                if self.path.stat().st_ino == inode:
                    self.path.unlink()
        print(f"zygote {os.getpid()} idle for {self.idle_s:g} s or replaced: exiting", flush=True)
        with contextlib.suppress(OSError):  # a clean exit leaves nothing to read
            self.path.with_suffix(".log").unlink()

    def _wanted(self, inode: int) -> bool:
        """Serve on while used recently or a child lives, and while the socket is ours."""
        self._reap()
        try:
            if self.path.stat().st_ino != inode:
                return False  # replaced (a newer zygote) or removed: nobody finds us any more
        except OSError:
            return False
        return bool(self._children) or time.monotonic() - self._last_used < self.idle_s

    def _reap(self) -> None:
        for pid in list(self._children):
            with contextlib.suppress(ChildProcessError):
                done, _ = os.waitpid(pid, os.WNOHANG)
                if done == 0:
                    continue
            self._children.discard(pid)

    def _handle(self, conn: socket.socket, listener: socket.socket) -> None:
        conn.settimeout(10.0)
        uid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[1]
        try:
            request = json.loads(read_line(conn))
        except (OSError, ValueError):
            return
        if not isinstance(request, dict):
            return
        self._last_used = time.monotonic()
        if uid != os.getuid():
            answer: dict[str, object] = {"error": "not this zygote's user"}
        elif request.get("ping"):
            answer = {"pid": os.getpid()}
        elif request.get("module") not in self.preload:
            answer = {"error": f"module {request.get('module')!r} is not preloaded here"}
        else:
            answer = self._fork(request, close=(conn.fileno(), listener.fileno()))
        with contextlib.suppress(OSError):
            conn.sendall(json.dumps(answer).encode() + b"\n")

    def _fork(self, request: dict[str, Any], close: Sequence[int]) -> dict[str, object]:
        try:
            child = fork_module(
                str(request["module"]), [str(a) for a in request["args"]],
                {str(k): str(v) for k, v in request["env"].items()}, Path(request["log"]),
                cwd=str(request["cwd"]), close_fds=close,
            )  # fmt: skip
        except (OSError, KeyError, TypeError, AttributeError) as error:
            return {"error": repr(error)}
        self._children.add(child.pid)
        return {"pid": child.pid, "start_time": process_start_time(child.pid)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="coach-stream-zygote")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--socket", type=Path, help="Serve on this socket.")
    action.add_argument(
        "--stop", action="store_true", help="End the zygotes of the socket directory."
    )
    parser.add_argument("--idle-s", type=float, default=DEFAULT_IDLE_S)
    parser.add_argument("--preload", default="")
    args = parser.parse_args(argv)
    if args.stop:
        try:
            directory = runtime_dir()
        except OSError as error:
            print(f"coach-stream-zygote: {error}; no zygote of this user can run there")
            return 1
        stopped = stop_zygotes(directory)
        print(f"zygotes stopped in {directory}: {' '.join(map(str, stopped)) or 'none ran'}")
        return 0
    signal.signal(signal.SIGTERM, _exit_on_signal)  # unbind and remove the socket on `kill`
    preload = []
    for module in (m for m in args.preload.split(",") if m):
        try:
            importlib.import_module(module)
        except Exception as error:  # e.g. numba on a platform without it: forks import it
            print(f"coach-stream-zygote: preload of {module} failed ({error!r})", flush=True)
        else:
            preload.append(module)
    ZygoteServer(args.socket, preload, args.idle_s).serve()
    return 0


def _exit_on_signal(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


if __name__ == "__main__":
    sys.exit(main())
