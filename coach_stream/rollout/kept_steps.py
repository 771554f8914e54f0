"""The steps a chunker keeps to write later, and what it needs of them when it does.

Where rows are small, ``Chunker.add_encoded`` does not write a step into its columns as the
step comes: it keeps the step's arrays (``KeptSteps``), and up to 128 steps are written in
one compiled call (``rollout.compiled.record_steps``), their chunks closed after the steps
they would have closed at. Run one step at a time, between env steps, the writes and the
closes ran cold: on 8 CartPole envs they cost ~49 us of CPU a vector step against ~20 kept
(docs/performance.md, "Steps kept, written together").
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from coach_stream.core import Action
from coach_stream.errors import ConfigError


class KeptSteps:
    """The steps ``add_encoded`` kept to write later: each one's arrays as they came.

    Kept, not copied: a step's arrays are the caller's to give away. Gymnasium's vector
    envs hand back new ones each step (``make_vector_env`` asks for copies of the
    observations; rewards and done flags are always copied), the actors make new ones, and
    an info's ``final_obs`` is what the ended env's step returned."""

    def __init__(self) -> None:
        self.obs: list[Any] = []  # the observations each step was taken in, then the last next
        self.actions: list[Any] = []
        self.log_probs: list[Any] = []
        self.rewards: list[Any] = []
        self.terminated: list[Any] = []
        self.truncated: list[Any] = []
        self.infos: dict[int, dict[str, Any]] = {}  # the steps whose infos hold final_obs

    def __len__(self) -> int:
        return len(self.rewards)

    def keep(
        self, obs: Any, action: Action, rewards: Any, terminated: Any, truncated: Any,
        next_obs: Any, infos: dict[str, Any],
    ) -> None:  # fmt: skip
        """Keep one step (taken in ``obs``)."""
        if not self.obs:
            self.obs.append(obs)
        self.obs.append(next_obs)
        self.actions.append(action.actions)
        self.log_probs.append(action.log_probs)
        self.rewards.append(rewards)
        self.terminated.append(terminated)
        self.truncated.append(truncated)
        if "final_obs" in infos:
            self.infos[len(self.rewards) - 1] = infos

    def columns(
        self, obs_dtype: np.dtype[Any], action_dtype: np.dtype[Any], num_envs: int
    ) -> tuple[npt.NDArray[Any], tuple[npt.NDArray[Any], ...]]:
        """(every observation taken, then the last next one: (steps + 1, envs, ...); the
        entries ``record_steps`` writes, one row per step, then env)."""
        count = len(self)
        taken = stacked(self.obs, obs_dtype, num_envs)
        log_probs = (
            np.zeros((count, num_envs), np.float32) if self.log_probs[0] is None
            else stacked(self.log_probs, np.float32, num_envs)
        )  # fmt: skip
        actions = stacked(self.actions, action_dtype, num_envs)
        steps = (
            taken[:count].view(np.uint8).reshape(count, num_envs, -1),
            actions.view(np.uint8).reshape(count, num_envs, -1),
            stacked(self.rewards, np.float64, num_envs),
            stacked(self.terminated, np.bool_, num_envs),
            stacked(self.truncated, np.bool_, num_envs),
            log_probs,
        )
        return taken, steps


def stacked(arrays: list[Any], dtype: Any, num_envs: int) -> npt.NDArray[Any]:
    """``np.stack(arrays)`` in ``dtype`` (cast as an assignment casts): (steps, envs, ...).
    One ``concatenate``: ``np.stack`` took ~1.5 us an array in Python, 33 arrays a field."""
    joined = np.concatenate(arrays, axis=0, dtype=dtype, casting="unsafe")
    return joined.reshape(len(arrays), num_envs, *joined.shape[1:])


def bootstrap_rows(
    closed: tuple[npt.NDArray[Any], ...], at_step: npt.NDArray[np.int64],
    taken: npt.NDArray[Any], infos: dict[int, dict[str, Any]], dtype: np.dtype[Any],
) -> npt.NDArray[Any]:  # fmt: skip
    """The bootstrap rows of the chunks ``record_steps`` closed (``closed``: its envs, ...,
    ended; ``at_step``: the step each close followed): an ended episode's final
    observation, from that step's info, else the observation after the chunk's last step
    (``taken``: ``KeptSteps.columns``')."""
    envs, ended = closed[0], closed[4]
    bootstrap = np.asarray(taken[at_step + 1, envs], dtype=dtype)
    for c in np.flatnonzero(ended).tolist():
        env, info = int(envs[c]), infos.get(int(at_step[c]), {})
        final_obs, has_final = info.get("final_obs"), info.get("_final_obs")
        if final_obs is None or has_final is None or not has_final[env]:
            done = np.zeros(taken.shape[1], np.bool_)
            done[env] = True
            final_observations(done, info)  # says which: the env, and the fix
        bootstrap[c] = final_obs[env]  # type: ignore[index]
    return bootstrap


def final_observations(done: npt.NDArray[Any], infos: dict[str, Any]) -> npt.NDArray[Any]:
    """``infos["final_obs"]``, checked to hold one for every env whose episode ended.

    Without it the bootstrap row of an ended episode would be the next episode's reset
    observation: a wrong terminal value for every truncated episode, silently.
    """
    final_obs, has_final = infos.get("final_obs"), infos.get("_final_obs")
    if final_obs is None or has_final is None or not np.all(np.asarray(has_final)[done]):
        envs = np.flatnonzero(done).tolist()
        raise ConfigError(
            f"env(s) {envs} ended an episode but the vector env's step info has no "
            '"final_obs" for them; build it with autoreset_mode=AutoresetMode.SAME_STEP '
            "(coach_stream.envs.make_vector_env does) and keep wrappers from dropping that "
            "info."
        )
    return final_obs  # type: ignore[no-any-return]
