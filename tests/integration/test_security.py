"""Kafka with SCRAM-SHA-512 (SASL_PLAINTEXT and SASL_SSL): right credentials work, wrong ones
fail in one line, and the password never appears in anything a run writes or prints.

A second broker (``secure_kafka``) is started for this module only, beside the session's
own, from the local stack's cached jars; it has no unauthenticated listener. Without those
jars (or Java) the module is skipped, and fails under ``COACH_STREAM_REQUIRE_SERVICES=1``.
The SCRAM password of its user is a marker (``s3cret-MARKER-<hex>``) that the last test
looks for in every file of a real run (logs, ``run.json``, checkpoints) and every output
(``launch``, ``status``, ``logs``, the Nomad job of ``--dry-run`` as JSON and HCL); a run on
the Nomad API double shows the tasks get the credentials from a Nomad Variable only.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import secure_kafka
from nomad_double import NomadDouble
from secure_kafka import SecureBroker

from coach_stream.errors import AuthenticationError
from coach_stream.orchestrators.nomad_job import job_id
from coach_stream.testing.chunks import make_chunk
from coach_stream.transport import (
    KafkaExperienceReader,
    KafkaExperienceWriter,
    RunTopics,
    check_broker,
    ensure_run_topics,
)

pytestmark = pytest.mark.integration

CLI = Path(sys.executable).with_name("coach-stream")
MARKER = f"s3cret-MARKER-{uuid.uuid4().hex[:12]}"
USER = f"scram-user-{uuid.uuid4().hex[:6]}"
CHUNKS = 40
ONE_LINE_S = 15.0  # a refused login must be reported well before any broker timeout


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    libs = secure_kafka.jars()
    why: object = "the stack's Kafka jars were never provisioned (`coach-stream stack up`)"
    started: SecureBroker | None = None
    if libs is not None:
        try:
            started = secure_kafka.start(tmp_path_factory.mktemp("scram"), libs, USER, MARKER)
        except Exception as error:  # whatever stops it is the reason to skip (or fail in CI)
            why = error
    if started is None:
        message = f"a SCRAM-SHA-512 Kafka broker could not start: {why}"
        if os.environ.get("COACH_STREAM_REQUIRE_SERVICES") == "1":
            pytest.fail(message + " (COACH_STREAM_REQUIRE_SERVICES=1)", pytrace=False)
        pytest.skip(message)
    try:
        yield started
    finally:
        secure_kafka.stop(started)


@dataclass(frozen=True)
class Result:
    code: int
    stdout: str
    stderr: str
    seconds: float


def cli(*args: str, env: dict[str, str], cwd: Path, timeout: float = 120.0) -> Result:
    """``coach-stream ARGS`` as a user runs it, with only ``env``'s Kafka settings."""
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("COACH_STREAM_KAFKA", "KAFKA_", "NOMAD_", "COACH_STREAM_STATE"))
    }
    clean["COACH_STREAM_CACHE"] = str(cwd / "no-stack-cache")  # never the shared stack
    started = time.monotonic()
    done = subprocess.run(
        [str(CLI), *args],
        cwd=cwd,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return Result(done.returncode, done.stdout, done.stderr, time.monotonic() - started)


def one_line(result: Result, says: str, *, code: int = 2) -> None:
    """A refused command: ``code``, exactly one line on stderr saying ``says``, no traceback."""
    lines = result.stderr.strip().splitlines()
    assert result.code == code, f"exit {result.code}: {result.stderr!r}"
    assert "Traceback" not in result.stderr + result.stdout
    assert len(lines) == 1, lines
    assert says in lines[0], lines[0]
    assert result.seconds < ONE_LINE_S, f"took {result.seconds:.1f} s"


@pytest.fixture(scope="module")
def stored_run(broker: SecureBroker) -> str:
    """A run id whose experience topic holds ``CHUNKS`` chunks written with SCRAM over TLS."""
    run_id = f"sec-{uuid.uuid4().hex[:10]}"
    settings = broker.settings(tls=True)
    topics = RunTopics.for_run(run_id)
    ensure_run_topics(settings, topics, experience_partitions=2)
    with KafkaExperienceWriter(settings, topics.experience) as writer:
        for seq in range(CHUNKS):
            writer.write(dataclasses.replace(make_chunk(seed=seq), run_id=run_id, chunk_seq=seq))
        writer.flush(30)
    return run_id


@pytest.mark.parametrize("tls", [False, True], ids=["sasl_plaintext", "sasl_ssl"])
def test_right_credentials_produce_and_consume(broker: SecureBroker, tls: bool) -> None:
    settings = broker.settings(tls=tls)
    topics = RunTopics.for_run(f"sec-{uuid.uuid4().hex[:10]}")
    ensure_run_topics(settings, topics, experience_partitions=2)
    with KafkaExperienceWriter(settings, topics.experience) as writer:
        for seq in range(CHUNKS):
            writer.write(dataclasses.replace(make_chunk(seed=seq), chunk_seq=seq))
        writer.flush(30)
        assert writer.stats.delivered == CHUNKS
    read: list[int] = []
    with KafkaExperienceReader(settings, topics, f"g-{uuid.uuid4().hex[:6]}") as reader:
        for batch in reader.read_until_end(100, timeout=30):
            read += [c.chunk_seq for c in batch]
    assert sorted(read) == list(range(CHUNKS))


@pytest.mark.parametrize("tls", [False, True], ids=["sasl_plaintext", "sasl_ssl"])
def test_a_wrong_password_is_an_authentication_error_within_seconds(
    broker: SecureBroker, tls: bool
) -> None:
    started = time.monotonic()
    with pytest.raises(AuthenticationError, match="refused this client's login"):
        check_broker(broker.settings(tls=tls, password="wrong"), timeout=10)
    assert time.monotonic() - started < 5.0  # not the 10 s of a broker that is down


def test_replay_inspect_with_right_credentials_succeeds(
    broker: SecureBroker, stored_run: str, tmp_path: Path
) -> None:
    for tls in (False, True):
        result = cli("replay", "inspect", stored_run, env=broker.env(tls=tls), cwd=tmp_path)
        assert result.code == 0, result.stderr
        assert "Traceback" not in result.stderr
        assert str(CHUNKS) in result.stdout and stored_run in result.stdout


@pytest.mark.parametrize(
    "command",
    [
        ["replay", "inspect", "RUN"],
        ["launch", "cartpole-ppo", "--workers", "1"],
    ],
    ids=["replay", "launch"],
)
def test_wrong_credentials_end_in_one_line_exit_2(
    broker: SecureBroker, stored_run: str, tmp_path: Path, command: list[str]
) -> None:
    args = [stored_run if a == "RUN" else a for a in command]
    if args[0] == "launch":
        args += ["--state-dir", str(tmp_path / "state")]
    result = cli(*args, env=broker.env(password="wrong"), cwd=tmp_path)
    one_line(result, "Kafka refused this client's login")
    assert "COACH_STREAM_KAFKA_SASL_PASSWORD" in result.stderr
    assert not (tmp_path / "state" / "runs").exists() or not any(
        (tmp_path / "state" / "runs").iterdir()
    )  # launch started nothing


@pytest.mark.parametrize("command", ["train", "rollout"])
def test_a_task_with_wrong_credentials_exits_2_so_it_is_not_restarted(
    broker: SecureBroker, tmp_path: Path, command: str
) -> None:
    """The supervisor restarts a task that exits 3 (unavailable), never one that exits 2."""
    args = [command, "--preset", "cartpole-ppo", "--run-id", f"sec-{uuid.uuid4().hex[:8]}"]
    if command == "rollout":
        args += ["--worker-id", "0"]
    result = cli(*args, env=broker.env(password="wrong"), cwd=tmp_path, timeout=180)
    assert result.code == 2, result.stderr
    assert "Traceback" not in result.stderr
    # A task keeps librdkafka's own lines in its log; its last line is the cause.
    assert "Kafka refused this client's login" in result.stderr.strip().splitlines()[-1]
    # Its telemetry cannot be delivered either; the exit does not wait the producer's
    # delivery timeout for it (it did: 110 s, past any supervisor's grace).
    assert result.seconds < 90, f"took {result.seconds:.0f} s"


def test_an_untrusted_broker_certificate_is_one_line(
    broker: SecureBroker, stored_run: str, tmp_path: Path
) -> None:
    env = broker.env(tls=True)
    del env["COACH_STREAM_KAFKA_SSL_CA_LOCATION"]  # the system CAs do not know this broker
    result = cli("replay", "inspect", stored_run, env=env, cwd=tmp_path)
    one_line(result, "TLS handshake with Kafka failed on a certificate")


def test_invalid_security_settings_are_one_line(tmp_path: Path) -> None:
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1",
        "COACH_STREAM_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "COACH_STREAM_KAFKA_SASL_PASSWORD": MARKER,
    }
    result = cli("replay", "inspect", "some-run", env=env, cwd=tmp_path)
    one_line(result, "needs a SASL username and password")
    assert MARKER not in result.stderr + result.stdout


