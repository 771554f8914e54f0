"""The run spec a preset becomes: which processes, with which command lines."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from coach_stream.errors import ConfigError
from coach_stream.orchestrators import LaunchSettings, build_run_spec, new_run_id


def settings(**changes: object) -> LaunchSettings:
    base: dict[str, object] = {
        "preset": "cartpole-ppo",
        "run_id": "r1",
        "workers": 2,
        "kafka_bootstrap": "127.0.0.1:9092",
        "checkpoints": "file:///tmp/ckpt",
    }
    base.update(changes)
    return LaunchSettings(**base)  # type: ignore[arg-type]


def test_a_trainer_n_workers_and_an_evaluator_with_distinct_worker_ids() -> None:
    spec = build_run_spec(settings(workers=3, seed=7, overrides=("ppo.learning_rate=0.01",)))

    assert [t.name for t in spec.tasks] == [
        "trainer", "rollout-0", "rollout-1", "rollout-2", "evaluator",
    ]  # fmt: skip
    assert [t.group for t in spec.tasks] == [
        "trainer",
        "rollout",
        "rollout",
        "rollout",
        "evaluator",
    ]
    trainer, *workers, evaluator = spec.tasks
    assert trainer.argv[:5] == (sys.executable, "-m", "coach_stream.cli.main", "train", "--preset")
    assert trainer.argv[-2:] == ("--workers", "3")
    for task in spec.tasks:
        argv = list(task.argv)
        assert argv[argv.index("--run-id") + 1] == "r1"
        assert argv[argv.index("--kafka") + 1] == "127.0.0.1:9092"
        assert argv[argv.index("--checkpoints") + 1] == "file:///tmp/ckpt"
        assert argv[argv.index("--seed") + 1] == "7"
        assert argv[argv.index("--set") + 1] == "ppo.learning_rate=0.01"
        assert "--gcs-emulator" not in argv
    ids = [list(t.argv)[list(t.argv).index("--worker-id") + 1] for t in (*workers, evaluator)]
    assert ids == ["0", "1", "2", "3"]
    assert "--evaluator" in evaluator.argv and "--evaluator" not in workers[0].argv
    assert workers[0].env["OMP_NUM_THREADS"] == "1"


def test_gcs_emulator_and_worker_restarts_are_passed_through() -> None:
    spec = build_run_spec(
        settings(checkpoints="gs://b/p", gcs_emulator="http://127.0.0.1:1", restart_workers=False)
    )
    for task in spec.tasks:
        assert list(task.argv)[list(task.argv).index("--gcs-emulator") + 1] == "http://127.0.0.1:1"
    assert [t.restart for t in spec.tasks] == [True, False, False, True]


def test_a_preset_path_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "mine.yaml").write_text("name: mine\n")
    monkeypatch.chdir(tmp_path)
    trainer = build_run_spec(settings(preset="mine.yaml")).tasks[0]
    assert list(trainer.argv)[list(trainer.argv).index("--preset") + 1] == str(
        tmp_path / "mine.yaml"
    )


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"run_id": "a.b"}, "Run id 'a.b' is not valid"),
        ({"run_id": ""}, "is not valid"),
        ({"workers": 0}, "--workers 0 is out of range"),
        ({"kafka_bootstrap": ""}, "No Kafka bootstrap servers"),
        ({"checkpoints": "s3://x"}, "not a file:// or gs:// URL"),
    ],
)
def test_bad_settings_are_one_clear_error(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        settings(**changes)


def test_new_run_ids_are_valid_and_unique() -> None:
    ids = {new_run_id("cartpole.ppo v2") for _ in range(20)}
    assert len(ids) == 20
    for run_id in ids:
        assert run_id.startswith("cartpole-ppo-v2-")
        settings(run_id=run_id)  # accepted


def test_a_shadow_learner_is_a_trainer_reading_the_source_and_an_evaluator() -> None:
    spec = build_run_spec(settings(workers=3, experience_from="source-run"))

    assert [t.name for t in spec.tasks] == ["trainer", "evaluator"]
    trainer, evaluator = spec.tasks
    assert trainer.argv[-4:] == ("--workers", "3", "--experience-from", "source-run")
    assert "--experience-from" not in evaluator.argv  # it evaluates the shadow's own versions
    with pytest.raises(ConfigError, match="not valid"):
        settings(experience_from="bad id!")
