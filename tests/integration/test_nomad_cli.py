"""``coach-stream`` against Nomad through the CLI: ``--dry-run`` output, secrets kept in
Variables, and Nomad answering 400, 403, 500 or nothing at register (one line, non-zero
exit, no traceback, no job, no topics left)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from nomad_double import NomadDouble, check_job

from coach_stream.orchestrators.nomad_job import job_id
from coach_stream.transport import clients
from coach_stream.transport.settings import KafkaSettings, RunTopics

SECRET = f"s3cret-{uuid.uuid4().hex[:8]}"


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coach_stream.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def cli_env(double: NomadDouble, kafka: str, gcs: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOMAD_")}
    env.update(NOMAD_ADDR=double.address, KAFKA_BOOTSTRAP_SERVERS=kafka, STORAGE_EMULATOR_HOST=gcs)
    if double.token:
        env["NOMAD_TOKEN"] = double.token
    return env


def run_topics_left(kafka: str, run_id: str) -> list[str]:
    topics = RunTopics.for_run(run_id)
    names = {topics.experience, topics.control, topics.dead_letter, topics.telemetry}
    with clients.admin(KafkaSettings(bootstrap_servers=kafka)) as admin:
        return sorted(names & set(admin.list_topics(timeout=10).topics))


def test_dry_run_json_is_a_valid_job_and_registers_nothing(nomad_double: NomadDouble) -> None:
    env = cli_env(nomad_double, "kafka.internal:9092", "")
    done = cli(
        env, "launch", "cartpole-ppo", "--orchestrator", "nomad", "--workers", "3",
        "--dry-run", "--format", "json", "--secrets-var", "nomad/jobs/x",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    job = json.loads(done.stdout)["Job"]
    assert check_job(job) == []  # Nomad's Go API Job type, no silently ignored key
    assert [g["Count"] for g in job["TaskGroups"]] == [1, 3, 1]
    assert nomad_double.requests == [] and nomad_double.jobs == {}
    hcl = cli(env, "launch", "cartpole-ppo", "--orchestrator", "nomad", "--dry-run",
              "--format", "hcl")  # fmt: skip
    assert hcl.returncode == 0 and hcl.stdout.startswith('job "coach-stream-cartpole-ppo-')
    assert nomad_double.requests == []


def test_a_planted_secret_is_in_no_job_and_reaches_the_tasks(
    nomad_double: NomadDouble, kafka_bootstrap: str, gcs_endpoint: str, gcs_bucket: str,
    tmp_path: Path,
) -> None:  # fmt: skip
    run_id = f"nomad-secret-{uuid.uuid4().hex[:8]}"
    path = f"nomad/jobs/{job_id(run_id)}"
    nomad_double.set_variable(path, {"COACH_STREAM_TEST_SECRET": SECRET})
    env = cli_env(nomad_double, kafka_bootstrap, gcs_endpoint)
    common = ["--orchestrator", "nomad", "--run-id", run_id, "--secrets-var", path,
              "--checkpoints", f"gs://{gcs_bucket}", "--state-dir", str(tmp_path)]  # fmt: skip
    dry = cli(env, "launch", "cartpole-ppo", *common, "--dry-run")
    assert dry.returncode == 0 and path in dry.stdout and SECRET not in dry.stdout
    started = cli(env, "launch", "cartpole-ppo", *common, "--detach")
    try:
        assert started.returncode == 0, started.stderr[-2000:]
        assert nomad_double.secrets_in_jobs(SECRET) == []
        trainer = nomad_double.allocation(job_id(run_id), "trainer", 0)
        runner = trainer.tasks["trainer"]
        rendered = runner.ctx.alloc_dir / runner.name / "secrets" / "coach-stream.env"
        assert rendered.read_text().strip() == f"COACH_STREAM_TEST_SECRET={SECRET}"
    finally:
        stopped = cli(env, "stop", run_id, "--purge", "--orchestrator", "nomad")
    assert stopped.returncode == 0, stopped.stderr
    assert job_id(run_id) not in nomad_double.jobs


@pytest.mark.parametrize(
    ("status", "drop", "code", "says"),
    [
        (400, False, 2, "rejected the request to register job"),
        (403, False, 2, "set NOMAD_TOKEN"),
        (500, False, 3, "failed to register job"),
        (None, True, 3, "did not answer"),
    ],
)
def test_nomad_refusing_at_register_is_one_line_and_nothing_is_left(
    nomad_double: NomadDouble, kafka_bootstrap: str, gcs_endpoint: str, gcs_bucket: str,
    tmp_path: Path, status: int | None, drop: bool, code: int, says: str,
) -> None:  # fmt: skip
    run_id = f"nomad-fault-{uuid.uuid4().hex[:8]}"
    nomad_double.inject_fault(method="POST", path="/v1/job", status=status or 500, drop=drop)
    done = cli(
        cli_env(nomad_double, kafka_bootstrap, gcs_endpoint),
        "launch", "cartpole-ppo", "--orchestrator", "nomad", "--run-id", run_id,
        "--checkpoints", f"gs://{gcs_bucket}", "--state-dir", str(tmp_path),
    )  # fmt: skip
    assert done.returncode == code, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], lines
    assert "Traceback" not in done.stderr
    assert nomad_double.jobs == {} and nomad_double.pids() == []
    assert run_topics_left(kafka_bootstrap, run_id) == []


def test_attach_dry_run_is_a_valid_job_of_a_trainer_and_an_evaluator(
    nomad_double: NomadDouble, kafka_bootstrap: str
) -> None:
    from coach_stream.transport.admin import delete_run_topics, ensure_run_topics

    source = f"fleet-{uuid.uuid4().hex[:8]}"
    kafka = KafkaSettings(bootstrap_servers=kafka_bootstrap)
    ensure_run_topics(kafka, RunTopics.for_run(source), 3)  # a run's topics, 3 partitions
    try:
        env = cli_env(nomad_double, kafka_bootstrap, "")
        done = cli(env, "attach", source, "--preset", "cartpole-dqn", "--run-id", f"{source}-s",
                   "--orchestrator", "nomad", "--dry-run", "--format", "json")  # fmt: skip
        assert done.returncode == 0, done.stderr
        job = json.loads(done.stdout)["Job"]
        assert check_job(job) == []
        assert [g["Name"] for g in job["TaskGroups"]] == ["trainer", "evaluator"]
        args = job["TaskGroups"][0]["Tasks"][0]["Config"]["args"]
        assert args[-4:] == ["--workers", "3", "--experience-from", source]
        assert nomad_double.requests == [] and run_topics_left(kafka_bootstrap, f"{source}-s") == []
    finally:
        delete_run_topics(kafka, RunTopics.for_run(source))
