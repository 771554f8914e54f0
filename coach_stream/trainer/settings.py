"""The trainer loop's settings: the run's end conditions, how it reads, publishes and logs.

Built once from the preset (``algorithms.common``) and passed to ``Trainer`` as is.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TrainerSettings:
    run_id: str
    target_return: float
    eval_episodes: int
    env_step_budget: int
    read_batch: int = 256
    read_timeout_s: float = 0.05
    checkpoint_every: int = 1
    keep_policies: int = 5
    keep_trainer_states: int = 3
    log_every_s: float = 1.0
    control_catchup_s: float = 2.0
    control_poll_s: float = 0.05  # how often the control topic is checked for evaluations
    refill: bool = False  # re-read the log behind the stored positions on resume (DQN)
    refill_idle_s: float = 30.0
    """A refill that reads nothing new for this long stops short (the topic was recreated,
    or the broker is unreachable) and the trainer goes on with what it has."""
