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
