"""scripts/with-stack.sh stops the stack exactly when it started it, keeps the command's
exit code, and gives the command a zygote directory of its own that it empties (stopping
the zygote there) and removes afterwards: run against a stand-in ``coach-stream`` (and
``python``) that records its calls, so the shared stack is never touched."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[2] / "scripts" / "with-stack.sh"


def fake_repo(tmp_path: Path, status_code: int) -> Path:
    """A copy of the script beside a stand-in CLI whose `stack status` exits ``status_code``."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    (repo / ".venv" / "bin").mkdir(parents=True)
    shutil.copy(SCRIPT, repo / "scripts" / "with-stack.sh")
    cli = repo / ".venv" / "bin" / "coach-stream"
    cli.write_text(
        "#!/usr/bin/env bash\n"
        f'echo "$*" >> "{repo}/calls"\n'
        'case "$*" in\n'
        f'  "stack status") exit {status_code} ;;\n'
        '  "stack env") echo "export KAFKA_BOOTSTRAP_SERVERS=k:1" ;;\n'
        "esac\n"
    )
    cli.chmod(0o755)
    python = repo / ".venv" / "bin" / "python"
    python.write_text(
        f'#!/usr/bin/env bash\necho "python $* in $COACH_STREAM_ZYGOTE_DIR" >> "{repo}/calls"\n'
    )
    python.chmod(0o755)
    return repo


def calls(repo: Path) -> list[str]:
    return (repo / "calls").read_text().splitlines()


def run(repo: Path, *command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(repo / "scripts" / "with-stack.sh"), *command],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_a_stack_it_started_is_stopped_and_the_exit_code_kept(tmp_path: Path) -> None:
    repo = fake_repo(tmp_path, status_code=1)  # stopped: the script must start it
    done = run(repo, "bash", "-c", 'test "$KAFKA_BOOTSTRAP_SERVERS" = k:1 && exit 7')
    assert done.returncode == 7
    assert calls(repo) == ["stack status", "stack up", "stack env", "stack down"]


def test_a_stack_that_was_running_is_left_running(tmp_path: Path) -> None:
    repo = fake_repo(tmp_path, status_code=0)
    assert run(repo, "true").returncode == 0
    assert calls(repo) == ["stack status", "stack up", "stack env"]


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_command_still_stops_the_stack_once(
    tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    repo = fake_repo(tmp_path, status_code=1)
    ready = tmp_path / "ready"
    # The command is one Python process that says it is ready from inside its final sleep's
    # neighbourhood, so the signal finds it with Python's own handling (SIGINT: it dies of
    # SIGINT; SIGTERM: of SIGTERM) wherever it lands. A shell command had a window each way:
    # an untrapped `bash -c` swallowed a SIGINT that came as it set up `exec sleep`, and a
    # trapped one with `sleep 30 & wait` sat out the sleep when the signal came just before
    # `wait` began (both seen under load: the script then ran past the 20 s below).
    command = "import pathlib, sys, time; pathlib.Path(sys.argv[1]).touch(); time.sleep(30)"
    script = subprocess.Popen(
        ["bash", str(repo / "scripts" / "with-stack.sh"), sys.executable, "-c", command, ready],
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 20
        while not ready.exists():
            assert time.monotonic() < deadline, "the command never started"
            time.sleep(0.02)
        # As a terminal's Ctrl-C (or a CI runner's SIGTERM) does: the whole process group.
        os.killpg(script.pid, sig)
        assert script.wait(timeout=20) == code
    finally:
        if script.poll() is None:
            script.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(script.pid, signal.SIGKILL)  # the background sleep, orphaned
    assert calls(repo).count("stack down") == 1


def test_the_command_gets_its_own_zygote_directory_emptied_and_removed(tmp_path: Path) -> None:
    repo = fake_repo(tmp_path, status_code=1)
    seen = tmp_path / "seen"
    # What a launch leaves there: its zygote's socket (the stand-in python "stops" it).
    command = f'd="$COACH_STREAM_ZYGOTE_DIR"; stat -c %a "$d" > "{seen}"; echo "$d" >> "{seen}"; '
    command += ': > "$d/zygote-0123.sock"'
    assert run(repo, "bash", "-c", command).returncode == 0
    mode, directory = seen.read_text().split()
    assert mode == "700"
    assert not Path(directory).exists()
    assert calls(repo) == [
        "stack status",
        "stack up",
        "stack env",
        f"python -m coach_stream.orchestrators.zygote_server --stop in {directory}",
        "stack down",
    ]


def test_no_zygote_directory_is_left_when_no_launch_used_it(tmp_path: Path) -> None:
    repo = fake_repo(tmp_path, status_code=0)
    seen = tmp_path / "seen"
    assert run(repo, "bash", "-c", f'echo "$COACH_STREAM_ZYGOTE_DIR" > "{seen}"').returncode == 0
    assert not Path(seen.read_text().strip()).exists()
    assert calls(repo) == ["stack status", "stack up", "stack env"]  # nothing to stop
