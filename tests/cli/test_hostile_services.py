"""Hostile inputs against the real services (issue 27): each is refused in one line, with
the right exit code, and leaves nothing behind: no topic, no object, no run directory."""

from __future__ import annotations

import json
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
    """A run id whose experience topic holds a short random CartPole recording (4 envs x 64
    steps: a dozen episodes end inside it, so a Minari export writes some)."""
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
        random = cartpole_controller(epsilon=1.0)  # every action drawn at random
        record(writer, run_id, "CartPole-v1", random, 64, chunk_steps=8)
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


def test_a_minari_export_to_a_relative_out_lands_there(
    ws: Workspace, services: Services, recorded_run: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = ws.run(
        "replay", "export", recorded_run, "--format", "minari", "--out", "datasets",
        "--env", "CartPole-v1", "--kafka", services.kafka, "--no-progress",
    )  # fmt: skip
    assert result.code == 0, result.stderr
    assert "Traceback" not in result.stderr and "Warning" not in result.stderr
    assert json.loads(result.stdout)["episodes"] > 0
    import minari

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(ws.cwd / "datasets"))
    dataset = minari.load_dataset(f"coach-stream/{recorded_run}-v0")
    assert dataset.total_episodes == json.loads(result.stdout)["episodes"]


@pytest.mark.parametrize("out_exists", [False, True])
def test_a_minari_export_with_another_env_is_refused_and_leaves_nothing(
    ws: Workspace, services: Services, recorded_run: str, out_exists: bool
) -> None:
    out = ws.cwd / "datasets"
    if out_exists:
        out.mkdir()
    result = ws.run(
        "replay", "export", recorded_run, "--format", "minari", "--out", str(out),
        "--env", "Pendulum-v1", "--kafka", services.kafka, "--no-progress",
    )  # fmt: skip
    refused(result, says="does not fit --env Pendulum-v1: observations of shape (4,)")
    if out_exists:
        assert list(out.iterdir()) == []  # the namespace and dataset directories went too
    else:
        assert not out.exists()


def _gs_export(ws: Workspace, services: Services, source: str, *extra: str) -> Result:
    tmp = ws.cwd / "tmp"  # where the upload is staged
    tmp.mkdir(exist_ok=True)
    ws.env["TMPDIR"] = str(tmp)
    return ws.run(
        "replay", "export", source, "--format", "parquet", "--kafka", services.kafka,
        "--no-progress", *extra,
    )  # fmt: skip


def test_an_export_to_a_missing_bucket_is_refused(
    ws: Workspace, services: Services, recorded_run: str
) -> None:
    result = _gs_export(
        ws, services, recorded_run, "--out", "gs://cli-no-such-bucket/x",
        "--gcs-emulator", services.gcs,
    )  # fmt: skip
    refused(result, says="bucket gs://cli-no-such-bucket does not exist")
    assert list((ws.cwd / "tmp").iterdir()) == []


def test_an_export_to_a_dead_gcs_emulator_fails_fast(
    ws: Workspace, services: Services, recorded_run: str
) -> None:
    result = _gs_export(
        ws, services, recorded_run, "--out", "gs://coach-stream/x",
        "--gcs-emulator", "http://127.0.0.1:1",
    )  # fmt: skip
    refused(result, says="The GCS emulator at http://127.0.0.1:1 cannot be reached", code=3)
    assert list((ws.cwd / "tmp").iterdir()) == []


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
