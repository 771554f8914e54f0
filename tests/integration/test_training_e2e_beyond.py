"""End-to-end runs of the algorithms beyond CartPole's PPO/DQN on the real broker:
SAC on Pendulum (continuous actions), IMPALA with V-trace on CartPole (ASYNC on-policy) and
PPO on MiniGrid from uint8 frames (image observations), launched as supervised local
processes like ``coach-stream launch`` does.

The IMPALA test also runs SYNC PPO with the same workers and reports both wall times
(``-s`` shows them); it asserts only what holds on any machine: both solve.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from e2e_runs import first_chunk

from coach_stream.config import load_preset
from coach_stream.orchestrators import (
    LaunchSettings,
    LocalOrchestrator,
    RunState,
    build_run_spec,
)
from coach_stream.orchestrators.launcher import RunOutcome, follow, prepare_topics
from coach_stream.orchestrators.plan import TaskState

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

RUN_TIMEOUT_S = 900.0


def run_to_end(
    orchestrator: LocalOrchestrator, preset: str, run_id: str, kafka: str, tmp_path: Path
) -> RunOutcome:
    settings = LaunchSettings(
        preset=preset,
        run_id=run_id,
        workers=2,
        kafka_bootstrap=kafka,
        checkpoints=(tmp_path / f"ckpt-{run_id}").as_uri(),
    )
    prepare_topics(settings)
    orchestrator.submit(build_run_spec(settings))
    outcome = follow(
        orchestrator,
        run_id,
        eval_episodes=load_preset(preset).eval_episodes,
        timeout_s=RUN_TIMEOUT_S,
    )
    lines = "\n".join(list(orchestrator.logs(run_id))[-60:])
    finished = outcome.finished
    assert finished is not None and outcome.solved, lines
    assert finished["eval_mean_return"] >= load_preset(preset).target_return
    assert outcome.state is RunState.COMPLETE
    statuses = {s.name: s for s in orchestrator.status(run_id)}
    assert statuses["trainer"].state is TaskState.COMPLETE
    return outcome


def test_pendulum_sac_async_solves(
    orchestrator: LocalOrchestrator, kafka_bootstrap: str, unique_name: str, tmp_path: Path
) -> None:
    outcome = run_to_end(
        orchestrator, "pendulum-sac", f"e2e-sac-{unique_name}", kafka_bootstrap, tmp_path
    )
    assert outcome.finished is not None and outcome.finished["eval_mean_return"] >= -200
    print(f"pendulum-sac: {outcome.wall_s:.1f} s, {outcome.finished['env_steps']} env steps")


def test_cartpole_impala_async_solves_and_is_timed_against_sync_ppo(
    orchestrator: LocalOrchestrator, kafka_bootstrap: str, unique_name: str, tmp_path: Path
) -> None:
    impala = run_to_end(
        orchestrator, "cartpole-impala", f"e2e-impala-{unique_name}", kafka_bootstrap, tmp_path
    )
    lag = impala.progress.figure("train/vtrace/lag_mean")
    ppo = run_to_end(
        orchestrator, "cartpole-ppo", f"e2e-ppo-vs-{unique_name}", kafka_bootstrap, tmp_path
    )
    assert impala.finished is not None and ppo.finished is not None
    print(
        f"cartpole-impala: {impala.wall_s:.1f} s, {impala.finished['env_steps']} env steps, "
        f"policy lag mean {lag}; cartpole-ppo (SYNC, same 2 workers): {ppo.wall_s:.1f} s, "
        f"{ppo.finished['env_steps']} env steps"
    )


def test_minigrid_ppo_solves_from_uint8_frames(
    orchestrator: LocalOrchestrator, kafka_bootstrap: str, unique_name: str, tmp_path: Path
) -> None:
    run_id = f"e2e-minigrid-{unique_name}"
    outcome = run_to_end(orchestrator, "minigrid-ppo", run_id, kafka_bootstrap, tmp_path)
    assert outcome.finished is not None
    chunk = first_chunk(kafka_bootstrap, run_id)  # written zstd-compressed, read back as is
    assert chunk.observations.dtype == np.uint8 and chunk.observations.shape[1:] == (7, 7, 3)
    print(f"minigrid-ppo: {outcome.wall_s:.1f} s, {outcome.finished['env_steps']} env steps")
