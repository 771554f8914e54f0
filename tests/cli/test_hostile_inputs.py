"""Hostile inputs that need no service (issue 27): each was accepted and then broke (or
ended in a traceback); each is now refused in one line, exit 2, with nothing created."""

from __future__ import annotations

import json
import shlex
import shutil
import socket

import pytest
from cli_helpers import Workspace, processes_mentioning, refused

from coach_stream.stack.kafka import KAFKA_VERSION

NO_KAFKA = ("--kafka", "127.0.0.1:1")


def _nothing_created(ws: Workspace, run_id: str) -> None:
    assert ws.run_dirs() == []
    assert not (ws.state_dir / "checkpoints").exists()
    assert processes_mentioning(run_id) == []


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["cartpole-dqn", "--set", "env_id=Pendulum-v1"], "'dqn' needs discrete actions"),
        (["cartpole-ppo", "--set", "ppo.learning_rate=.inf"], "ppo.learning_rate"),
        (["cartpole-ppo", "--set", "ppo.learning_rate=.nan"], "ppo.learning_rate"),
        (["cartpole-ppo", "--set", "network.hidden_sizes=[0]"], "network.hidden_sizes"),
        (["cartpole-ppo", "--run-id", ""], "Run id '' is not valid"),
    ],
)
def test_accepted_then_broken_input_is_refused_up_front(
    ws: Workspace, run_id: str, args: list[str], says: str
) -> None:
    extra = [] if "--run-id" in args else ["--run-id", run_id]
    result = ws.launch(*args, *extra, *NO_KAFKA)
    refused(result, says=says)
    _nothing_created(ws, run_id)


def test_a_binary_preset_file_is_one_line(ws: Workspace, run_id: str) -> None:
    binary = ws.cwd / "binary.yaml"
    binary.write_bytes(bytes(range(256)) * 4)
    refused(ws.launch(str(binary), "--run-id", run_id, *NO_KAFKA), says="is not UTF-8 text")
    _nothing_created(ws, run_id)


def test_a_directory_given_as_preset_says_so(ws: Workspace, run_id: str) -> None:
    folder = ws.cwd / "presets"
    folder.mkdir()
    refused(ws.launch(str(folder), "--run-id", run_id, *NO_KAFKA), says="is a directory")
    _nothing_created(ws, run_id)


@pytest.mark.parametrize(
    "args",
    [
        ["launch", "cartpole-ppo", "--tensorboard", "{blocked}/tb", "--state-dir", "s", *NO_KAFKA],
        ["status", "some-run", "--tensorboard", "{blocked}/tb", "--state-dir", "s", *NO_KAFKA],
        ["report", "some-run", "--out", "{blocked}/sub/r.png", *NO_KAFKA],
    ],
)
def test_output_into_an_unwritable_path_is_one_line(ws: Workspace, args: list[str]) -> None:
    blocked = ws.cwd / "a-file"  # a path under a file cannot be created, even by root
    blocked.write_text("x")
    result = ws.run(*[a.format(blocked=blocked) for a in args])
    refused(result, says=f"{blocked} is not a writable directory")
    assert sorted(p.name for p in ws.cwd.iterdir() if p.name != "no-stack-cache") == ["a-file"]


@pytest.mark.parametrize(
    ("variables", "says"),
    [
        ({"NOMAD_ADDR": "https://127.0.0.1:4646", "NOMAD_CACERT": "/no/such/ca.pem"}, "CACERT"),
        ({"NOMAD_ADDR": "http://127.0.0.1:notaport"}, "is not an http(s)://HOST:PORT"),
        ({"NOMAD_ADDR": "ftp://nomad.example"}, "is not an http(s)://HOST:PORT"),
    ],
)
@pytest.mark.parametrize("command", ["status", "stop", "logs"])
def test_bad_nomad_settings_are_bad_input(
    ws: Workspace, variables: dict[str, str], says: str, command: str
) -> None:
    ws.env.update(variables)
    result = ws.run(command, "some-run", "--orchestrator", "nomad")
    refused(result, says=says)  # exit 2: nothing a retry could fix


@pytest.mark.skipif(shutil.which("java") is None, reason="the Kafka broker needs Java")
@pytest.mark.parametrize("held", ["broker_port", "controller_port"])
def test_stack_up_with_a_kept_port_taken_says_what_frees_it(ws: Workspace, held: str) -> None:
    """A stack that already ran keeps its Kafka ports (with its topics): a plain down/up
    would pick the same port again, so the hint must be `down --purge` (or stopping the
    holder, or another cache directory), and nothing is started."""
    cache = ws.cwd / "stack cache"  # a space: the hint's command must quote it
    libs = cache / "kafka" / KAFKA_VERSION / "libs"
    libs.mkdir(parents=True)
    (libs / ".complete").touch()  # provisioned: nothing is fetched
    data = cache / "stack" / "kafka" / "data"
    data.mkdir(parents=True)
    (data / "meta.properties").touch()  # formatted: the kept ports are required
    with socket.socket() as holder, socket.socket() as other:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        other.bind(("127.0.0.1", 0))  # the other kept port: free again once closed
        free = "controller_port" if held == "broker_port" else "broker_port"
        ports = {held: holder.getsockname()[1], free: other.getsockname()[1]}
        other.close()
        state = cache / "stack" / "state.json"
        state.write_text(json.dumps({"kafka": ports}))
        result = ws.run("stack", "up", "--no-gcs", "--cache-dir", str(cache))
    refused(result, says=f"Port 127.0.0.1:{ports[held]} needed by the Kafka", code=3)
    quoted = shlex.quote(str(cache))
    assert (
        f"`coach-stream stack down --purge --cache-dir {quoted} && coach-stream stack up "
        f"--cache-dir {quoted}`" in result.stderr
    )
    assert "stack down &&" not in result.stderr  # the hint that kept the same ports
    assert json.loads(state.read_text()) == {"kafka": ports}  # nothing was started
    assert processes_mentioning(str(cache)) == []
