"""A Minari dataset (arrow storage), loadable with ``minari.load_dataset``, episodes intact.

Chunks are joined back into whole episodes per ``(worker_id, env_index)``: an episode's
observations are its chunks' rows without each chunk's bootstrap row, plus the last
chunk's final observation (Minari's T+1 convention). Episodes that began before the range
or were still open at its end, or whose chunks do not follow each other (a gap), cannot be
whole and are left out and counted. Episodes are flushed to the dataset as they end, so
memory holds only the open episodes, one per environment.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from coach_stream.codec.columns import ChunkColumns
from coach_stream.errors import ConfigError
from coach_stream.replay.batches import ChunkBatch

_FLUSH = 64  # episodes per update_episodes call


class _Open:
    def __init__(self) -> None:
        self.obs: list[Any] = []
        self.actions: list[Any] = []
        self.rewards: list[Any] = []
        self.terminated: list[Any] = []
        self.truncated: list[Any] = []
        self.steps = 0


class MinariExporter:
    """``root``: the datasets directory (``MINARI_DATASETS_PATH``); the dataset goes to
    ``root/<dataset_id>``. Each batch is checked against ``env_id``'s spaces before it is
    written: data recorded in another environment is refused in one sentence."""

    def __init__(self, root: Path, dataset_id: str, env_id: str | None, description: str) -> None:
        from minari.dataset.minari_storage import MinariStorage
        from minari.namespace import create_namespace, list_local_namespaces
        from minari.utils import _generate_dataset_metadata, parse_dataset_id

        if env_id is None:
            raise ConfigError(
                "A Minari dataset records its environment; pass --env ENV_ID (e.g. CartPole-v1)."
            )
        try:
            spec = gym.spec(env_id)
            env = gym.make(env_id)
        except gym.error.Error as error:
            raise ConfigError(
                f"Cannot create environment {env_id!r} ({error}); check --env."
            ) from error
        try:
            namespace, _name, _version = parse_dataset_id(dataset_id)
        except Exception as error:  # minari raises ValueError or its own errors
            raise ConfigError(
                f"Dataset id {dataset_id!r} is not valid for Minari ({error}); use a form like "
                "coach-stream/my-run-v0."
            ) from error
        # Absolute: minari joins a relative data path onto itself (data/rel/data/0).
        root = root.absolute()
        self.root, self.dataset_id, self.env_id = root, dataset_id, env_id
        self.observation_space, self.action_space = env.observation_space, env.action_space
        import os

        os.environ["MINARI_DATASETS_PATH"] = str(root)  # minari resolves namespaces through it
        path = root / dataset_id / "data"
        if path.exists():
            raise ConfigError(
                f"Dataset {path} exists already; choose another --out or --dataset-id."
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        if namespace is not None and namespace not in list_local_namespaces():
            create_namespace(namespace)
        self.storage = MinariStorage.new(
            path,
            observation_space=env.observation_space,
            action_space=env.action_space,
            env_spec=spec,
            data_format="arrow",
        )
        with warnings.catch_warnings():
            # minari warns about unset optional metadata (author email, eval env): noise
            # on the stderr whose last line scripts read as the cause of a failure.
            warnings.simplefilter("ignore", UserWarning)
            metadata = _generate_dataset_metadata(
                dataset_id,
                spec,
                None,
                "coach-stream replay",
                None,
                None,
                None,
                None,
                None,
                None,
                100,
                description,
                None,
            )
        self.storage.update_metadata(metadata)
        env.close()
        self._open: dict[tuple[int, int], _Open] = {}
        self._done: list[Any] = []
        self.episodes = 0
        self.steps = 0
        self.incomplete = 0

    def write(self, batch: ChunkBatch) -> None:
        from minari.data_collector import EpisodeBuffer

        c = batch.columns
        self._check_fits(c)
        step_end = np.cumsum(c.steps)
        obs_end = step_end + np.arange(1, len(c) + 1)
        rows = zip(
            c.worker_id.tolist(),
            c.env_index.tolist(),
            c.first_step.tolist(),
            c.steps.tolist(),
            step_end.tolist(),
            obs_end.tolist(),
            strict=True,
        )
        for worker, env, first_step, steps, s_end, o_end in rows:
            key = (worker, env)
            episode = self._open.get(key)
            if episode is None or episode.steps != first_step:
                if episode is not None:
                    self.incomplete += 1  # a gap: the open episode cannot be whole
                if first_step != 0:
                    self._open.pop(key, None)
                    continue  # began before the range (or after a gap)
                episode = self._open[key] = _Open()
            s0, o0 = s_end - steps, o_end - steps - 1
            episode.obs.append(c.observations[o0 : o_end - 1])
            episode.actions.append(c.actions[s0:s_end])
            episode.rewards.append(c.rewards[s0:s_end])
            episode.terminated.append(c.terminated[s0:s_end])
            episode.truncated.append(c.truncated[s0:s_end])
            episode.steps += steps
            ended = steps > 0 and bool(c.terminated[s_end - 1] or c.truncated[s_end - 1])
            if ended:
                del self._open[key]
                self._done.append(
                    EpisodeBuffer(
                        observations=np.concatenate(
                            [*episode.obs, c.observations[o_end - 1 : o_end]]
                        ),
                        actions=np.concatenate(episode.actions),
                        rewards=np.concatenate(episode.rewards),
                        terminations=np.concatenate(episode.terminated),
                        truncations=np.concatenate(episode.truncated),
                    )
                )
                self.steps += episode.steps
                if len(self._done) >= _FLUSH:
                    self._flush()

    def _check_fits(self, c: ChunkColumns) -> None:
        """The batch's observations and actions fit the environment's spaces (``--env``)."""
        obs, actions = self.observation_space, self.action_space
        found: str | None = None
        if obs.shape is not None and c.observations.shape[1:] != obs.shape:
            found = f"observations of shape {c.observations.shape[1:]} (its: {obs.shape})"
        elif isinstance(actions, gym.spaces.Discrete):
            integral = np.issubdtype(c.actions.dtype, np.integer)
            low, high = int(actions.start), int(actions.start + actions.n)
            if c.actions.ndim != 1 or not integral:
                found = f"actions of shape {c.actions.shape[1:]} and dtype {c.actions.dtype} "
                found += f"(its: discrete, {low}..{high - 1})"
            elif len(c.actions) and (c.actions.min() < low or c.actions.max() >= high):
                found = f"actions {c.actions.min()}..{c.actions.max()} (its: {low}..{high - 1})"
        elif actions.shape is not None and c.actions.shape[1:] != actions.shape:
            found = f"actions of shape {c.actions.shape[1:]} (its: {actions.shape})"
        if found is not None:
            raise ConfigError(
                f"The recorded data does not fit --env {self.env_id}: {found}; pass the "
                "environment the run was recorded in."
            )

    def _flush(self) -> None:
        if self._done:
            self.storage.update_episodes(self._done)
            self.episodes += len(self._done)
            self._done = []

    def close(self) -> dict[str, int]:
        self._flush()
        self.incomplete += len(self._open)
        self._open.clear()
        return {"episodes": self.episodes, "steps": self.steps, "incomplete": self.incomplete}
