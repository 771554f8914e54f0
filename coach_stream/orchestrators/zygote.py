"""Warm starts: run ``python -m MODULE ...`` tasks as forks of an already-warm supervisor.

Every task of a run is ``<python> -m coach_stream.cli.main <command> ...``, and each one
would spend seconds importing torch, gymnasium and the Kafka and GCS clients before
doing anything; N+2 of them starting at once on a small machine queue for the same
cores. The supervisor imports those modules once (``SupervisorConfig.preload``) and
then forks each task, so tasks and their restarts begin at once with the imports shared
copy-on-write. The child does what the interpreter would have done for the command
line: its own session, stdin from /dev/null, stdout and stderr to the task's log (line
buffered), the task's environment, default signal handlers, then
``runpy.run_module(MODULE, run_name="__main__")`` with ``sys.argv`` set, and it exits
with the command's exit status. Forking is safe because the supervisor starts no threads
and creates no clients: importing these modules does neither.
"""

from __future__ import annotations

import contextlib
import os
import runpy
import signal
import sys
import traceback
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

from setproctitle import setproctitle


def forkable_module(argv: Sequence[str], preload: Sequence[str]) -> str | None:
    """The module of ``<this python> -m MODULE ...`` when MODULE was preloaded, else None."""
    same_python = bool(argv) and os.path.abspath(argv[0]) == os.path.abspath(sys.executable)
    if same_python and len(argv) >= 3 and argv[1] == "-m" and argv[2] in preload:
        return argv[2]
    return None


class ForkedProcess:
    """The ``subprocess.Popen`` subset the supervisor uses, for a forked child."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.returncode = -1  # reaped elsewhere: it is gone, with no status
                return self.returncode
            if pid == self.pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


def fork_module(
    module: str,
    args: Sequence[str],
    env: Mapping[str, str],
    log_path: Path,
    *,
    cwd: str | None = None,
    close_fds: Sequence[int] = (),
) -> ForkedProcess:
    """Start ``python -m module *args`` as a fork of this process; output appended to a log.

    ``cwd``: the child's working directory (default: this process's); ``close_fds``: this
    process's descriptors the child must not keep (a zygote's listening socket).
    """
    log_fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    in_session_r, in_session_w = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        for fd in (log_fd, in_session_r, in_session_w):
            os.close(fd)
        raise
    if pid == 0:  # the child: never returns into the supervisor
        os.close(in_session_r)
        _run_child(module, args, env, log_fd, cwd, (*close_fds, in_session_w))
    os.close(log_fd)
    os.close(in_session_w)
    # Returned only once the child leads its own session (its end of the pipe is closed
    # right after setsid, or at its exit): a caller that signals the process group at once,
    # as a stop does, must find it there and not in this process's group.
    os.read(in_session_r, 1)
    os.close(in_session_r)
    return ForkedProcess(pid)


def _run_child(
    module: str,
    args: Sequence[str],
    env: Mapping[str, str],
    log_fd: int,
    cwd: str | None,
    close_fds: Sequence[int],
) -> None:
    code = 1
    try:
        os.setsid()
        for fd in close_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        if cwd is not None:
            os.chdir(cwd)
        # ps, top and `pgrep -f <run id>` see the command this process stands for, as they
        # show a spawned one's (arguments joined by spaces), not its forker's command line.
        setproctitle(" ".join([sys.executable, "-m", module, *args]))
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(null)
        os.close(log_fd)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        os.environ.clear()
        os.environ.update(env)
        sys.argv = ["-m", *args]
        # The zygote preloaded this very module, so runpy warns that it is already imported:
        # expected here (that is the warm start), and noise in every task's log otherwise.
        warnings.filterwarnings("ignore", "'.*' found in sys.modules", RuntimeWarning, "runpy")
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as done:
            code = _exit_code(done.code)
    except BaseException:
        with contextlib.suppress(BaseException):
            traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    with contextlib.suppress(BaseException):
        print(code, file=sys.stderr)
    return 1
