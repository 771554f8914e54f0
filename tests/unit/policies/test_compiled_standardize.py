"""A normalising worker standardises its observations in one compiled call: the numpy
standardising's float32s to the bit, so a worker and a trainer (which standardises the
read-only observations it decodes in numpy) see the same inputs."""

from __future__ import annotations

import numpy as np
import pytest

from coach_stream.policies import actors
from coach_stream.policies.normalization import Statistics


def _statistics(shape: tuple[int, ...], seed: int) -> Statistics:
    rng = np.random.default_rng(seed)
    return Statistics(
        obs_mean=rng.normal(size=shape) * 3,
        obs_var=rng.random(shape) * 4 + 1e-9,
        return_var=None,
        clip_observations=5.0,
        clip_rewards=10.0,
        epsilon=1e-8,
    )


def _in_numpy(statistics: Statistics, obs: np.ndarray) -> np.ndarray:
    frozen = obs.copy()
    frozen.flags.writeable = False  # read-only: the numpy path, as the trainer's decoded rows
    return np.asarray(statistics.observations(frozen))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("rows", "shape"), [(1, (17,)), (8, (4,)), (3, (2, 3, 2))])
def test_the_compiled_standardising_is_numpys_to_the_bit(
    dtype: type, rows: int, shape: tuple[int, ...]
) -> None:
    assert actors.compiled_kernels() is not None
    statistics = _statistics(shape, rows)
    obs = (np.random.default_rng(7).normal(size=(rows, *shape)) * 20).astype(dtype)
    obs.reshape(-1)[:3] = [np.nan, np.inf, -np.inf]  # NaN stays NaN; infinities clip
    got = np.asarray(statistics.observations(obs))
    want = _in_numpy(statistics, obs)
    assert got.dtype == want.dtype == np.float32 and got.shape == obs.shape
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    assert np.isnan(got.reshape(-1)[0]) and np.abs(got.reshape(-1)[1:3]).tolist() == [5.0, 5.0]
    assert np.abs(got[np.isfinite(got)]).max() <= 5.0 and (np.abs(got) == 5.0).any()


def test_other_inputs_and_a_missing_numba_take_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    statistics = _statistics((4,), 0)
    ints = np.arange(12).reshape(3, 4)  # not a float: numpy converts it
    np.testing.assert_array_equal(statistics.observations(ints), _in_numpy(statistics, ints))
    strided = np.random.default_rng(1).normal(size=(3, 8))[:, ::2]  # copied contiguous
    np.testing.assert_array_equal(statistics.observations(strided), _in_numpy(statistics, strided))
    with pytest.raises(ValueError):  # a wrong width is numpy's error, never a stray read
        statistics.observations(np.zeros((2, 5)))
    monkeypatch.setattr(actors, "compiled_kernels", lambda: None)
    monkeypatch.setattr("coach_stream.policies.normalization.compiled_kernels", lambda: None)
    obs = np.random.default_rng(2).normal(size=(2, 4)) * 9
    np.testing.assert_array_equal(statistics.observations(obs), _in_numpy(statistics, obs))
