"""bench/zoo.py's table: medians over seeds, ratios either side of zero, small returns legible."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

ZOO_PATH = Path(__file__).resolve().parents[3] / "bench" / "zoo.py"


@pytest.fixture(scope="module")
def zoo() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_zoo", ZOO_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_zoo"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def line(preset: str, seed: int, value: float, reached: int | None) -> dict[str, object]:
    return {
        "bench": "zoo",
        "preset": preset,
        "seed": seed,
        "budget": 50_000,
        "return_at_budget": value,
        "env_steps_to_target": reached,
        "wall_s": 60.0 * seed,
    }


def test_ratio_is_at_least_one_when_as_good_either_side_of_zero(zoo: ModuleType) -> None:
    assert zoo.ratio(500.0, 500.0) == 1.0
    assert zoo.ratio(-150.0, -300.0) == 2.0  # a smaller cost is better
    assert zoo.ratio(-300.0, -150.0) == 0.5
    assert zoo.ratio(1.0, None) is None


def test_a_row_takes_the_median_and_counts_seeds_reaching_target(zoo: ModuleType) -> None:
    lines = [
        line("minigrid-ppo", 1, 0.97, 8192),
        line("minigrid-ppo", 2, 0.95, None),
        line("minigrid-ppo", 3, 0.96, 6144),
    ]
    rows = [r for r in zoo.table(lines).splitlines() if "minigrid-ppo" in r]
    assert len(rows) == 1
    cells = [c.strip() for c in rows[0].split("|")]
    assert cells[4] == "3 (1, 2, 3)"
    assert cells[5] == "0.96"  # two decimals below 10: 0.96 must not print as 1.0
    assert cells[9] == "2 of 3"
    assert cells[10] == "2.0 min"


def test_a_seed_run_again_replaces_its_earlier_line(zoo: ModuleType) -> None:
    lines = [
        line("pendulum-ppo", 1, -300.0, None),  # the preset before a change
        line("pendulum-ppo", 2, -250.0, None),
        line("pendulum-ppo", 1, -180.0, 70_000),  # the same seed after it
    ]
    rows = [r for r in zoo.table(lines).splitlines() if "pendulum-ppo" in r]
    cells = [c.strip() for c in rows[0].split("|")]
    assert cells[4] == "2 (1, 2)"
    assert cells[5] == "-215.0"
    assert cells[9] == "1 of 2"


def test_presets_without_runs_have_no_row(zoo: ModuleType) -> None:
    text = zoo.table([line("cartpole-ppo", 1, 500.0, 10_240)])
    assert "cartpole-ppo" in text and "acrobot-ppo" not in text
    assert "| 500.0 |" in text


def test_the_logs_give_the_curve_and_the_stale_steps(zoo: ModuleType, tmp_path: Path) -> None:
    evaluator, trainer = tmp_path / "evaluator.log", tmp_path / "trainer.log"
    evaluator.write_text(
        "2026-12-05 10:00:00 coach_stream.rollout starting\n"  # not an event: skipped
        '{"event": "evaluation", "time": 1.0, "env_steps": 512, "mean_return": -3.5}\n'
        '{"event": "evaluation", "time": 2.0, "env_steps": 1024, "mean_return": 12.25}\n'
        '{"event": "evaluation", "time": 3.0}\n'  # cut short by a kill: skipped
    )
    trainer.write_text(
        '{"time/env_steps": 512, "rollout/dropped_stale_steps": 0}\n'
        '{"time/env_steps": 1024, "rollout/dropped_stale_steps": 256}\n'
        '{"time/env_steps": 1100}\n'  # an event without the count: the last count stands
    )
    rounds = zoo.evaluations(evaluator)
    assert [(r["env_steps"], r["mean_return"]) for r in rounds] == [(512, -3.5), (1024, 12.25)]
    assert zoo.trainer_totals(trainer) == {"env_steps": 1024.0, "stale_steps": 256.0}
    assert zoo.trainer_totals(tmp_path / "missing.log") == {}


def test_a_run_launched_by_hand_is_recorded_from_its_folder_once_it_has_ended(
    zoo: ModuleType, tmp_path: Path
) -> None:
    run = tmp_path / "runs" / "hc-s1"
    (run / "logs").mkdir(parents=True)
    info = {"run_id": "hc-s1", "created_at_ms": 1_000_000, "ended_at_ms": None}
    (run / "run.json").write_text(json.dumps(info))
    row = next(r for r in zoo.ROWS if r.preset == "halfcheetah-sac")
    with pytest.raises(SystemExit, match="has not ended"):
        zoo.record(row, 1, 400_000, 9000.0, run)
    (run / "run.json").write_text(json.dumps(info | {"ended_at_ms": 4_600_000}))
    rounds = [(1_100, 100_000, 4000.0), (2_000, 300_000, 9100.0), (4_500, 400_000, 8900.0)]
    (run / "logs" / "evaluator.log").write_text(
        "not json\n"
        + "".join(
            json.dumps({"event": "evaluation", "time": t, "env_steps": s, "mean_return": r}) + "\n"
            for t, s, r in rounds
        )
    )
    progress = {"time/env_steps": 400_128, "rollout/dropped_stale_steps": 0}
    (run / "logs" / "trainer.log").write_text(json.dumps(progress) + "\n")
    line = zoo.record(row, 1, 400_000, 9000.0, run)
    assert line["return_at_budget"] == 8900.0 and line["last_eval_env_steps"] == 400_000
    assert line["env_steps_to_target"] == 300_000 and line["wall_s_to_target"] == 1000.0
    assert line["wall_s"] == 3600.0 and line["run_id"] == "hc-s1" and line["seed"] == 1
    assert line["published"] == 9000.0 and line["stale_steps_dropped"] == 0


def test_the_runs_folders_stay_in_the_state_dir_given(
    zoo: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run the bench does not see end (the machine's session ended) can still be recorded."""
    seen: list[Path] = []

    def fake_run_once(row: object, seed: int, budget: int, target: float, state: Path,
                      overrides: list[str]) -> dict[str, object]:  # fmt: skip
        seen.append(state)
        return line("cartpole-ppo", seed, 500.0, 1_000)

    monkeypatch.setattr(zoo, "run_once", fake_run_once)
    monkeypatch.setattr(zoo, "load_preset_target", lambda preset: 475.0)
    row = next(r for r in zoo.ROWS if r.preset == "cartpole-ppo")
    zoo.run_rows([row], [1, 2], quick=False, state_dir=tmp_path / "kept")
    assert seen == [tmp_path / "kept"] * 2
    zoo.run_rows([row], [3], quick=False)
    assert seen[-1] != tmp_path / "kept" and not seen[-1].exists()  # the default is removed


