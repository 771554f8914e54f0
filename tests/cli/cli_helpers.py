"""Running the installed ``coach-stream`` console script as a user would, and checking
what a refused command must (and must not) leave behind; shared by the tests/cli suite."""

from __future__ import annotations

import os
import subprocess
import sys
import time
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


@dataclass
class Workspace:
    """A working directory and state dir of one test; the CLI runs inside it."""

    cwd: Path
    state_dir: Path
    env: dict[str, str]

    def run(self, *args: str, timeout: float = 120.0) -> Result:
        started = time.monotonic()
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
