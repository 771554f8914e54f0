"""Hostile inputs against the real services (issue 27): each is refused in one line, with
the right exit code, and leaves nothing behind: no topic, no object, no run directory."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from cli_helpers import Result, Services, Workspace, processes_mentioning, refused

pytestmark = pytest.mark.integration


@pytest.fixture
def existing_run(services: Services, run_id: str) -> Iterator[str]:
    """A run id whose topics exist (empty), as a run's; deleted after the test."""
    from coach_stream.transport.admin import delete_run_topics, ensure_run_topics
    from coach_stream.transport.settings import KafkaSettings, RunTopics

    settings = KafkaSettings(bootstrap_servers=services.kafka)
    ensure_run_topics(settings, RunTopics.for_run(run_id), 1)
    yield run_id
    delete_run_topics(settings, RunTopics.for_run(run_id))


def _train(ws: Workspace, services: Services, source: str, run_id: str, *extra: str) -> Result:
    return ws.run(
        "replay", "train", source, "--run-id", run_id, "--env", "CartPole-v1",
        "--kafka", services.kafka, "--checkpoints", str(ws.cwd / "ckpt"), "--no-progress",
        *extra,
    )  # fmt: skip


def test_replay_train_onto_an_existing_run_id_is_refused(
    ws: Workspace, services: Services, existing_run: str, run_topics: Callable[[str], list[str]]
) -> None:
    before = run_topics(existing_run)
    result = _train(ws, services, existing_run, existing_run)
    refused(result, says=f"Run id {existing_run!r} already exists in Kafka")
    assert run_topics(existing_run) == before  # the run's topics are untouched
    assert not (ws.cwd / "ckpt").exists()


def test_a_failed_replay_train_leaves_no_topics(
    ws: Workspace,
    services: Services,
    existing_run: str,
    run_id: str,
    run_topics: Callable[[str], list[str]],
) -> None:
    new_id = f"{run_id}-offline"
    result = _train(ws, services, existing_run, new_id)  # the source holds no records
    refused(result, says="is empty")
    assert run_topics(new_id) == []
    assert list(ws.cwd.glob("ckpt/**/*.pt")) == []


@pytest.fixture(scope="module")
def recorded_run(services: Services) -> Iterator[str]:
    """A run id whose experience topic holds a short scripted CartPole recording."""
    import uuid

    from coach_stream.replay.record import cartpole_controller, record
    from coach_stream.transport.admin import delete_run_topics, ensure_run_topics
    from coach_stream.transport.settings import KafkaSettings, RunTopics
    from coach_stream.transport.writer import KafkaExperienceWriter

    run_id = f"cli-rec-{uuid.uuid4().hex[:8]}"
    settings = KafkaSettings(bootstrap_servers=services.kafka, linger_ms=5)
    topics = RunTopics.for_run(run_id)
    ensure_run_topics(settings, topics, 1)
    with KafkaExperienceWriter(settings, topics.experience) as writer:
        record(writer, run_id, "CartPole-v1", cartpole_controller(0.2), 64, chunk_steps=8)
    yield run_id
    delete_run_topics(settings, topics)


# `replay export` in a process that gets SIGINT right after its exporter wrote the first
# batch: a Ctrl-C in the middle of the export, at a deterministic point.
INTERRUPTED_EXPORT = """
import os, signal, sys
from coach_stream.cli.main import main
from coach_stream.replay.export.{module} import {cls} as exporter
write = exporter.write
def interrupted(self, batch):
    write(self, batch)
    os.kill(os.getpid(), signal.SIGINT)
exporter.write = interrupted
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize(
    ("fmt", "module", "cls"),
    [("avro", "avro", "AvroExporter"), ("parquet", "parquet", "ParquetExporter")],
)
def test_an_interrupted_export_leaves_no_file(
    ws: Workspace, services: Services, recorded_run: str, fmt: str, module: str, cls: str
) -> None:
    import subprocess
    import sys

    code = INTERRUPTED_EXPORT.format(module=module, cls=cls)
    out = ws.cwd / f"x.{fmt}"
    args = ["replay", "export", recorded_run, "--format", fmt, "--out", str(out)]
    done = subprocess.run(
        [sys.executable, "-c", code, *args, "--kafka", services.kafka, "--batch", "32",
         "--no-progress"],
        cwd=ws.cwd, env=ws.env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr
    assert sorted(p.name for p in ws.cwd.iterdir() if p.name != "state") == []

    finished = ws.run(*args, "--kafka", services.kafka, "--no-progress")  # then it works
    assert finished.code == 0, finished.stderr
    assert out.is_file() and [p.name for p in ws.cwd.glob(".*partial")] == []


# `launch` in a process that gets SIGINT at the last moment of its start: every task was
# started and the trainer already stored policy version 0, but `launch` has not returned.
INTERRUPTED_LAUNCH = """
import os, signal, sys, time
from pathlib import Path
from coach_stream.cli.main import main
from coach_stream.orchestrators.local import LocalOrchestrator
submit = LocalOrchestrator.submit
def interrupted(self, spec):
    submit(self, spec)
    deadline = time.monotonic() + 120
    while not list(Path({ckpt!r}).glob("runs/*/policies/*")) and time.monotonic() < deadline:
        time.sleep(0.1)
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(5)  # the KeyboardInterrupt is raised here
LocalOrchestrator.submit = interrupted
sys.exit(main(sys.argv[1:]))
"""


def test_ctrl_c_while_a_launch_starts_leaves_its_run_id_reusable(
    ws: Workspace, services: Services, run_id: str, run_topics: Callable[[str], list[str]]
) -> None:
    import subprocess
    import sys

    ckpt = ws.cwd / "ckpt"
    done = subprocess.run(
        [sys.executable, "-c", INTERRUPTED_LAUNCH.format(ckpt=str(ckpt)), "launch",
         "cartpole-ppo", "--run-id", run_id, "--workers", "1", "--kafka", services.kafka,
         "--state-dir", str(ws.state_dir), "--checkpoints", str(ckpt)],
        cwd=ws.cwd, env=ws.env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 130, done.stderr
    assert f"stopped run {run_id} before it started" in done.stderr
    assert "Traceback" not in done.stderr
    assert run_topics(run_id) == []
    assert ws.run_dirs() == []
    assert list(ckpt.glob("runs/*/*/*")) == []  # policy version 0 was deleted with the rest
    assert processes_mentioning(run_id) == []