def _files_holding(root: Path, secret: bytes) -> list[str]:
    """Every file under ``root`` (binary ones too: checkpoints) whose bytes hold ``secret``."""
    hits = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink() and secret in path.read_bytes():
            hits.append(str(path))
    return hits


def test_the_password_appears_nowhere_a_run_writes_or_prints(
    broker: SecureBroker, tmp_path: Path
) -> None:
    """A real run on the SCRAM broker (the tasks inherit the credentials), then every
    command a user would run about it; the marker password must be in none of it."""
    env = broker.env()
    state = tmp_path / "state"
    run_id = f"sec-run-{uuid.uuid4().hex[:8]}"
    outputs: list[Result] = []
    launched = cli(
        "launch", "cartpole-ppo", "--run-id", run_id, "--workers", "1",
        "--state-dir", str(state), "--set", "env_step_budget=2048", "--timeout", "150",
        env=env, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    outputs.append(launched)
    # The run trained on the secured broker: it ended on its budget (exit 1: not solved).
    assert launched.code == 1, launched.stderr
    assert f"run {run_id}: budget_exhausted" in launched.stdout, launched.stdout
    assert "Traceback" not in launched.stderr
    logs_dir = state / "runs" / run_id / "logs"
    assert (logs_dir / "trainer.log").is_file()  # the files searched below exist
    checkpoints = list((state / "checkpoints").rglob("*.pt"))
    assert checkpoints, "the run wrote no checkpoint"

    for args in (
        ["status"],
        ["status", run_id],
        ["status", run_id, "--json"],
        ["logs", run_id],
    ):
        result = cli(*args, "--state-dir", str(state), env=env, cwd=tmp_path)
        assert result.code == 0, (args, result.stderr)
        outputs.append(result)
    assert json.loads(outputs[-2].stdout)["progress"], "status read no figures from Kafka"

    dry = ["launch", "cartpole-ppo", "--orchestrator", "nomad", "--dry-run", "--run-id", run_id]
    for job_format in ("json", "hcl"):
        result = cli(
            *dry, "--format", job_format, "--secrets-var", "coach-stream/kafka",
            env=env, cwd=tmp_path,
        )  # fmt: skip
        assert result.code == 0, result.stderr
        assert "COACH_STREAM_KAFKA_SECURITY_PROTOCOL" in result.stdout  # non-secret settings
        assert "coach-stream/kafka" in result.stdout  # the Variable the credentials come from
        assert USER not in result.stdout  # the username travels with the password
        outputs.append(result)
    job = json.loads(outputs[-2].stdout)["Job"]
    for group in job["TaskGroups"]:
        task = group["Tasks"][0]
        assert "COACH_STREAM_KAFKA_SASL_PASSWORD" not in task["Env"]
        assert task["Templates"][0]["Envvars"] is True
    refused = cli(*dry, env=env, cwd=tmp_path)  # credentials set, no --secrets-var
    one_line(refused, "must not be written into a Nomad job")
    outputs.append(refused)

    secret = MARKER.encode()
    assert secret in broker.password.encode()  # the run above authenticated with it
    assert _files_holding(tmp_path, secret) == []
    leaked = [r for r in outputs if MARKER in r.stdout + r.stderr]
    assert leaked == []


def test_on_nomad_credentials_reach_the_tasks_only_through_a_variable(
    broker: SecureBroker, nomad_double: NomadDouble, tmp_path: Path
) -> None:
    """A real run on the Nomad double (tasks are processes that inherit nothing of the
    launcher's environment): they log in with the Variable's credentials, which appear in
    no job sent or stored and in no log, state or checkpoint file."""
    run_id = f"sec-nomad-{uuid.uuid4().hex[:8]}"
    path = f"nomad/jobs/{job_id(run_id)}"  # readable by the job's own workload identity
    nomad_double.set_variable(
        path,
        {"COACH_STREAM_KAFKA_SASL_USERNAME": USER, "COACH_STREAM_KAFKA_SASL_PASSWORD": MARKER},
    )
    env = {**broker.env(), "NOMAD_ADDR": nomad_double.address}
    env["NOMAD_TOKEN"] = nomad_double.token or ""
    launched = cli(
        "launch", "cartpole-ppo", "--orchestrator", "nomad", "--workers", "1",
        "--run-id", run_id, "--secrets-var", path, "--state-dir", str(tmp_path / "state"),
        "--checkpoints", str(tmp_path / "checkpoints"), "--set", "env_step_budget=2048",
        "--timeout", "300",
        env=env, cwd=tmp_path, timeout=480,
    )  # fmt: skip
    assert launched.code == 1, launched.stderr[-3000:]
    assert f"run {run_id}: budget_exhausted" in launched.stdout, launched.stdout
    assert "Traceback" not in launched.stderr
    assert MARKER not in launched.stdout + launched.stderr
    assert nomad_double.secrets_in_jobs(MARKER, USER) == []
    nomad_double.assert_no_violations()
    # Only Nomad's rendered template (a task's secrets/ dir) holds it: that is how it came.
    holding = _files_holding(nomad_double.root, MARKER.encode())
    assert holding, "no task received the Variable's credentials"
    assert [p for p in holding if "/secrets/" not in p] == []
    assert _files_holding(tmp_path, MARKER.encode()) == []
