"""The chunker's compiled step writes (``rollout.compiled``) cut the same chunks as its
numpy writes: every field of every chunk, for flat and frame observations, discrete and
continuous actions, with and without behaviour columns, episodes ending at any step."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import numpy as np
import pytest
from chunker_steps import KINDS, random_steps

from coach_stream.core import Action, ExperienceChunk
from coach_stream.rollout import chunker as chunker_module
from coach_stream.rollout.chunker import Chunker


def _chunks(
    kind: str, behaviour: bool, compiled: bool, num_envs: int, chunk_steps: int, seed: int
) -> list[ExperienceChunk]:
    obs_shape, obs_dtype, action_shape, action_dtype = KINDS[kind]
    chunker = Chunker("r", 2, num_envs, chunk_steps, obs_shape, np.dtype(obs_dtype), behaviour,
                      action_shape, action_dtype, compiled=compiled)  # fmt: skip
    assert (chunker._record is not None) == compiled
    steps = random_steps(kind, num_envs, behaviour, seed)
    chunker.start(next(steps), version=5)
    out: list[ExperienceChunk] = []
    for i, step in enumerate(steps):
        out += chunker.add(*step)
        if i == 41:
            out += chunker.flush()  # a new policy version
    return out + chunker.flush()


@pytest.mark.parametrize("kind", list(KINDS)[:3])
@pytest.mark.parametrize("behaviour", [True, False])
@pytest.mark.parametrize(("num_envs", "chunk_steps"), [(1, 4), (5, 7), (8, 32)])
def test_the_compiled_writes_cut_the_numpy_writes_chunks(
    kind: str, behaviour: bool, num_envs: int, chunk_steps: int
) -> None:
    fast = _chunks(kind, behaviour, True, num_envs, chunk_steps, seed=num_envs)
    slow = _chunks(kind, behaviour, False, num_envs, chunk_steps, seed=num_envs)
    assert len(fast) == len(slow) > num_envs
    assert any(c.episode_return is not None for c in slow)
    for got, want in zip(fast, slow, strict=True):
        for field in fields(ExperienceChunk):
            a, b = getattr(got, field.name), getattr(want, field.name)
            if field.name == "created_at_ms":
                continue
            if isinstance(b, np.ndarray):
                assert a.dtype == b.dtype and a.shape == b.shape, field.name
                np.testing.assert_array_equal(a, b, err_msg=field.name)
            else:
                assert a == b, field.name


def test_without_numba_the_chunker_writes_in_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chunker_module, "record_step_kernel", lambda: None)
    chunker = Chunker("r", 0, 2, 4, (4,), np.dtype(np.float32), behaviour=False)
    assert chunker._record is None
    chunker.start(np.zeros((2, 4), np.float32), version=0)
    done = np.array([True, False])
    infos = {"final_obs": np.ones((2, 4), np.float32), "_final_obs": done}
    chunks = chunker.add(Action(np.zeros(2, np.int64)), np.ones(2), done, np.zeros(2, bool),
                         np.zeros((2, 4), np.float32), infos)  # fmt: skip
    assert [c.env_index for c in chunks] == [0] and chunks[0].episode_return == 1.0


def test_observations_and_actions_of_other_dtypes_are_converted_as_numpy_converts() -> None:
    cut = []
    for compiled in (True, False):
        chunker = Chunker("r", 0, 3, 2, (4,), np.dtype(np.float32), False, compiled=compiled)
        chunker.start(np.linspace(0, 1, 12).reshape(3, 4), version=0)  # float64 from the env
        never = np.zeros(3, bool)
        infos: dict[str, Any] = {}
        for _ in range(2):
            action = Action(np.array([0, 1, 2], np.int32))
            cut += chunker.add(action, np.ones(3), never, never, np.ones((3, 4)), infos)
    assert len(cut) == 6
    for got, want in zip(cut[:3], cut[3:], strict=True):
        assert got.observations.dtype == np.float32 and got.actions.dtype == np.int64
        np.testing.assert_array_equal(got.observations, want.observations)
        np.testing.assert_array_equal(got.actions, want.actions)
