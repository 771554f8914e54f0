"""Long replay work reports its progress: a bar on a terminal's stderr, nothing elsewhere;
offline training advances it once per gradient step."""

from __future__ import annotations

import numpy as np
import pytest

from coach_stream.envs import probe_shape
from coach_stream.replay.offline import OfflineConfig
from coach_stream.replay.offline.train import Dataset, train_offline
from coach_stream.replay.progress import records_progress


def test_no_bar_off_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    with records_progress("export avro", 10, unit="records") as advance:
        advance(4)
        advance(6)
    assert capsys.readouterr().err == ""  # CI logs get no control characters


def test_offline_training_advances_once_per_gradient_step() -> None:
    rng = np.random.default_rng(0)
    n = 64
    data = Dataset(
        obs=rng.normal(size=(n, 4)).astype(np.float32),
        next_obs=rng.normal(size=(n, 4)).astype(np.float32),
        actions=rng.integers(0, 2, n).astype(np.int64),
        rewards=np.ones(n, np.float32),
        terminated=np.zeros(n, np.bool_),
    )
    steps: list[int] = []
    published: list[int] = []
    train_offline(
        data,
        "bc",
        probe_shape("CartPole-v1"),
        OfflineConfig(steps=7, batch_size=8),
        seed=0,
        publish_every=3,
        publish=lambda step, _algorithm: published.append(step),
        on_step=steps.append,
    )
    assert steps == [1] * 7
    assert published == [3, 6, 7]
