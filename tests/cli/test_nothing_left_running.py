"""After ``make demo`` nothing of the project is left running: the command the README gives
(``scripts/with-stack.sh bash scripts/demo.sh``), run for real with a short step budget,
ends with no process of its own alive, not its zygote, not a supervisor, not a task.

Every process the command starts, however indirectly (the zygote its launch starts, the
supervisor forked from it, the trainer, workers and evaluator forked from that), inherits
a mark in its environment; ``/proc/<pid>/environ`` shows it, ``ps -eo pid,args`` shows
their command lines. Runs on the local stack (``coach-stream stack up``) only, so the
script finds it running and leaves it so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_helpers import Services

pytestmark = pytest.mark.integration

REPO = Path(__file__).parents[2]
SHORT_RUN = ("--set", "env_step_budget=2048")  # a few updates, then the trainer ends the run


def marked_processes(mark: str) -> dict[int, str]:
    """``{pid: command line}`` of each live process whose environment holds ``mark``."""
    needle = mark.encode()
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
            args = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError):
            continue
        if needle in environ and state != "Z":  # a zombie is its parent's to reap
            found[int(entry.name)] = args.strip()
    return found


def ps_lines_mentioning(*texts: str) -> list[str]:
    """The lines of ``ps -eo pid,stat,args`` that mention any of ``texts`` (zombies aside)."""
    table = subprocess.run(
        ["ps", "-eo", "pid,stat,args"], capture_output=True, text=True, check=True
    ).stdout
    return [
        line
        for line in table.splitlines()[1:]
        if any(t in line for t in texts) and not line.split()[1].startswith("Z")
        and "ps -eo" not in line
    ]  # fmt: skip


@pytest.fixture
def local_stack(services: Services) -> Services:
    """The services, provided they are the running local stack that with-stack.sh uses."""
    from coach_stream.stack import LocalStack, default_cache_dir

    stack = LocalStack(default_cache_dir())
    if not all(s.healthy for s in stack.status()) or stack.kafka_bootstrap() != services.kafka:
        pytest.skip("needs the local stack running (`coach-stream stack up`)")
    return services


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """The command's TMPDIR: short (a Unix socket's path may not exceed 107 bytes), and its
    own, so its zygote's command line (``--socket <TMPDIR>/…``) names it."""
    path = Path(tempfile.mkdtemp(prefix="demo-", dir="/tmp"))
    yield path
    shutil.rmtree(path)  # what the tasks keep there (torch's compile cache)


def test_make_demo_leaves_no_process_running(
    local_stack: Services, bucket: str, run_id: str, short_tmp: Path, tmp_path: Path
) -> None:
    from coach_stream.transport.admin import delete_run_topics
    from coach_stream.transport.settings import KafkaSettings, RunTopics

    mark = f"DEMO_TEST_MARK={uuid.uuid4().hex}"
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("COACH_STREAM_STATE", "COACH_STREAM_ZYGOTE"))
        and k not in ("KAFKA_BOOTSTRAP_SERVERS", "STORAGE_EMULATOR_HOST")
    }
    env.update(dict([mark.split("=", 1)]), TMPDIR=str(short_tmp))
    command = ["bash", "scripts/with-stack.sh", "bash", "scripts/demo.sh", "--run-id", run_id,
               "--state-dir", str(tmp_path / "state"), "--checkpoints", f"gs://{bucket}",
               *SHORT_RUN]  # fmt: skip
    log = (tmp_path / "demo.log").open("w+")
    demo = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    zygotes_seen: set[str] = set()
    try:
        # Watch while it runs: the launch's zygote must exist (else this test proves nothing
        # about stopping it); the script's exit is what ends the watch.
        deadline = time.monotonic() + 600
        while demo.poll() is None:
            assert time.monotonic() < deadline, "the demo did not end within 600 s"
            running = marked_processes(mark).values()
            zygotes_seen.update(a for a in running if "zygote_server --socket" in a)
            time.sleep(0.2)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
        log.seek(0)
        output = log.read()
        log.close()
        delete_run_topics(
            KafkaSettings(bootstrap_servers=local_stack.kafka), RunTopics.for_run(run_id)
        )
    assert demo.returncode in (0, 1), output  # solved or not within the short budget
    assert f"run {run_id}: " in output, output
    assert zygotes_seen, f"no zygote was started by the launch:\n{output}"
    assert all(f"--socket {short_tmp}/" in z for z in zygotes_seen), zygotes_seen
    # At once, no waiting: the script returns only after what it started has exited.
    assert marked_processes(mark) == {}
    assert ps_lines_mentioning(run_id, str(short_tmp)) == []
    assert list(short_tmp.glob("coach-stream-zygote.*")) == []  # its socket directory too
