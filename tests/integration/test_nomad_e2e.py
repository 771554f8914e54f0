"""End to end on Nomad: ``coach-stream launch --orchestrator nomad`` trains CartPole PPO to
solved on the real broker and fake-gcs-server, its tasks run by the Nomad API double (real
processes, Nomad's restart semantics), followed through the run's telemetry topic.

Everything goes through the CLI in a subprocess, as a user would run it, with the
``nomad`` CLI's variables (``NOMAD_ADDR``, ``NOMAD_TOKEN``). Tests marked ``nomad_real``
run the launch against a real cluster at ``NOMAD_ADDR`` (skipped when it is not set).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition
from nomad_double import NomadDouble

from coach_stream.core import ControlMessage, TrainerRendezvous
from coach_stream.orchestrators.nomad_job import job_id
from coach_stream.transport import clients
from coach_stream.transport.control import KafkaControlSubscriber
from coach_stream.transport.settings import KafkaSettings, RunTopics
from coach_stream.transport.telemetry import TelemetryReader

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

RUN_TIMEOUT_S = 900.0  # CI machines are small and shared


def cli(
    env: dict[str, str], *args: str, timeout: float = 120.0
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coach_stream.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def cli_env(address: str, token: str | None, kafka: str, gcs: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOMAD_")}
    env.update(NOMAD_ADDR=address, KAFKA_BOOTSTRAP_SERVERS=kafka, STORAGE_EMULATOR_HOST=gcs)
    if token:
        env["NOMAD_TOKEN"] = token
    return env


def telemetry_until(
    kafka: str, run_id: str, done: Callable[[str, dict[str, Any]], bool], timeout: float
) -> dict[str, Any]:
    """Read the run's telemetry until ``done(task, event)``; that event (fails on timeout)."""
    deadline = time.monotonic() + timeout
    settings = KafkaSettings(bootstrap_servers=kafka)
    with TelemetryReader(settings, RunTopics.for_run(run_id)) as reader:
        while time.monotonic() < deadline:
            for task, event in reader.poll(1.0):
                if done(task, event):
                    return event
    pytest.fail(f"no such telemetry event of run {run_id} within {timeout:.0f} s")


def finished_reason(kafka: str, run_id: str) -> str:
    """Why the run's trainer finished, from its ``finished`` telemetry event."""
    finished = telemetry_until(
        kafka, run_id, lambda t, e: t == "trainer" and e["event"] == "finished", RUN_TIMEOUT_S
    )
    return str(finished["reason"])


