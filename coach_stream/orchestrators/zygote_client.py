"""A zygote that outlives launches, so a launch's supervisor starts warm, not importing.

Forking tasks from their supervisor (``zygote``) shares one import of torch & co. among a
run's tasks, but the supervisor itself is a new interpreter that spends seconds importing
them (about 2.5-4 s here, a third of CartPole PPO's time to solve) before it can fork
anything. This module keeps an interpreter that has done so once, and forks each launch's
supervisor from it::

    client = ZygoteClient(preload=("coach_stream.cli.main", ...))
    pid = client.fork(SUPERVISOR, ["--state-dir", d, "--run-id", r], env, cwd, log_path)
    # None: no zygote could be started; start the supervisor as a fresh process instead

The first launch starts the server (``python -m coach_stream.orchestrators.zygote_server``,
detached; a module the package never imports, so it runs as a clean ``__main__``), which
imports the modules and listens on a Unix socket in a private (0700) per-user directory;
it exits after ``idle_s`` without requests and without a live child.
A forked supervisor is exactly what a spawned one would be: its own session, the
launcher's environment and working directory, its log, its command line (``ps`` shows it).

**Stale code is never served**: the socket's name is a fingerprint of the interpreter, the
import path and every ``coach_stream`` source file (path, size, mtime), so a launch after
an edit or an upgrade finds no zygote of its own and starts a fresh one; the old one
idles out. Only modules the server preloaded can be run, and only for its own user.

**Scoped zygotes**: ``COACH_STREAM_ZYGOTE_DIR`` puts the sockets in another private
directory, so a command that sets it (``scripts/with-stack.sh``, behind ``make demo`` and
``make test``; each test session) gets a zygote of its own, which ``stop_zygotes`` (``python
-m coach_stream.orchestrators.zygote_server --stop``) ends when the command does; a user's
interactive launches share the per-user directory and keep theirs until it idles out.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import socket
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from coach_stream.processes import ProcessRecord, popen_detached, terminate_groups

SUPERVISOR = "coach_stream.orchestrators.supervisor"
SERVER = "coach_stream.orchestrators.zygote_server"
DEFAULT_IDLE_S = 900.0
"""A zygote nobody used for 15 minutes exits (the next launch starts one again)."""
_IMPORT_ENV = ("PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH")
"""Environment that decides what an import finds: part of the fingerprint."""


ZYGOTE_DIR_ENV = "COACH_STREAM_ZYGOTE_DIR"
"""A directory of zygote sockets that only one command (and what it starts) uses."""


def runtime_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """``$COACH_STREAM_ZYGOTE_DIR``, else ``$XDG_RUNTIME_DIR/coach-stream``, else
    ``<tmp>/coach-stream-<uid>``; only ours (0700)."""
    scoped, base = environ.get(ZYGOTE_DIR_ENV), environ.get("XDG_RUNTIME_DIR")
    if scoped:
        path = Path(scoped)
    elif base:
        path = Path(base, "coach-stream")
    else:
        path = Path(tempfile.gettempdir(), f"coach-stream-{os.getuid()}")
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.stat()
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise PermissionError(f"{path} is not a private directory of this user")
    return path


def fingerprint(python: str, preload: Sequence[str], env: Mapping[str, str]) -> str:
    """What a warm fork's code depends on: a zygote serves only launches with the same."""
    import coach_stream

    digest = hashlib.sha256()
    for part in (python, sys.version, *preload, *(f"{k}={env.get(k)}" for k in _IMPORT_ENV)):
        digest.update(part.encode() + b"\0")
    # Installed packages: a directory's mtime changes when an entry is added or removed.
    for entry in sys.path:
        if entry.endswith(("site-packages", "dist-packages")) and os.path.isdir(entry):
            digest.update(f"{entry}:{os.stat(entry).st_mtime_ns}".encode())
    package = Path(coach_stream.__file__).parent
    for path in sorted(package.rglob("*.py")):
        info = path.stat()
        digest.update(f"{path}:{info.st_size}:{info.st_mtime_ns}".encode())
    return digest.hexdigest()[:20]


# ---------------------------------------------------------------------------- client


