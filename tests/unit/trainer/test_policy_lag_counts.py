"""The trainer counts the chunks it reads per policy lag in each progress event
(``rollout/policy_lag_counts``): ``coach-stream report`` sums them into its histogram."""

from __future__ import annotations

from collections import Counter
from typing import Any

from coach_stream.config import load_preset


def test_every_chunk_read_is_counted_once_under_its_lag(in_process_run: Any) -> None:
    preset = load_preset("cartpole-ppo", ["trainer.log_every_s=1e-9"])  # a progress per step
    run = in_process_run(preset, workers=2, evaluator=False)
    run.start()
    run.rollouts[0].act_share()
    run.rollouts[1].act_share()  # version 0's quota
    while run.trainer.version == 0:
        run.trainer.iterate()
    late = run.rollouts[1]
    late.act_share()  # still acting with version 0, read when the trainer has version 1
    while not run.trainer.reader.at_end():
        run.trainer.iterate()
    run.trainer.iterate()  # one more progress event after the last chunk

    total: Counter[int] = Counter()
    for event in run.trainer_events.of("progress"):
        counts = event["rollout/policy_lag_counts"]
        total.update(counts)
        if counts:  # the interval's mean is the counts' mean
            mean = sum(lag * n for lag, n in counts.items()) / sum(counts.values())
            assert event["rollout/policy_lag_mean"] == mean
        else:
            assert event["rollout/policy_lag_mean"] is None
    written = sum(worker.chunks_written for worker in run.rollouts)
    assert sum(total.values()) == written  # each chunk once, in the interval it was read
    assert set(total) == {0, 1}
    assert total[1] > 0  # the late share, one version behind
    assert total[1] == run.trainer.dropped_stale  # SYNC drops exactly the chunks behind