def worker_experience(kafka: str, run_id: str, worker: int, timeout: float) -> bytes:
    """The key of the first experience chunk written by ``worker`` (fails on timeout)."""
    settings = KafkaSettings(bootstrap_servers=kafka)
    topic = RunTopics.for_run(run_id).experience
    consumer = clients.consumer(settings, f"test-{uuid.uuid4().hex}")
    try:
        metadata = consumer.list_topics(topic, timeout=10)
        partitions = list(metadata.topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        deadline = time.monotonic() + timeout
        prefix = f"{worker}/".encode()
        while time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                key = message.key() or b""
                if key.startswith(prefix):
                    return key
    finally:
        consumer.close()
    pytest.fail(f"no experience from worker {worker} of run {run_id} within {timeout:.0f} s")


def test_launch_on_nomad_trains_cartpole_to_solved(
    nomad_double: NomadDouble, kafka_bootstrap: str, gcs_endpoint: str, gcs_bucket: str,
    tmp_path: Path,
) -> None:  # fmt: skip
    env = cli_env(nomad_double.address, nomad_double.token, kafka_bootstrap, gcs_endpoint)
    run_id = f"nomad-e2e-{uuid.uuid4().hex[:8]}"
    done = cli(
        env, "launch", "cartpole-ppo", "--orchestrator", "nomad", "--workers", "2",
        "--run-id", run_id, "--checkpoints", f"gs://{gcs_bucket}",
        "--state-dir", str(tmp_path), "--timeout", str(RUN_TIMEOUT_S),
        timeout=RUN_TIMEOUT_S + 120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"run {run_id}: target_reached after" in done.stdout
    assert "4 allocations running after" in done.stderr
    assert "Traceback" not in done.stderr
    # The launcher stopped the finished job: no process is left, the job is dead.
    nomad_double.wait_until(lambda: not nomad_double.pids(), timeout=60, what="no task left")
    assert nomad_double.jobs[job_id(run_id)].job.get("Stop") is True
    nomad_double.assert_no_violations()


def test_two_trainer_ranks_meet_through_the_control_topic_and_regroup_after_kill_9(
    nomad_double: NomadDouble, kafka_bootstrap: str, gcs_endpoint: str, gcs_bucket: str,
    tmp_path: Path,
) -> None:  # fmt: skip
    """``--trainers 2`` on Nomad: a trainer group of count 2, each allocation with its own
    dynamic ``rendezvous`` port; rank 0 announces its own on the control topic and rank 1
    joins it. ``kill -9`` of rank 0: Nomad restarts it, it announces again, rank 1 (whose
    group broke) restarts and joins it, and the run solves."""
    env = cli_env(nomad_double.address, nomad_double.token, kafka_bootstrap, gcs_endpoint)
    run_id = f"nomad-dp-{uuid.uuid4().hex[:8]}"
    the_job = job_id(run_id)
    started = cli(
        env, "launch", "cartpole-ppo", "--orchestrator", "nomad", "--workers", "2", "--detach",
        "--trainers", "2", "--run-id", run_id, "--checkpoints", f"gs://{gcs_bucket}",
        "--state-dir", str(tmp_path),
    )  # fmt: skip
    assert started.returncode == 0, started.stderr[-3000:]
    groups = nomad_double.jobs[the_job].job["TaskGroups"]
    trainer = next(g for g in groups if g["Name"] == "trainer")
    assert trainer["Count"] == 2 and trainer["Networks"][0]["DynamicPorts"] == [
        {"Label": "rendezvous"}
    ]
    evaluator = nomad_double.allocation(the_job, "evaluator", 0).tasks["evaluator"].process
    assert evaluator is not None
    os.killpg(evaluator.pid, signal.SIGSTOP)  # the run keeps training until it is let go
    try:
        status = cli(env, "status", run_id, "--json", "--state-dir", str(tmp_path))
        assert status.returncode == 0, status.stderr
        assert [t["name"] for t in json.loads(status.stdout)["tasks"]] == [
            "evaluator", "rollout-0", "rollout-1", "trainer", "trainer-1"
        ]  # fmt: skip
        rank_0 = nomad_double.allocation(the_job, "trainer", 0)
        rank_1 = nomad_double.allocation(the_job, "trainer", 1)
        assert rank_0.ports["rendezvous"] != rank_1.ports["rendezvous"]
        telemetry_until(kafka_bootstrap, run_id, lambda t, e: t == "trainer-1" and
                        e["event"] == "progress", RUN_TIMEOUT_S)  # fmt: skip
        nomad_double.kill_task(rank_0.id, "trainer")
        nomad_double.wait_until(
            lambda: all(
                alloc.tasks["trainer"].state["Restarts"] >= 1
                and alloc.tasks["trainer"].state["State"] == "running"
                for alloc in (rank_0, rank_1)
            ),
            timeout=180,
            what="both trainer ranks restarted",
        )
        starts = {"trainer": 0, "trainer-1": 0}

        def learning_again(task: str, event: dict[str, Any]) -> bool:
            if event["event"] == "started" and task in starts:
                starts[task] += 1
            return starts["trainer-1"] >= 2 and task == "trainer-1" and event["event"] == "progress"

        telemetry_until(kafka_bootstrap, run_id, learning_again, RUN_TIMEOUT_S)
        os.killpg(evaluator.pid, signal.SIGCONT)
        assert finished_reason(kafka_bootstrap, run_id) == "target_reached"
        joined = telemetry_until(
            kafka_bootstrap, run_id, lambda t, e: t == "trainer-1" and e["event"] == "finished", 60
        )
        assert joined["reason"] == "target_reached"
        assert joined["duplicate_chunks"] == joined["chunk_gaps"] == 0, joined
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(evaluator.pid, signal.SIGCONT)
        stopped = cli(env, "stop", run_id, "--purge", "--state-dir", str(tmp_path))
    assert stopped.returncode == 0, stopped.stderr
    # rank 0 announced where it listens each time it started, and that was its own port
    announced = [m.address for m in control_messages(kafka_bootstrap, run_id)
                 if isinstance(m, TrainerRendezvous)]  # fmt: skip
    assert announced == [f"127.0.0.1:{rank_0.ports['rendezvous']}"] * len(announced)
    assert len(announced) >= 2, announced
    nomad_double.wait_until(lambda: not nomad_double.pids(), timeout=60, what="no task left")
    nomad_double.assert_no_violations()


def control_messages(kafka: str, run_id: str) -> list[ControlMessage]:
    settings = KafkaSettings(bootstrap_servers=kafka)
    with KafkaControlSubscriber(settings, RunTopics.for_run(run_id)) as control:
        return control.read_to_end(30)


def test_status_logs_kill9_scale_and_stop_purge_while_it_trains(
    nomad_double: NomadDouble, kafka_bootstrap: str, gcs_endpoint: str, gcs_bucket: str,
    tmp_path: Path,
) -> None:  # fmt: skip
    env = cli_env(nomad_double.address, nomad_double.token, kafka_bootstrap, gcs_endpoint)
    run_id = f"nomad-ops-{uuid.uuid4().hex[:8]}"
    the_job = job_id(run_id)
    started = cli(
        env, "launch", "cartpole-ppo", "--orchestrator", "nomad", "--workers", "2", "--detach",
        "--run-id", run_id, "--checkpoints", f"gs://{gcs_bucket}", "--state-dir", str(tmp_path),
    )  # fmt: skip
    assert started.returncode == 0, started.stderr[-3000:]
    assert started.stdout.strip() == run_id
    # Only the evaluator's reports end a run, and a warm CartPole PPO run solves in seconds:
    # held from the start, it keeps the run training through every step below.
    evaluator = nomad_double.allocation(the_job, "evaluator", 0).tasks["evaluator"].process
    assert evaluator is not None
    os.killpg(evaluator.pid, signal.SIGSTOP)
    trainer: subprocess.Popen[bytes] | None = None
    try:
        # status answers while it runs (no --orchestrator: NOMAD_ADDR and no local run).
        status = cli(env, "status", run_id, "--json", "--state-dir", str(tmp_path))
        assert status.returncode == 0, status.stderr
        answer = json.loads(status.stdout)
        assert answer["orchestrator"] == "nomad" and answer["state"] == "running"
        assert [t["name"] for t in answer["tasks"]] == [
            "evaluator", "rollout-0", "rollout-1", "trainer"
        ]  # fmt: skip

        # logs --task rollout-1: what the double's rollout[1] wrote, through the API.
        rollout_1 = nomad_double.allocation(the_job, "rollout", 1)
        telemetry_until(kafka_bootstrap, run_id, lambda t, e: t == "rollout-1" and
                        e["event"] == "progress", RUN_TIMEOUT_S)  # fmt: skip
        logs = cli(env, "logs", run_id, "--task", "rollout-1", "--state-dir", str(tmp_path))
        assert logs.returncode == 0, logs.stderr
        assert '"task": "rollout-1"' in logs.stdout and '"event": "progress"' in logs.stdout

        # The trainer is held as well (SIGSTOP) while a worker is killed and one is added,
        # so nothing moves on meanwhile; the workers have their policy already.
        trainer = nomad_double.allocation(the_job, "trainer", 0).tasks["trainer"].process
        assert trainer is not None
        os.killpg(trainer.pid, signal.SIGSTOP)  # its own process group, as Nomad starts it

        # kill -9 of rollout-1: the double's restart policy starts it again, in place.
        killed = nomad_double.kill_task(rollout_1.id, "rollout")
        nomad_double.wait_until(
            lambda: (
                rollout_1.tasks["rollout"].state["Restarts"] >= 1
                and rollout_1.tasks["rollout"].state["State"] == "running"
            ),
            timeout=60,
            what="rollout-1 restarted",
        )
        assert rollout_1.tasks["rollout"].process is not None
        assert rollout_1.tasks["rollout"].process.pid != killed

        # scale 2 -> 3: a third worker's experience reaches the topic.
        scaled = cli(env, "scale", run_id, "--workers", "3")
        assert scaled.returncode == 0, scaled.stderr
        assert "rollout-2" in scaled.stdout
        assert worker_experience(kafka_bootstrap, run_id, 2, RUN_TIMEOUT_S).startswith(b"2/")

        # ...and, the trainer and the evaluator let go, the run still solves.
        os.killpg(trainer.pid, signal.SIGCONT)
        os.killpg(evaluator.pid, signal.SIGCONT)
        assert finished_reason(kafka_bootstrap, run_id) == "target_reached"
    finally:
        for held in (trainer, evaluator):
            if held is not None:
                with contextlib.suppress(ProcessLookupError):  # a stopped one ignores SIGTERM
                    os.killpg(held.pid, signal.SIGCONT)
        stopped = cli(env, "stop", run_id, "--purge", "--state-dir", str(tmp_path))
    assert stopped.returncode == 0, stopped.stderr
    assert the_job not in nomad_double.jobs
    nomad_double.wait_until(lambda: not nomad_double.pids(), timeout=60, what="no task left")
    nomad_double.assert_no_violations()


@pytest.mark.nomad_real
def test_launch_on_a_real_nomad_cluster_solves(
    kafka_bootstrap: str, gcs_endpoint: str, gcs_bucket: str, tmp_path: Path
) -> None:
    """The same launch against ``NOMAD_ADDR`` (the nodes must reach this Kafka and GCS at
    the addresses given, and have coach_stream at ``COACH_STREAM_NOMAD_PYTHON``)."""
    address = os.environ.get("NOMAD_ADDR")
    if not address:
        pytest.skip("NOMAD_ADDR is not set (no real Nomad cluster to run against)")
    env = cli_env(address, os.environ.get("NOMAD_TOKEN"), kafka_bootstrap, gcs_endpoint)
    for name in ("NOMAD_NAMESPACE", "NOMAD_REGION", "NOMAD_CACERT", "NOMAD_CLIENT_CERT",
                 "NOMAD_CLIENT_KEY"):  # fmt: skip
        if name in os.environ:
            env[name] = os.environ[name]
    run_id = f"nomad-real-{uuid.uuid4().hex[:8]}"
    python = os.environ.get("COACH_STREAM_NOMAD_PYTHON", sys.executable)
    try:
        done = cli(
            env, "launch", "cartpole-ppo", "--orchestrator", "nomad", "--workers", "2",
            "--run-id", run_id, "--checkpoints", f"gs://{gcs_bucket}", "--python", python,
            "--state-dir", str(tmp_path), "--timeout", str(RUN_TIMEOUT_S),
            timeout=RUN_TIMEOUT_S + 300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        assert f"run {run_id}: target_reached after" in done.stdout
    finally:
        cli(env, "stop", run_id, "--purge", "--orchestrator", "nomad")
