"""Running the installed ``coach-stream`` console script as a user would, and checking
what a refused command must (and must not) leave behind; shared by the tests/cli suite."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

CLI = Path(sys.executable).with_name("coach-stream")
MAX_EXIT_S = 30.0
"""A refusal must not hang: a loaded 2-core machine takes up to ~10 s to start the CLI and
import torch and gymnasium, and a refusal that asks a service first waits its client's own
timeout (up to 10 s for an unreachable broker); a hang is minutes. 15 s left a refusal
that waits 10 s on 127.0.0.1:1 a few seconds of margin."""


@dataclass(frozen=True)
class Result:
    code: int
    stdout: str
    stderr: str
    seconds: float


def refused(result: Result, *, says: str, code: int = 2) -> None:
    """A bad input's contract: the code, one line naming the cause, quickly, no traceback."""
    lines = result.stderr.strip().splitlines()
    assert result.code == code, f"exit {result.code}, stderr: {result.stderr!r}"
    assert "Traceback" not in result.stderr + result.stdout
    assert len(lines) == 1, f"expected one line on stderr, got {lines!r}"
    assert says in lines[0], lines[0]
    assert result.seconds < MAX_EXIT_S, f"took {result.seconds:.1f} s"


@contextlib.contextmanager
def _as_a_fresh_process(argv: list[str], env: dict[str, str], cwd: Path) -> Iterator[None]:
    """The console script's ``sys.argv`` (click names the program after it), environment and
    working directory; what the CLI may change in its process is put back afterwards: those,
    the logging set-up and the signal handlers."""
    saved_argv, saved_env, saved_cwd = sys.argv, dict(os.environ), Path.cwd()
    loggers = {name: logging.getLogger(name) for name in ("", *logging.root.manager.loggerDict)}
    saved_logs = {name: (lg.disabled, lg.level, list(lg.handlers)) for name, lg in loggers.items()}
    saved_signals = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    sys.argv = argv
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    try:
        yield
    finally:
        sys.argv = saved_argv
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
        for name, (disabled, level, handlers) in saved_logs.items():
            lg = loggers[name]
            lg.disabled, lg.level, lg.handlers = disabled, level, handlers
        for number, handler in saved_signals.items():
            signal.signal(number, handler)


@dataclass
class Workspace:
    """A working directory and state dir of one test; the CLI runs inside it.

    ``in_process``: ``coach_stream.cli.main.main`` (what the console script calls) runs in
    the test's own process, with this workspace's environment and working directory, instead
    of a new interpreter: the same exit code and output, without importing torch again (about
    4 s a case). For refusals of bad input, where nothing is meant to start.
    """

    cwd: Path
    state_dir: Path
    env: dict[str, str]
    in_process: bool = False

    def run(self, *args: str, timeout: float = 120.0) -> Result:
        started = time.monotonic()
        if self.in_process:
            from coach_stream.cli.main import main

            stdout, stderr = io.StringIO(), io.StringIO()
            with (
                _as_a_fresh_process([str(CLI), *args], self.env, self.cwd),
                contextlib.redirect_stdout(stdout),
                contextlib.redirect_stderr(stderr),
            ):
                code = main(list(args))
            return Result(code, stdout.getvalue(), stderr.getvalue(), time.monotonic() - started)
        done = subprocess.run(
            [str(CLI), *args],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        return Result(done.returncode, done.stdout, done.stderr, time.monotonic() - started)

    def launch(self, *args: str) -> Result:
        return self.run("launch", *args, "--state-dir", str(self.state_dir))

    def run_dirs(self) -> list[str]:
        runs = self.state_dir / "runs"
        return sorted(p.name for p in runs.iterdir()) if runs.is_dir() else []


def workspace(folder: Path, *, in_process: bool = False) -> Workspace:
    """A workspace in ``folder`` whose environment names no service and no shared state."""
    assert CLI.is_file(), f"{CLI} is not installed; run `make setup`"
    env = {k: v for k, v in os.environ.items() if not k.startswith("COACH_STREAM_STATE")}
    # A private stack cache: an unset --kafka never falls back to a shared stack by accident.
    env["COACH_STREAM_CACHE"] = str(folder / "no-stack-cache")
    env.pop("KAFKA_BOOTSTRAP_SERVERS", None)
    env.pop("STORAGE_EMULATOR_HOST", None)
    return Workspace(folder, folder / "state", env, in_process)


def processes_mentioning(text: str) -> list[str]:
    """``"<pid> <command line>"`` of each live process whose command line contains ``text``
    (a run id), other than this test's own; zombies are not counted (their parent reaps)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
        except (OSError, IndexError):
            continue
        if text in cmdline and state != "Z":
            found.append(f"{entry.name} {cmdline.strip()}")
    return found


@dataclass(frozen=True)
class Services:
    kafka: str
    gcs: str
