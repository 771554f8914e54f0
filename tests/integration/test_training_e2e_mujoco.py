"""The MuJoCo presets on the real broker: ``halfcheetah-sac`` and ``halfcheetah-ppo`` start,
write HalfCheetah experience to Kafka and complete policy versions, launched as supervised
local processes like ``coach-stream launch`` does.

They are for real use (a million steps), so the run ends on a small env-step budget; the
presets are otherwise unchanged (SAC's 10k random steps before learning included).
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
    build_run_spec,
)
from coach_stream.orchestrators.launcher import follow, prepare_topics

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.mark.parametrize(
    ("preset", "budget", "overrides"),
    [
        # 10k uniform steps, then one gradient step per env step. The trainer reads only
        # while its samples-per-insert budget is nearly spent (32 steps' worth), and here 2
        # records (128 env steps) a read, so no read can jump the budget, however far the
        # workers are ahead. So before the read that passes 10.4k it has learned at least
        # 10,400 - 128 - 10,000 - 32 = 240 steps, whatever the load: a version per learn()
        # call of up to 32 steps (publish_every 8) makes at least 7, and 2 are asserted
        # (408 steps, version 13 beside two training runs). At most 400 steps: ~20 s idle.
        (
            "halfcheetah-sac",
            10_400,
            ("sac.publish_every=8", "trainer.read_batch=2"),
        ),
        # 2 workers x 256 steps per version: 8 versions (at least 2 asserted)
        ("halfcheetah-ppo", 4_096, ()),
    ],
)
def test_halfcheetah_preset_produces_experience_and_completes_versions(
    orchestrator: LocalOrchestrator,
    kafka_bootstrap: str,
    unique_name: str,
    tmp_path: Path,
    preset: str,
    budget: int,
    overrides: tuple[str, ...],
) -> None:
    run_id = f"e2e-{preset}-{unique_name}"
    settings = LaunchSettings(
        preset=preset,
        run_id=run_id,
        workers=2,
        kafka_bootstrap=kafka_bootstrap,
        checkpoints=(tmp_path / "ckpt").as_uri(),
        overrides=(f"env_step_budget={budget}", *overrides),
        evaluator=False,  # 20 greedy episodes of 1000 steps each would only cost CPU here
    )
    prepare_topics(settings)
    orchestrator.submit(build_run_spec(settings))
    outcome = follow(orchestrator, run_id, timeout_s=600.0)
    lines = "\n".join(list(orchestrator.logs(run_id))[-60:])
    finished = outcome.finished
    assert finished is not None and finished["reason"] == "budget_exhausted", lines
    assert finished["final_version"] >= 2 and finished["env_steps"] >= budget, lines
    chunk = first_chunk(kafka_bootstrap, run_id)
    assert chunk.observations.dtype == np.float64 and chunk.observations.shape[1:] == (17,)
    assert chunk.actions.dtype == np.float32 and chunk.actions.shape[1:] == (6,)
    assert load_preset(preset).env_id == "HalfCheetah-v5"
    print(
        f"{preset}: {outcome.wall_s:.1f} s to {finished['env_steps']} env steps, "
        f"{finished['updates']} updates, final version {finished['final_version']}"
    )
