"""Hostile inputs that need no service (issue 27): each was accepted and then broke (or
ended in a traceback); each is now refused in one line, exit 2, with nothing created."""

from __future__ import annotations

import pytest
from cli_helpers import Workspace, processes_mentioning, refused

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
