"""NomadOrchestrator against the Nomad API double: the job it builds, its life cycle
(submit waits for running allocations, status, logs, scale, stop --purge) and every way
Nomad can refuse or fail to answer. The tasks here are small stand-in processes; the
training run end to end is in test_nomad_e2e.py."""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

import pytest
from nomad_double import NomadDouble, check_job
from nomad_double.fixtures import MakeDouble

from coach_stream.errors import OrchestratorError, ServiceUnavailableError
from coach_stream.orchestrators import LaunchSettings, build_run_spec
from coach_stream.orchestrators.nomad import NomadOrchestrator
from coach_stream.orchestrators.nomad_connection import NomadConnection
from coach_stream.orchestrators.nomad_job import NomadJobSettings, build_job, job_id
from coach_stream.orchestrators.plan import RunSpec, TaskSpec, TaskState

# A stand-in task: says who it is (and the secret it was given), then waits to be stopped.
TASK = (
    "import os, sys, time\n"
    "print('task', sys.argv[1:], 'secret', os.environ.get('KAFKA_SASL_PASSWORD'), flush=True)\n"
    "print('stderr line', file=sys.stderr, flush=True)\n"
    "time.sleep(120)\n"
)


def fake_spec(run_id: str, workers: int = 2) -> RunSpec:
    cli = (sys.executable, "-c", TASK)
    tasks = [TaskSpec("trainer", "trainer", (*cli, "train", "--preset", "p", "--run-id", run_id))]
    tasks += [
        TaskSpec(f"rollout-{i}", "rollout", (*cli, "rollout", "--worker-id", str(i)))
        for i in range(workers)
    ]
    tasks.append(TaskSpec("evaluator", "evaluator", (*cli, "rollout", "--worker-id", "9")))
    return RunSpec(run_id, tuple(tasks))


def orchestrator(double: NomadDouble, **job: object) -> NomadOrchestrator:
    connection = NomadConnection(address=double.address, token=double.token)
    settings = NomadJobSettings(kill_timeout_s=2, restart_delay_s=0.1, **job)  # type: ignore[arg-type]
    return NomadOrchestrator(connection, settings, start_timeout_s=30)


def test_the_cartpole_job_decodes_as_nomads_api_job_with_no_ignored_key() -> None:
    settings = LaunchSettings(
        preset="cartpole-ppo",
        run_id="r1",
        workers=3,
        kafka_bootstrap="kafka:9092",
        checkpoints="gs://bucket/runs",
        gcs_emulator="http://gcs:4443",
    )
    spec = build_run_spec(settings)
    job = build_job(spec, NomadJobSettings(secrets_var="nomad/jobs/coach-stream-r1"))
    assert check_job(job) == []
    groups = {g["Name"]: g for g in job["TaskGroups"]}
    assert [(name, g["Count"]) for name, g in groups.items()] == [
        ("trainer", 1),
        ("rollout", 3),
        ("evaluator", 1),
    ]
    # Exactly the local orchestrator's commands; rollout i is the group's index i.
    trainer = groups["trainer"]["Tasks"][0]["Config"]
    assert [trainer["command"], *trainer["args"]] == list(spec.tasks[0].argv)
    rollout = groups["rollout"]["Tasks"][0]["Config"]
    argv = [rollout["command"], *rollout["args"]]
    for task in spec.tasks[1:4]:
        index = task.name.removeprefix("rollout-")
        assert [index if a == "${NOMAD_ALLOC_INDEX}" else a for a in argv] == list(task.argv)
    assert job["Meta"]["run_id"] == "r1" and job["Meta"]["preset"] == "cartpole-ppo"
    assert groups["rollout"]["Spreads"][0]["Attribute"] == "${node.unique.id}"


