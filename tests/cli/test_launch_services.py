"""`launch` against the real services: unreachable ones, a missing bucket and run ids that
are already used in Kafka or in the store are refused before anything is created; a real
run's exit code is 1 when it times out and 130 when it is terminated, with nothing left."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cli_helpers import CLI, Services, Workspace, processes_mentioning, refused

pytestmark = pytest.mark.integration


@pytest.fixture
def kafka_run_id(services: Services, run_id: str) -> Iterator[str]:
    """A run id whose topics exist, as after a finished run; the topics are deleted after."""
    from coach_stream.transport.admin import delete_run_topics, ensure_run_topics
    from coach_stream.transport.settings import KafkaSettings, RunTopics

    settings = KafkaSettings(bootstrap_servers=services.kafka)
    ensure_run_topics(settings, RunTopics.for_run(run_id), 1)
    yield run_id
    delete_run_topics(settings, RunTopics.for_run(run_id))


def assert_nothing_left(
    ws: Workspace, run_id: str, run_topics: Callable[[str], list[str]], topics: int = 0
) -> None:
    assert ws.run_dirs() == []
    assert not (ws.state_dir / "checkpoints").exists()
    assert processes_mentioning(run_id) == []
    assert len(run_topics(run_id)) == topics


def test_unreachable_kafka_is_one_line(
    ws: Workspace, run_id: str, run_topics: Callable[[str], list[str]]
) -> None:
    result = ws.launch("cartpole-ppo", "--run-id", run_id, "--kafka", "127.0.0.1:1")
    refused(result, says="Kafka at 127.0.0.1:1 did not answer")
    assert_nothing_left(ws, run_id, run_topics)


def test_unreachable_gcs_is_one_line(
    ws: Workspace, services: Services, run_id: str, run_topics: Callable[[str], list[str]]
) -> None:
    result = ws.launch(
        "cartpole-ppo",
        "--run-id", run_id,
        "--kafka", services.kafka,
        "--checkpoints", "gs://coach-stream",
        "--gcs-emulator", "http://127.0.0.1:1",
    )  # fmt: skip
    refused(result, says="check that the store is reachable")
    assert_nothing_left(ws, run_id, run_topics)


def test_a_bucket_that_does_not_exist_is_refused(
    ws: Workspace, services: Services, run_id: str, run_topics: Callable[[str], list[str]]
) -> None:
    result = ws.launch(
        "cartpole-ppo",
        "--run-id", run_id,
        "--kafka", services.kafka,
        "--checkpoints", f"gs://no-such-bucket-{run_id}",
        "--gcs-emulator", services.gcs,
    )  # fmt: skip
    refused(result, says=f"bucket gs://no-such-bucket-{run_id} does not exist")
    assert_nothing_left(ws, run_id, run_topics)


def test_a_run_id_with_topics_in_kafka_is_refused(
    ws: Workspace, services: Services, kafka_run_id: str, run_topics: Callable[[str], list[str]]
) -> None:
    """The issue's case: a finished run's state dir is gone, its topics are not."""
    before = run_topics(kafka_run_id)
    result = ws.launch("cartpole-ppo", "--run-id", kafka_run_id, "--kafka", services.kafka)
    refused(result, says=f"Run id {kafka_run_id!r} is already used in Kafka")
    assert_nothing_left(ws, kafka_run_id, run_topics, topics=len(before))
    assert run_topics(kafka_run_id) == before  # the other run's topics are untouched


def test_a_run_id_with_objects_in_the_bucket_is_refused(
    ws: Workspace,
    services: Services,
    run_id: str,
    bucket: str,
    gcs_client: object,
    run_topics: Callable[[str], list[str]],
) -> None:
    from google.cloud import storage

    assert isinstance(gcs_client, storage.Client)
    gcs_client.bucket(bucket).blob(f"exp/runs/{run_id}/policies/00000003.pt").upload_from_string(
        b"x"
    )
    result = ws.launch(
        "cartpole-ppo",
        "--run-id", run_id,
        "--kafka", services.kafka,
        "--checkpoints", f"gs://{bucket}/exp",
        "--gcs-emulator", services.gcs,
    )  # fmt: skip
    refused(result, says=f"Run id {run_id!r} is already used in the checkpoint store")
    assert_nothing_left(ws, run_id, run_topics)
    assert [b.name for b in gcs_client.list_blobs(bucket)] == [
        f"exp/runs/{run_id}/policies/00000003.pt"
    ]


def test_a_run_id_with_files_in_the_checkpoint_dir_is_refused(
    ws: Workspace, services: Services, run_id: str, run_topics: Callable[[str], list[str]]
) -> None:
    checkpoints = ws.cwd / "ckpt"
    state = checkpoints / "runs" / run_id / "trainer" / "00000001.pt"
    state.parent.mkdir(parents=True)
    state.write_bytes(b"x")
    result = ws.launch(
        "cartpole-ppo", "--run-id", run_id, "--kafka", services.kafka,
        "--checkpoints", str(checkpoints),
    )  # fmt: skip
    refused(result, says=f"Run id {run_id!r} is already used in the checkpoint store")
    assert_nothing_left(ws, run_id, run_topics)
    assert [p.name for p in state.parent.iterdir()] == ["00000001.pt"]


def test_a_checkpoint_dir_that_cannot_be_created_is_refused(
    ws: Workspace, services: Services, run_id: str, run_topics: Callable[[str], list[str]]
) -> None:
    blocker = ws.cwd / "a-file"
    blocker.write_text("not a directory")
    result = ws.launch(
        "cartpole-ppo", "--run-id", run_id, "--kafka", services.kafka,
        "--checkpoints", str(blocker / "ckpt"),
    )  # fmt: skip
    refused(result, says="cannot be created")
    assert_nothing_left(ws, run_id, run_topics)


# CartPole-v1 returns at most 500 and a warm launch solves it within 3 s: runs that must be
# timed out or signalled while they train get a target out of reach, whatever the speed.
NEVER_SOLVED = ("--set", "target_return=501")


def _start_launch(
    ws: Workspace, services: Services, run_id: str, *extra: str
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            str(CLI), "launch", "cartpole-ppo", "--run-id", run_id, "--workers", "1",
            "--kafka", services.kafka, "--state-dir", str(ws.state_dir), *extra,
        ],
        cwd=ws.cwd,
        env=ws.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def _wait_for_state(ws: Workspace, run_id: str, state: str, timeout_s: float = 90.0) -> None:
    """Until run.json exists and says ``state`` (or later: "starting" is its first word)."""
    run_json = ws.state_dir / "runs" / run_id / "run.json"
    deadline = time.monotonic() + timeout_s
    while not (run_json.is_file() and state in ("starting", _state_of(run_json))):
        assert time.monotonic() < deadline, "the run never started"
        time.sleep(0.1)


def _state_of(run_json: Path) -> str | None:
    try:
        return str(json.loads(run_json.read_text())["state"])
    except (OSError, ValueError, KeyError):
        return None  # replaced between the check and the read: look again


def test_a_run_that_times_out_exits_1_and_leaves_no_process(
    ws: Workspace, services: Services, run_id: str
) -> None:
    launcher = _start_launch(ws, services, run_id, "--timeout", "3", *NEVER_SOLVED)
    out, err = launcher.communicate(timeout=180)
    assert launcher.returncode == 1, err
    assert f"run {run_id}: timed out after" in out
    assert "Traceback" not in err
    assert processes_mentioning(run_id) == []
    assert '"state": "stopped"' in (ws.state_dir / "runs" / run_id / "run.json").read_text()


@pytest.mark.parametrize("when", ["starting", "running"])
def test_sigterm_to_a_foreground_launch_exits_130_and_stops_the_run(
    ws: Workspace, services: Services, run_id: str, when: str
) -> None:
    launcher = _start_launch(ws, services, run_id, *NEVER_SOLVED)
    try:
        _wait_for_state(ws, run_id, when)
        launcher.send_signal(signal.SIGTERM)
        _out, err = launcher.communicate(timeout=120)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode == 130, err
    # "stopped run R" once it follows the run, "... before it started" when the signal
    # came while the supervisor was starting the tasks (then the run is undone entirely).
    assert f"stopped run {run_id}" in err
    assert "Traceback" not in err
    assert processes_mentioning(run_id) == []


def test_status_and_stop_of_an_ended_run_exit_0(
    ws: Workspace, services: Services, run_id: str
) -> None:
    """`status` and `stop` of a run that ended (here: timed out) succeed and say so."""
    launcher = _start_launch(ws, services, run_id, "--timeout", "1", *NEVER_SOLVED)
    launcher.communicate(timeout=180)
    assert launcher.returncode == 1
    state = ("--state-dir", str(ws.state_dir))
    shown = ws.run("status", run_id, "--json", *state)
    assert shown.code == 0
    assert json.loads(shown.stdout)["state"] == "stopped"
    stopped = ws.run("stop", run_id, *state)
    assert (stopped.code, stopped.stdout.split(":")[0]) == (0, f"run {run_id}")


@pytest.mark.slow
def test_a_solved_run_exits_0_and_its_run_id_cannot_be_reused(
    ws: Workspace, services: Services, run_id: str, run_topics: Callable[[str], list[str]]
) -> None:
    """The issue's case: after a finished run R, a new state dir and `launch --run-id R`
    reported "target_reached after 2.5 s", exit 0, having trained nothing."""
    from coach_stream.transport.admin import delete_run_topics
    from coach_stream.transport.settings import KafkaSettings, RunTopics

    checkpoints = ws.cwd / "ckpt"
    try:
        launcher = _start_launch(ws, services, run_id, "--checkpoints", str(checkpoints))
        out, err = launcher.communicate(timeout=600)
        assert launcher.returncode == 0, err
        assert f"run {run_id}: target_reached after" in out
        assert processes_mentioning(run_id) == []

        ws.state_dir = ws.cwd / "another-state-dir"
        again = ws.launch(
            "cartpole-ppo", "--run-id", run_id, "--kafka", services.kafka,
            "--checkpoints", str(checkpoints),
        )  # fmt: skip
        refused(again, says=f"Run id {run_id!r} is already used in Kafka")
        assert ws.run_dirs() == []
    finally:
        kafka = KafkaSettings(bootstrap_servers=services.kafka)
        delete_run_topics(kafka, RunTopics.for_run(run_id))
    assert run_topics(run_id) == []