def test_a_run_stopped_short_of_its_budget_has_no_return_at_budget(
    zoo: ModuleType, tmp_path: Path
) -> None:
    """Its last round is kept as ``last_return``; the table neither counts it nor lets it
    replace the seed's complete line."""
    run = tmp_path / "runs" / "hc-s7"
    (run / "logs").mkdir(parents=True)
    info = {"run_id": "hc-s7", "state": "stopped", "created_at_ms": 0, "ended_at_ms": 60_000}
    (run / "run.json").write_text(json.dumps(info))
    event = {"event": "evaluation", "time": 50.0, "env_steps": 124_224, "mean_return": 6477.85}
    (run / "logs" / "evaluator.log").write_text(json.dumps(event) + "\n")
    row = next(r for r in zoo.ROWS if r.preset == "halfcheetah-sac")
    stopped = zoo.record(row, 7, 400_000, 9000.0, run)
    assert stopped["run_state"] == "stopped" and stopped["complete"] is False
    assert stopped["return_at_budget"] is None and stopped["last_return"] == 6477.85
    complete = line("halfcheetah-sac", 7, 8950.0, None) | {"complete": True}
    cells = [c.strip() for c in zoo.table([complete, stopped]).splitlines()[-1].split("|")]
    assert cells[4] == "1 (7)" and cells[5] == "8950.0"
    assert "halfcheetah-sac" not in zoo.table([stopped])