def test_a_shadow_learner_is_a_job_of_a_trainer_and_an_evaluator_and_cannot_be_scaled(
    nomad_double: NomadDouble,
) -> None:
    settings = LaunchSettings(
        preset="cartpole-dqn", run_id="shadow", workers=3, kafka_bootstrap="kafka:9092",
        checkpoints="gs://bucket/runs", experience_from="fleet",
    )  # fmt: skip
    job = build_job(build_run_spec(settings), NomadJobSettings())
    assert check_job(job) == []
    assert [(g["Name"], g["Count"]) for g in job["TaskGroups"]] == [
        ("trainer", 1),
        ("evaluator", 1),
    ]
    assert job["TaskGroups"][0]["Tasks"][0]["Config"]["args"][-4:] == [
        "--workers", "3", "--experience-from", "fleet",
    ]  # fmt: skip

    orch = orchestrator(nomad_double)
    cli = (sys.executable, "-c", TASK)
    trainer = (*cli, "train", "--run-id", "shadow", "--experience-from", "fleet")
    spec = RunSpec("shadow", (TaskSpec("trainer", "trainer", trainer),
                              TaskSpec("evaluator", "evaluator", (*cli, "rollout"))))  # fmt: skip
    orch.submit(spec)
    assert sorted(s.name for s in orch.status("shadow")) == ["evaluator", "trainer"]
    with pytest.raises(OrchestratorError, match="shadow learner"):
        orch.scale("shadow", 2)
    orch.stop("shadow", purge=True)
    nomad_double.wait_until(lambda: not nomad_double.pids(), what="every task process gone")
    nomad_double.assert_no_violations()


def test_a_rollout_group_that_differs_by_more_than_the_worker_id_is_refused() -> None:
    spec = fake_spec("r2")
    odd = TaskSpec("rollout-1", "rollout", (sys.executable, "-c", "pass", "--worker-id", "1"))
    broken = RunSpec("r2", (spec.tasks[0], spec.tasks[1], odd))
    with pytest.raises(Exception, match="differs from rollout-0"):
        build_job(broken, NomadJobSettings())


def test_submit_waits_for_running_then_status_logs_scale_and_stop_purge(
    nomad_double: NomadDouble,
) -> None:
    nomad_double.set_variable("nomad/jobs/coach-stream-life", {"KAFKA_SASL_PASSWORD": "s3cret"})
    orch = orchestrator(nomad_double, secrets_var="nomad/jobs/coach-stream-life")
    orch.submit(fake_spec("life"))
    # submit returned: every allocation runs, seen through the API (no sleep anywhere).
    statuses = {s.name: s for s in orch.status("life")}
    assert sorted(statuses) == ["evaluator", "rollout-0", "rollout-1", "trainer"]
    assert all(s.state is TaskState.RUNNING for s in statuses.values())
    registered = nomad_double.jobs[job_id("life")]
    assert "s3cret" not in repr(registered.__dict__)  # the secret never entered the job

    def logged() -> bool:
        return any("secret s3cret" in line for line in orch.logs("life", "rollout-1"))

    nomad_double.wait_until(logged, what="rollout-1 printed")
    lines = list(orch.logs("life", "rollout-1"))
    assert any("'--worker-id', '1'" in line for line in lines)  # ${NOMAD_ALLOC_INDEX} = 1
    assert "stderr line" in lines

    orch.scale("life", 3)
    orch.wait_running("life", 30)
    assert "rollout-2" in {s.name for s in orch.status("life")}
    assert len([s for s in orch.status("life") if s.state is TaskState.RUNNING]) == 5

    orch.stop("life", purge=True)
    nomad_double.wait_until(lambda: not nomad_double.pids(), what="every task process gone")
    assert job_id("life") not in nomad_double.jobs
    nomad_double.assert_no_violations()


def test_logs_follow_streams_a_task_until_its_allocation_ends(nomad_double: NomadDouble) -> None:
    code = "import time\nfor i in range(3): print('line', i, flush=True); time.sleep(0.3)\n"
    cli = (sys.executable, "-c", code)
    spec = RunSpec(
        "follow",
        (
            TaskSpec("trainer", "trainer", (*cli, "train")),
            TaskSpec("rollout-0", "rollout", (*cli, "rollout", "--worker-id", "0")),
        ),
    )
    orch = orchestrator(nomad_double)
    orch.submit(spec)
    assert list(orch.follow_logs("follow", "trainer")) == ["line 0", "line 1", "line 2"]
    nomad_double.wait_until(lambda: not nomad_double.pids(), what="the tasks ended")
    assert {s.state for s in orch.status("follow")} == {TaskState.COMPLETE}


