"""Bad input that needs no service: each ends in exit 2, one line, no traceback, < 30 s,
and nothing created (no run directory, no checkpoint directory, no process).

Most cases call the console script's ``main`` in this process (``ws``), as a new interpreter
would but without importing torch again for each; the ``console`` cases run the installed
script itself, to show that it answers as ``main`` does.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import Workspace, processes_mentioning, refused, workspace

from coach_stream import __version__

# No broker listens on port 1: a check that reached Kafka would fail differently (and later).
NO_KAFKA = ("--kafka", "127.0.0.1:1")


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return workspace(tmp_path, in_process=True)


@pytest.fixture
def console(tmp_path: Path) -> Workspace:
    return workspace(tmp_path)


def assert_nothing_created(ws: Workspace, run_id: str) -> None:
    assert ws.run_dirs() == []
    assert not (ws.cwd / ".coach-stream").exists()
    assert not (ws.state_dir / "checkpoints").exists()
    assert processes_mentioning(run_id) == []


def test_version_exits_0(console: Workspace) -> None:
    result = console.run("--version")
    assert (result.code, result.stdout.strip()) == (0, f"coach-stream {__version__}")


def test_bare_command_prints_the_help_and_exits_2(console: Workspace) -> None:
    result = console.run()
    assert result.code == 2
    assert "Usage" in result.stdout and "launch" in result.stdout
    assert "Traceback" not in result.stderr + result.stdout


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["bogus"], "No such command 'bogus'"),
        (["lunch", "cartpole-ppo"], "did you mean 'launch'?"),
        (["launch", "cartpole-ppo", "--bogus"], "No such option: --bogus"),
        (["launch", "cartpole-ppo", "--workers", "0"], "'--workers'"),
        (["launch", "cartpole-ppo", "--workers", "-1"], "'--workers'"),
        (["launch", "cartpole-ppo", "--workers", "abc"], "'--workers'"),
        (["launch", "cartpole-ppo", "--seed", "-5"], "'--seed'"),
        (["launch", "cartpole-ppo", "--timeout", "-1"], "'--timeout'"),
        (["launch"], "Missing argument 'preset'"),
        (["stack", "bogus"], "No such command 'bogus'"),
    ],
)
def test_usage_errors_are_one_line_with_a_help_hint(
    ws: Workspace, args: list[str], says: str
) -> None:
    result = ws.run(*args)
    refused(result, says=says)
    assert "--help" in result.stderr
    assert ws.run_dirs() == []


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["no-such-preset"], "Unknown preset 'no-such-preset'"),
        (["cartpole-ppo", "--set", "ppo.no_such_key=1"], "Unknown key 'ppo.no_such_key'"),
        (["cartpole-ppo", "--set", "seed=abc"], "Invalid value for 'seed'"),
        (["cartpole-ppo", "--set", "eval_episodes=0"], "Invalid value for 'eval_episodes'"),
        (["cartpole-ppo", "--set", "no-equals-sign"], "is not of the form key=value"),
        (["cartpole-ppo", "--checkpoints", "s3://bucket/x"], "unsupported scheme 's3'"),
        (["cartpole-ppo", "--checkpoints", "gs://"], "names no bucket"),
        (["cartpole-ppo", "--checkpoints", "file://host/dir"], "not a local file URL"),
        (["cartpole-ppo", "--run-id", "a.b"], "Run id 'a.b' is not valid"),
        (["cartpole-ppo", "--run-id", "x" * 101], "is not valid"),
        # root passes os.access on /proc, yet nothing can be created there: the run had
        # started, then the launcher died with a traceback when it made the scalars' dir
        (["cartpole-ppo", "--tensorboard", "/proc/coach-stream-tb"], "--tensorboard /proc/"),
        # Nomad's docker driver: a container cannot see the launching machine's files
        (["cartpole-ppo", "--orchestrator", "nomad", "--nomad-addr", "http://127.0.0.1:1",
          "--driver", "docker", "--image", "coach-stream/runtime:0.1.0"],
         "--driver docker runs every task in a container"),
        (["cartpole-ppo", "--orchestrator", "nomad", "--nomad-addr", "http://127.0.0.1:1",
          "--image", "coach-stream/runtime:0.1.0", "--checkpoints", "gs://b/p"],
         "--image is for --driver docker"),
        (["cartpole-ppo", "--orchestrator", "nomad", "--nomad-addr", "http://127.0.0.1:1",
          "--driver", "docker", "--checkpoints", "gs://b/p"], "--driver docker needs --image"),
    ],
)  # fmt: skip
def test_bad_launch_input_is_refused_before_anything_starts(
    ws: Workspace, run_id: str, args: list[str], says: str
) -> None:
    extra = [] if "--run-id" in args else ["--run-id", run_id]
    result = ws.launch(*args, *extra, *NO_KAFKA)
    refused(result, says=says)
    assert_nothing_created(ws, run_id)


def test_no_kafka_address_is_refused(ws: Workspace, run_id: str) -> None:
    refused(ws.launch("cartpole-ppo", "--run-id", run_id), says="No Kafka bootstrap servers")
    assert_nothing_created(ws, run_id)


@pytest.mark.parametrize("command", ["launch", "status"])
def test_a_malformed_kafka_address_is_refused_at_once(ws: Workspace, command: str) -> None:
    args = ["cartpole-ppo"] if command == "launch" else ["some-run"]
    refused(ws.run(command, *args, "--kafka", "broker:"), says="'broker:' is not HOST:PORT")
    assert ws.run_dirs() == []


def test_yaml_errors_name_the_file(ws: Workspace, run_id: str, tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: x\nenv_id: [unclosed\n")
    refused(ws.launch(str(broken), "--run-id", run_id, *NO_KAFKA), says="broken.yaml")

    unknown = tmp_path / "unknown.yaml"
    unknown.write_text(
        (Path(__file__).parents[2] / "coach_stream/presets/cartpole-ppo.yaml").read_text()
        + "\nno_such_key: 1\n"
    )
    refused(ws.launch(str(unknown), "--run-id", run_id, *NO_KAFKA), says="'no_such_key'")
    assert_nothing_created(ws, run_id)


def test_an_environment_that_does_not_exist_is_refused(
    ws: Workspace, run_id: str, tmp_path: Path
) -> None:
    preset = tmp_path / "nosuchenv.yaml"
    text = (Path(__file__).parents[2] / "coach_stream/presets/cartpole-ppo.yaml").read_text()
    preset.write_text(text.replace("CartPole-v1", "NoSuchEnv-v0"))
    assert "NoSuchEnv-v0" in preset.read_text()
    result = ws.launch(str(preset), "--run-id", run_id, *NO_KAFKA)
    refused(result, says="Cannot create environment 'NoSuchEnv-v0'")
    assert_nothing_created(ws, run_id)


def test_a_run_id_taken_in_the_state_dir_is_refused(ws: Workspace, run_id: str) -> None:
    taken = ws.state_dir / "runs" / run_id
    taken.mkdir(parents=True)
    (taken / "run.json").write_text("{}")
    result = ws.launch("cartpole-ppo", "--run-id", run_id, *NO_KAFKA)
    refused(result, says=f"Run id {run_id!r} already exists")
    assert (taken / "run.json").read_text() == "{}"  # the other run's files are untouched


def test_unknown_runs_are_one_line(ws: Workspace) -> None:
    state = ("--state-dir", str(ws.state_dir))
    refused(ws.run("status", "nope", *state), says="No run 'nope'")
    refused(ws.run("logs", "nope", *state), says="No run 'nope'")
    refused(ws.run("stop", "nope", *state), says="No run 'nope'")
    refused(ws.run("resume", "nope", *state), says="No run 'nope'")


def test_stack_status_exits_1_when_its_services_are_stopped(ws: Workspace) -> None:
    result = ws.run("stack", "status", "--cache-dir", str(ws.cwd / "empty-cache"))
    assert result.code == 1
    assert "stopped" in result.stdout


def test_stack_env_before_up_is_one_line(ws: Workspace) -> None:
    result = ws.run("stack", "env", "--cache-dir", str(ws.cwd / "empty-cache"))
    refused(result, says="coach-stream stack up")


@pytest.mark.parametrize(
    "args",
    [
        ["replay", "inspect", "some-run", *NO_KAFKA],
        ["replay", "export", "some-run", "--format", "avro", "--out", "x.avro", *NO_KAFKA],
    ],
)
def test_an_unreachable_broker_is_one_line_without_librdkafkas_own(
    console: Workspace, args: list[str]
) -> None:
    # exit 3: a service that did not answer (a script may retry), not bad input; librdkafka
    # logs from its own threads, so only a process of its own shows none of its lines leak
    refused(console.run(*args), says="Kafka at 127.0.0.1:1 did not answer", code=3)
    assert not (console.cwd / "x.avro").exists()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--preset", "cartpole-ppo"], "which needs experience acted by"),
        (["--preset", "nope"], "Unknown preset 'nope'"),
        (["--preset", "cartpole-dqn", "--run-id", "SOURCE"], "its own"),
        (["--preset", "cartpole-dqn"], "127.0.0.1:1"),
    ],
)
def test_bad_attach_input_is_refused_before_anything_starts(
    ws: Workspace, run_id: str, args: list[str], says: str
) -> None:
    args = [run_id if arg == "SOURCE" else arg for arg in args]
    refused(ws.run("attach", run_id, *args, *NO_KAFKA, "--state-dir", str(ws.state_dir)), says=says)
    assert_nothing_created(ws, run_id)


def test_an_invalid_source_run_id_is_refused(ws: Workspace) -> None:
    refused(ws.run("attach", "bad id!", "--preset", "cartpole-dqn", *NO_KAFKA), says="not valid")
    assert ws.run_dirs() == []


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["lunch", "cartpole-ppo"], "did you mean 'launch'?"),
        (["launch", "cartpole-ppo", "--workers", "abc"], "'--workers'"),
        (["launch", "cartpole-ppo", "--set", "ppo.no_such_key=1"], "Unknown key 'ppo.no_such_key'"),
    ],
)
def test_the_console_script_refuses_as_main_does(
    console: Workspace, ws: Workspace, args: list[str], says: str
) -> None:
    by_script = console.run(*args, *NO_KAFKA)
    refused(by_script, says=says)
    in_process = ws.run(*args, *NO_KAFKA)
    assert (in_process.code, in_process.stderr) == (by_script.code, by_script.stderr)
    assert console.run_dirs() == []
