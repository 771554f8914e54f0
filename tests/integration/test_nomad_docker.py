"""Nomad's docker driver for real: the Nomad double's ``docker`` tasks run as containers on
the project's Docker engine, and ``coach-stream launch --driver docker`` trains in them.

- The driver's semantics (environment, templates, exit codes, restarts, kill signal and
  timeout, OOM kills, a missing image) on the small Kafka image: containers of the large
  runtime image take most of a minute each to create on the vfs storage driver (the
  fallback where overlay2 cannot mount).
- The runtime image (``scripts/build-runtime-image.sh``) against the Dockerfile it twins.
- CartPole PPO trained to solved with the trainer, every rollout worker and the evaluator in
  containers of the runtime image; ``status``, ``logs``, ``scale``, ``kill -9`` and
  ``stop --purge`` on it.

These run in ``scripts/test-containers.sh`` (which starts the engine and builds both images);
elsewhere they skip, and there a skip fails the run.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nomad_double import NomadDouble
from nomad_double.drivers import docker_binary
from nomad_double.fixtures import MakeDouble
from nomad_double.jobspecs import client
from test_nomad_e2e import (
    RUN_TIMEOUT_S,
    cli,
    cli_env,
    finished_reason,
    telemetry_until,
    worker_experience,
)

from coach_stream.orchestrators.nomad_job import job_id

pytestmark = [pytest.mark.nomad_docker, pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[2]


def _engine() -> str:
    host = os.environ.get("DOCKER_HOST", "")
    answers = host and subprocess.run(
        [docker_binary(), "version"], capture_output=True, timeout=30, check=False
    ).returncode == 0  # fmt: skip
    if not answers:
        if os.environ.get("COACH_STREAM_KAFKA") == "testcontainers":
            pytest.fail("no Docker engine answers at DOCKER_HOST", pytrace=False)
        pytest.skip("no Docker engine (these run in scripts/test-containers.sh)")
    return host


def _image(variable: str) -> str:
    image = os.environ.get(variable)
    if not image:
        if os.environ.get("COACH_STREAM_KAFKA") == "testcontainers":
            pytest.fail(f"{variable} is not set", pytrace=False)
        pytest.skip(f"{variable} is not set (scripts/test-containers.sh builds it)")
    return image


@pytest.fixture(scope="module")
def docker_host() -> str:
    return _engine()


@pytest.fixture(scope="module")
def small_image(docker_host: str) -> str:
    return _image("COACH_STREAM_KAFKA_IMAGE")


@pytest.fixture(scope="module")
def runtime_image(docker_host: str) -> str:
    return _image("COACH_STREAM_RUNTIME_IMAGE")


@pytest.fixture
def docker_double(nomad_double_factory: MakeDouble, docker_host: str) -> Iterator[NomadDouble]:
    # A node variable a raw_exec task would inherit; a container must not see it.
    host_env = {"PATH": os.environ["PATH"], "HOME": "/root", "NODE_ONLY": "node-value"}
    double = nomad_double_factory(docker_host=docker_host, host_env=host_env)
    yield double
    double.stop()
    assert double.containers() == [], "the double left containers behind"


def docker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [docker_binary(), *args], capture_output=True, text=True, timeout=120, check=False
    )


def shell_job(
    name: str, image: str, script: str, *, attempts: int = 0, kill_timeout_s: float = 5.0,
    memory_mb: int = 64, templates: list[dict[str, Any]] | None = None,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:  # fmt: skip
    task: dict[str, Any] = {
        "Name": "t",
        "Driver": "docker",
        "Config": {"image": image, "entrypoint": ["/bin/sh", "-c"], "command": script},
        "Env": env or {},
        "Resources": {"CPU": 100, "MemoryMB": memory_mb},
        "KillSignal": "SIGTERM",
        "KillTimeout": int(kill_timeout_s * 1e9),
        "Templates": templates or [],
    }
    group = {
        "Name": "g",
        "Count": 1,
        "RestartPolicy": {"Attempts": attempts, "Interval": int(600e9), "Delay": 0, "Mode": "fail"},
        "ReschedulePolicy": {"Attempts": 0, "Unlimited": False},
        "Tasks": [task],
    }
    return {"Job": {"ID": name, "Name": name, "Type": "batch", "Datacenters": ["*"],
                    "TaskGroups": [group]}}  # fmt: skip


def events(double: NomadDouble, job: str) -> list[dict[str, Any]]:
    alloc = double.job_allocations(job)[0]
    return list(alloc.tasks["t"].state["Events"])


def test_environment_templates_exit_codes_and_restarts(
    docker_double: NomadDouble, small_image: str
) -> None:
    """The task's env and a Nomad Variable's template reach the container; a failing exit is
    restarted per the restart block, then fails the task; logs come through the logs API."""
    docker_double.set_variable("nomad/jobs/envjob", {"SECRET_TOKEN": "s3cret-value"})
    template = {
        "EmbeddedTmpl": '{{ with nomadVar "nomad/jobs/envjob" }}{{ range $k, $v := . }}'
        "{{ $k }}={{ $v }}\n{{ end }}{{ end }}",
        "DestPath": "secrets/env",
        "Envvars": True,
    }
    script = (
        'echo "token=$SECRET_TOKEN mode=$RUN_MODE dir=$NOMAD_TASK_DIR index=$NOMAD_ALLOC_INDEX'
        ' node_only=$NODE_ONLY."; test -f /secrets/env && exit 3'
    )
    body = shell_job("envjob", small_image, script, attempts=1, templates=[template],
                     env={"RUN_MODE": "docker"})  # fmt: skip
    client(docker_double).job.register_job("envjob", body)
    alloc = docker_double.job_allocations("envjob")[0]
    docker_double.wait_until(alloc.terminal, timeout=300, what="the task failed")
    kinds = [e["Type"] for e in events(docker_double, "envjob")]
    assert kinds.count("Started") == 2 and kinds.count("Restarting") == 1, kinds
    assert kinds[-1] == "Not Restarting" and alloc.client_status()[0] == "failed"
    exits = [e["ExitCode"] for e in events(docker_double, "envjob") if e["Type"] == "Terminated"]
    assert exits == [3, 3]
    logs = client(docker_double).client.stream_logs.stream(alloc.id, "t", "stdout", plain=True)
    assert "token=s3cret-value mode=docker dir=/local index=0" in logs
    assert "node_only=." in logs  # only the task's environment, never the node's
    assert "s3cret-value" not in json.dumps(client(docker_double).job.get_job("envjob"))


def test_kill_signal_then_kill_timeout(docker_double: NomadDouble, small_image: str) -> None:
    """A stop sends the job's KillSignal into the container; a task that ignores it is
    killed after KillTimeout."""
    graceful = "trap 'echo got TERM; exit 0' TERM; echo ready; while :; do sleep 0.1; done"
    stubborn = "trap '' TERM; echo ready; while :; do sleep 0.1; done"
    api = client(docker_double)
    api.job.register_job("graceful", shell_job("graceful", small_image, graceful))
    api.job.register_job("stubborn", shell_job("stubborn", small_image, stubborn,
                                               kill_timeout_s=1.0))  # fmt: skip
    for name in ("graceful", "stubborn"):
        alloc_id = docker_double.job_allocations(name)[0].id

        def ready(alloc_id: str = alloc_id) -> bool:
            return "ready" in docker_double.logs(alloc_id, "t")

        docker_double.wait_until(ready, timeout=300, what=f"{name} ready")
    for name in ("graceful", "stubborn"):
        api.job.deregister_job(name)
    for name in ("graceful", "stubborn"):
        alloc = docker_double.job_allocations(name)[0]
        docker_double.wait_until(alloc.terminal, timeout=120, what=f"{name} stopped")
    assert "got TERM" in docker_double.logs(docker_double.job_allocations("graceful")[0].id, "t")
    stubborn_events = [e["Type"] for e in events(docker_double, "stubborn")]
    assert stubborn_events[-2:] == ["Killing", "Killed"]
    assert docker_double.containers() == []


def test_an_oom_kill_is_reported_as_nomad_does(
    docker_double: NomadDouble, small_image: str
) -> None:
    """A container over its MemoryMB is killed by the kernel: exit 137, "OOM Killed"."""
    if docker("info", "--format", "{{.MemoryLimit}}").stdout.strip() != "true":
        pytest.skip("this Docker engine cannot limit memory (no memory cgroup)")
    hog = "x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo survived"
    client(docker_double).job.register_job("oom", shell_job("oom", small_image, hog, memory_mb=16))
    alloc = docker_double.job_allocations("oom")[0]
    docker_double.wait_until(alloc.terminal, timeout=300, what="the task was OOM killed")
    terminated = [e for e in events(docker_double, "oom") if e["Type"] == "Terminated"][-1]
    assert terminated["ExitCode"] == 137
    assert terminated["DisplayMessage"] == 'Exit Code: 137, Exit Message: "OOM Killed"'
    assert terminated["Details"] == {"oom_killed": "true"}


def test_a_missing_image_fails_the_task_with_nomads_message(docker_double: NomadDouble) -> None:
    client(docker_double).job.register_job(
        "noimage", shell_job("noimage", "coach-stream/no-such-image:0", "true")
    )
    alloc = docker_double.job_allocations("noimage")[0]
    docker_double.wait_until(alloc.terminal, timeout=60, what="the task failed")
    last = events(docker_double, "noimage")[-1]
    assert last["Type"] == "Driver Failure"
    assert last["DisplayMessage"].startswith("Failed to pull `coach-stream/no-such-image:0`: ")


# -- the runtime image ------------------------------------------------------------------------


def dockerfile_config(path: Path) -> dict[str, Any]:
    """What the Dockerfile declares for the final image: user, working dir, entrypoint,
    command and environment (the instructions this repository's Dockerfile uses)."""
    text = re.sub(r"\\\n", " ", path.read_text())
    config: dict[str, Any] = {"Env": {}}
    for line in text.splitlines():
        instruction, _, rest = line.strip().partition(" ")
        rest = rest.strip()
        if instruction in ("USER", "WORKDIR"):
            config[instruction] = rest
        elif instruction in ("ENTRYPOINT", "CMD"):
            config[instruction] = json.loads(rest) or None
        elif instruction == "ENV":
            config["Env"].update(dict(re.findall(r"(\w+)=(\S+)", rest)))
    return config


def test_the_runtime_image_is_the_dockerfiles_twin(runtime_image: str) -> None:
    inspected = json.loads(docker("image", "inspect", runtime_image).stdout)[0]["Config"]
    declared = dockerfile_config(REPO / "Dockerfile")
    assert inspected["User"] == declared["USER"] == "coach"
    assert inspected["WorkingDir"] == declared["WORKDIR"]
    assert (inspected["Entrypoint"] or None) == declared["ENTRYPOINT"]
    assert inspected["Cmd"] == declared["CMD"]
    env = dict(item.split("=", 1) for item in inspected["Env"])
    assert {k: env.get(k) for k in declared["Env"]} == declared["Env"]
    # No credentials: nothing in the image's environment or labels names a secret.
    secretish = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL", re.IGNORECASE)
    assert not [k for k in [*env, *(inspected["Labels"] or {})] if secretish.search(k)]


# -- CartPole in containers -------------------------------------------------------------------


def container_uid(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError(f"no Uid line for pid {pid}")


def test_cartpole_trains_to_solved_in_containers(
    docker_double: NomadDouble, runtime_image: str, kafka_bootstrap: str, gcs_endpoint: str,
    gcs_bucket: str, tmp_path: Path,
) -> None:  # fmt: skip
    double = docker_double
    env = cli_env(double.address, double.token, kafka_bootstrap, gcs_endpoint)
    run_id = f"nomad-docker-{uuid.uuid4().hex[:8]}"
    the_job = job_id(run_id)
    started = cli(
        env, "launch", "cartpole-ppo", "--orchestrator", "nomad", "--driver", "docker",
        "--image", runtime_image, "--workers", "1", "--detach", "--run-id", run_id,
        "--checkpoints", f"gs://{gcs_bucket}", "--state-dir", str(tmp_path),
        "--start-timeout", "900", timeout=1000,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr[-3000:]
    assert sorted(double.containers()) == sorted(
        f"{t}-{double.allocation(the_job, g, i).id}"
        for g, i, t in [("trainer", 0, "trainer"), ("rollout", 0, "rollout"),
                        ("evaluator", 0, "evaluator")]
    )  # fmt: skip
    # Only the evaluator's reports end a run: held, it keeps the run training meanwhile.
    evaluator = double.allocation(the_job, "evaluator", 0).tasks["evaluator"].main_pid()
    os.kill(evaluator, signal.SIGSTOP)
    try:
        trainer = double.allocation(the_job, "trainer", 0).tasks["trainer"].main_pid()
        assert container_uid(trainer) == 10001  # the image's user, not root
        status = cli(env, "status", run_id, "--json", "--state-dir", str(tmp_path))
        assert status.returncode == 0, status.stderr
        answer = json.loads(status.stdout)
        assert answer["orchestrator"] == "nomad" and answer["state"] == "running"
        assert [t["name"] for t in answer["tasks"]] == ["evaluator", "rollout-0", "trainer"]

        telemetry_until(kafka_bootstrap, run_id, lambda t, e: t == "rollout-0" and
                        e["event"] == "progress", RUN_TIMEOUT_S)  # fmt: skip
        logs = cli(env, "logs", run_id, "--task", "rollout-0", "--state-dir", str(tmp_path))
        assert logs.returncode == 0, logs.stderr
        assert '"task": "rollout-0"' in logs.stdout and '"event": "progress"' in logs.stdout

        # kill -9 of rollout-0's main process: the restart block starts a new container.
        rollout_0 = double.allocation(the_job, "rollout", 0)
        killed = double.kill_task(rollout_0.id, "rollout")
        double.wait_until(
            lambda: rollout_0.tasks["rollout"].state["Restarts"] >= 1
            and rollout_0.tasks["rollout"].state["State"] == "running",
            timeout=600, what="rollout-0 restarted",
        )  # fmt: skip
        terminated = [e for e in rollout_0.tasks["rollout"].state["Events"]
                      if e["Type"] == "Terminated"]  # fmt: skip
        assert terminated[0]["ExitCode"] == 137
        assert rollout_0.tasks["rollout"].main_pid() != killed

        # (On vfs each container is a full copy of the 5.7 GB image: 1 worker scaled to 2
        # keeps the test at 4 containers.)
        scaled = cli(env, "scale", run_id, "--workers", "2")
        assert scaled.returncode == 0, scaled.stderr
        assert worker_experience(kafka_bootstrap, run_id, 1, RUN_TIMEOUT_S).startswith(b"1/")
        assert len(double.containers()) == 4

        os.kill(evaluator, signal.SIGCONT)
        assert finished_reason(kafka_bootstrap, run_id) == "target_reached"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(evaluator, signal.SIGCONT)
        stopped = cli(env, "stop", run_id, "--purge", "--state-dir", str(tmp_path))
    assert stopped.returncode == 0, stopped.stderr
    assert the_job not in double.jobs
    # (Removing a container on vfs deletes a whole copy of the image: a minute under load.)
    double.wait_until(lambda: not double.containers(), timeout=900, what="no container left")
    double.assert_no_violations()


@pytest.mark.parametrize(
    ("node", "extra", "expected"),
    [
        ("docker", ["--driver", "docker", "--image", "coach-stream/no-such-image:0"],
         "Failed to pull `coach-stream/no-such-image:0`"),
        ("docker", ["--image", "coach-stream/runtime:0.1.0"], "--image is for --driver docker"),
        # the plain double has no docker driver: nothing is placed, and the launch says why
        ("raw_exec only", ["--driver", "docker", "--image", "coach-stream/runtime:0.1.0"],
         "missing drivers"),
    ],
)  # fmt: skip
def test_bad_docker_launches_end_in_one_line_and_leave_no_job(
    request: pytest.FixtureRequest, kafka_bootstrap: str, gcs_endpoint: str, gcs_bucket: str,
    tmp_path: Path, node: str, extra: list[str], expected: str,
) -> None:  # fmt: skip
    double: NomadDouble = request.getfixturevalue(
        "docker_double" if node == "docker" else "nomad_double"
    )
    env = cli_env(double.address, double.token, kafka_bootstrap, gcs_endpoint)
    run_id = f"nomad-bad-{uuid.uuid4().hex[:8]}"
    done = cli(
        env, "launch", "cartpole-ppo", "--orchestrator", "nomad", *extra, "--run-id", run_id,
        "--checkpoints", f"gs://{gcs_bucket}", "--state-dir", str(tmp_path), timeout=300,
    )  # fmt: skip
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and expected in lines[0], done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert job_id(run_id) not in double.jobs
    assert double.containers() == []