def test_a_task_that_cannot_start_fails_submit_and_leaves_no_job(
    nomad_double: NomadDouble,
) -> None:
    spec = fake_spec("nostart")
    missing = dataclasses.replace(spec.tasks[0], argv=("/nonexistent/python", "-c", "pass"))
    spec = dataclasses.replace(spec, tasks=(missing, *spec.tasks[1:]))
    with pytest.raises(OrchestratorError, match=r"failed to start on Nomad \(Driver Failure"):
        orchestrator(nomad_double).submit(spec)
    assert job_id("nostart") not in nomad_double.jobs
    # The other groups' tasks had started; the purge stops them as Nomad does, after it.
    nomad_double.wait_until(lambda: not nomad_double.pids(), timeout=30, what="no task left")


def test_a_driver_no_node_has_fails_submit_at_once_and_leaves_no_job(
    nomad_double: NomadDouble,
) -> None:
    """The double's node has no docker driver: Nomad places nothing, and waiting would not
    change that, so submit says why without waiting out its start timeout."""
    orch = orchestrator(nomad_double, driver="docker", image="coach-stream:dev")
    started = time.monotonic()
    with pytest.raises(OrchestratorError, match=r"cannot place group \w+ .*missing drivers"):
        orch.submit(fake_spec("nodocker"))
    assert time.monotonic() - started < orch.start_timeout_s / 2
    assert job_id("nodocker") not in nomad_double.jobs


@pytest.mark.parametrize(
    ("status", "drop", "error", "text"),
    [
        (400, False, OrchestratorError, "rejected the request to register job"),
        (403, False, OrchestratorError, "set NOMAD_TOKEN"),
        (500, False, ServiceUnavailableError, "failed to register job"),
        (None, True, ServiceUnavailableError, "did not answer"),
    ],
)
def test_nomad_refusing_or_silent_at_register_is_one_clear_error_and_no_job(
    nomad_double: NomadDouble,
    status: int | None,
    drop: bool,
    error: type[Exception],
    text: str,
) -> None:
    nomad_double.inject_fault(method="POST", path="/v1/job", status=status or 500, drop=drop)
    with pytest.raises(error, match=text) as raised:
        orchestrator(nomad_double).submit(fake_spec("fault"))
    assert "\n" not in str(raised.value)
    assert job_id("fault") not in nomad_double.jobs and not nomad_double.pids()


def test_a_wrong_token_and_a_stopped_agent_are_named(nomad_double_factory: MakeDouble) -> None:
    double = nomad_double_factory()
    wrong = NomadOrchestrator(NomadConnection(address=double.address, token="nope"))
    with pytest.raises(OrchestratorError, match=r"refused to read job .*403 Permission denied"):
        wrong.submit(fake_spec("token"))
    address = double.address
    double.stop()
    gone = NomadOrchestrator(NomadConnection(address=address))
    with pytest.raises(ServiceUnavailableError, match=r"connection refused.*NOMAD_ADDR"):
        gone.status("anything")


def test_connection_settings_come_from_the_nomad_cli_variables(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("a CA bundle")  # a named file must exist (issue 27)
    env = {
        "NOMAD_ADDR": "nomad.example:4646",
        "NOMAD_TOKEN": "t",
        "NOMAD_NAMESPACE": "rl",
        "NOMAD_REGION": "eu",
        "NOMAD_CACERT": str(tmp_path / "ca.pem"),
    }
    connection = NomadConnection.from_env(env, token="flag-wins")
    assert connection.address == "http://nomad.example:4646"
    assert (connection.token, connection.namespace, connection.region) == ("flag-wins", "rl", "eu")
    assert connection.cacert == str(tmp_path / "ca.pem")
    with pytest.raises(OrchestratorError, match="go together"):
        NomadConnection.from_env({"NOMAD_CLIENT_CERT": "c.pem"})
