"""Two data-parallel trainer ranks on the real broker (``launch --trainers 2``): the run
solves, each rank reads its own partition, both count the same env steps, rank 0 alone
announces and stores, and ``status`` shows both ranks."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from coach_stream.config import load_preset
from coach_stream.observability.fold import parse_event
from coach_stream.orchestrators import LaunchSettings, LocalOrchestrator, build_run_spec
from coach_stream.orchestrators.launcher import follow, prepare_topics
from coach_stream.orchestrators.plan import TaskState

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


def _events(log: Path, kind: str) -> list[dict[str, object]]:
    events = (parse_event(line) for line in log.read_text().splitlines())
    return [e for e in events if e is not None and e["event"] == kind]


def test_cartpole_ppo_with_two_trainer_ranks_solves_on_split_partitions(
    orchestrator: LocalOrchestrator, kafka_bootstrap: str, tmp_path: Path
) -> None:
    run_id = f"dp-{uuid.uuid4().hex[:10]}"  # a fresh run on the session's broker
    settings = LaunchSettings(
        preset="cartpole-ppo",
        run_id=run_id,
        workers=2,
        trainers=2,
        kafka_bootstrap=kafka_bootstrap,
        checkpoints=(tmp_path / "ckpt").as_uri(),
    )
    prepare_topics(settings)
    orchestrator.submit(build_run_spec(settings))
    outcome = follow(orchestrator, run_id, eval_episodes=20, timeout_s=900)
    tail = "\n".join(list(orchestrator.logs(run_id))[-60:])
    assert outcome.solved and outcome.finished is not None, tail
    assert outcome.finished["eval_mean_return"] >= load_preset("cartpole-ppo").target_return
    statuses = {s.name: s for s in orchestrator.status(run_id)}
    assert statuses["trainer"].state is TaskState.COMPLETE, tail
    assert statuses["trainer-1"].state is TaskState.COMPLETE, tail

    logs = orchestrator.run_dir(run_id).logs_dir
    rank0 = _events(logs / "trainer.log", "progress")
    rank1 = _events(logs / "trainer-1.log", "progress")
    assert rank0 and rank1, tail
    assert {json.dumps(sorted(e["rollout/positions"])) for e in rank0} == {'["0"]'}  # type: ignore[arg-type]
    assert {json.dumps(sorted(e["rollout/positions"])) for e in rank1} == {'["1"]'}  # type: ignore[arg-type]
    finished1 = _events(logs / "trainer-1.log", "finished")
    assert finished1 and finished1[-1]["env_steps"] == outcome.finished["env_steps"]
    assert finished1[-1]["checkpoint_uri"] is None  # rank 1 stored and announced nothing
    for finished in (outcome.finished, finished1[-1]):
        assert finished["duplicate_chunks"] == finished["chunk_gaps"] == 0, finished
    # every policy version in the store is rank 0's: one file per announced version
    stored = sorted((tmp_path / "ckpt" / "runs" / run_id / "policies").glob("*.pt"))
    assert stored and stored[-1].stem == f"{outcome.finished['final_version']:08d}"