class ZygoteClient:
    """Forks ``python -m MODULE`` from a warm zygote, starting one when there is none."""

    def __init__(
        self,
        preload: Sequence[str],
        *,
        python: str = sys.executable,
        idle_s: float = DEFAULT_IDLE_S,
        start_timeout_s: float = 120.0,
        directory: Path | None = None,
    ) -> None:
        self.preload = tuple(dict.fromkeys((*preload, SUPERVISOR)))
        self.python, self.idle_s, self.start_timeout_s = python, idle_s, start_timeout_s
        self._directory = directory

    def socket_path(self, env: Mapping[str, str]) -> Path:
        directory = self._directory or runtime_dir(env)
        return directory / f"zygote-{fingerprint(self.python, self.preload, env)}.sock"

    def fork(
        self,
        module: str,
        args: Sequence[str],
        env: Mapping[str, str],
        cwd: Path,
        log_path: Path,
    ) -> ProcessRecord | None:
        """``python -m module *args`` forked warm, or None when no zygote can be had (the
        caller starts the process the usual way; the zygote's log beside its socket says why)."""
        if module not in self.preload:
            return None
        try:
            path = self.socket_path(env)
        except OSError:  # no private socket directory (not ours, not 0700, not creatable)
            return None  # a cold start is slower, never unsafe
        request = {"module": module, "args": list(args), "env": dict(env), "cwd": str(cwd),
                   "log": str(log_path)}  # fmt: skip
        answer = ask(path, request)
        if answer is None and self.ensure(env):
            answer = ask(path, request)
        pid, start_time = (answer.get("pid"), answer.get("start_time")) if answer else (None, None)
        if not isinstance(pid, int):
            return None
        return ProcessRecord(pid, start_time if isinstance(start_time, int) else 0)

    @staticmethod
    def ping(path: Path) -> int | None:
        """The pid of the zygote listening on ``path``, or None."""
        answer = ask(path, {"ping": True})
        pid = answer.get("pid") if answer else None
        return pid if isinstance(pid, int) else None

    def ensure(self, env: Mapping[str, str]) -> bool:
        """Start the zygote for ``env`` unless one runs; True once it answers (a bench warms
        it before its clock starts, as a user's earlier launch would have)."""
        path = self.socket_path(env)
        if self.ping(path) is not None:
            return True
        with (path.parent / "zygote.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one launch starts it; the others wait for it
            if self.ping(path) is not None:
                return True
            with contextlib.suppress(FileNotFoundError):
                path.unlink()  # a dead zygote's socket
            argv = [self.python, "-m", SERVER, "--socket", str(path),
                    "--idle-s", str(self.idle_s), "--preload", ",".join(self.preload)]  # fmt: skip
            with path.with_suffix(".log").open("ab") as log:
                server = popen_detached(argv, log, {**env, "PYTHONUNBUFFERED": "1"})
            deadline, ready = time.monotonic() + self.start_timeout_s, False
            try:
                while not ready and time.monotonic() < deadline and server.poll() is None:
                    ready = self.ping(path) is not None
                    if not ready:
                        time.sleep(0.05)  # it imports for seconds; nothing to wait on sooner
            finally:
                # Not ready in time, or this launch was interrupted (Ctrl-C) while waiting:
                # a zygote still importing would come up later with nobody to stop it.
                if not ready and server.poll() is None:
                    server.kill()
                    server.wait()
            if ready:
                server.returncode = 0  # it runs on, detached; nobody here waits for it
            return ready


def running_zygotes(directory: Path) -> dict[Path, int]:
    """The zygotes answering in ``directory``: each one's socket and pid."""
    found = {}
    for path in sorted(directory.glob("zygote-*.sock")):
        pid = ZygoteClient.ping(path)
        if pid is not None:
            found[path] = pid
    return found


def stop_zygotes(directory: Path, grace_s: float = 10.0) -> list[int]:
    """End every zygote answering in ``directory`` and wait until each has exited; their pids.

    A zygote is a process group of its own (started detached): SIGTERM makes it remove its
    socket and exit, SIGKILL follows after ``grace_s``. The supervisors it forked run on
    (each in its own session): stopping a zygote never stops a run.
    """
    pids = list(running_zygotes(directory).values())
    terminate_groups([ProcessRecord.of(pid) for pid in pids], grace_s)
    return pids


def ask(
    path: Path, request: Mapping[str, object], timeout_s: float = 10.0
) -> dict[str, Any] | None:
    """One request, one JSON answer; None when nobody listens on ``path``."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout_s)
            conn.connect(str(path))
            conn.sendall(json.dumps(request).encode() + b"\n")
            answer = read_line(conn)
    except OSError:
        return None
    try:
        parsed = json.loads(answer)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def read_line(conn: socket.socket, limit: int = 1 << 24) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        more = conn.recv(65536)
        if not more or len(data) > limit:
            break
        data += more
    return data
