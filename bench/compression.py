"""lz4 against zstd on real frames: which compression the image presets' producers use.

Real experience, not random bytes: rollout shares of ``pong-ppo`` (ALE/Pong-v5 through the
``atari`` wrapper: 4 stacked 84x84 uint8 frames) and ``minigrid-ppo`` (the 7x7x3 uint8
agent view) under a uniformly random policy, cut by the chunker at the presets'
``chunk_steps`` and encoded by the wire codec. Each record is compressed on its own with
the python bindings of the libraries librdkafka uses, at librdkafka's default levels
(``compression.level`` -1: LZ4 frame level 0, zstd level 3); a Pong chunk (3.6 MB) is a
produce batch of its own, so per record is what the producer does for it.

Figures (one JSON line each, baseline measured in the same run):

* ``<env>_<codec>_ratio``: raw bytes / compressed bytes; baseline: the other codec;
* ``<env>_<codec>_mb_per_s``: raw MB per second of compress + decompress on one core;
  baseline: the other codec;
* ``<env>_<codec>_us_per_step``: compress + decompress microseconds per env step;
  baseline: the env step itself (random action, wrappers included), so the ratio is the
  overhead compression adds to a rollout worker (plus what the broker's consumer pays).

Usage: ``python bench/compression.py [--quick]`` (no services needed; ``--quick`` < 60 s).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass

import jsonl
import lz4.frame
import numpy as np
import zstandard

from coach_stream.codec import encode_chunk
from coach_stream.config import load_preset
from coach_stream.core import Action
from coach_stream.envs import SeedRole, env_seeds, env_shape, make_vector_env
from coach_stream.rollout.chunker import Chunker

Compress = Callable[[bytes], bytes]


@dataclass(frozen=True)
class Codec:
    name: str
    compress: Compress
    decompress: Compress


def codecs() -> list[Codec]:
    zc, zd = zstandard.ZstdCompressor(level=3), zstandard.ZstdDecompressor()
    return [
        Codec("lz4", lambda b: lz4.frame.compress(b, compression_level=0), lz4.frame.decompress),
        Codec("zstd", zc.compress, zd.decompress),
    ]


@dataclass(frozen=True)
class Recorded:
    records: list[bytes]
    steps: int
    step_us: float
    """Microseconds per env step (one env of the vector env) under the random policy."""


def record(preset_name: str, shares: int, seed: int = 0) -> Recorded:
    """``shares`` shares of ``num_steps`` steps per env, encoded as the workers write them."""
    preset = load_preset(preset_name)
    n, t = preset.rollout.num_envs, preset.rollout.chunk_steps
    envs = make_vector_env(preset.env_id, n, preset.env_wrappers)
    try:
        shape = env_shape(envs)
        chunker = Chunker("bench", 0, n, t, shape.obs_shape, np.dtype(shape.obs_dtype), True)
        obs, _ = envs.reset(seed=env_seeds(seed, 0, n, SeedRole.ROLLOUT))  # type: ignore[arg-type]
        chunker.start(obs, 0)
        rng = np.random.default_rng(seed)
        zeros = np.zeros(n, np.float32)
        records: list[bytes] = []
        env_s = 0.0
        for _ in range(shares * preset.ppo_config.num_steps):
            actions = rng.integers(0, shape.num_actions, n)
            started = time.perf_counter()
            obs, rewards, term, trunc, infos = envs.step(actions)
            env_s += time.perf_counter() - started
            chunks = chunker.add(Action(actions, zeros), rewards, term, trunc, obs, infos)
            records += [encode_chunk(chunk) for chunk in chunks]
        records += [encode_chunk(chunk) for chunk in chunker.flush()]
    finally:
        envs.close()
    steps = shares * preset.ppo_config.num_steps * n
    return Recorded(records, steps, env_s / steps * 1e6)


def measure(codec: Codec, records: list[bytes], repeats: int) -> tuple[float, float]:
    """(compression ratio, seconds of compress + decompress for all records, best repeat)."""
    raw = sum(len(r) for r in records)
    packed = [codec.compress(r) for r in records]
    assert all(codec.decompress(p) == r for p, r in zip(packed, records, strict=True))
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        for r in records:
            codec.decompress(codec.compress(r))
        best = min(best, time.perf_counter() - started)
    return raw / sum(len(p) for p in packed), best


def emit(metric: str, value: float, unit: str, baseline: str, base: float) -> None:
    jsonl.emit("compression", metric, value, unit, baseline, base)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one share per env (< 60 s)")
    args = parser.parse_args()
    shares, repeats = (1, 2) if args.quick else (4, 5)
    for env, preset in (("pong", "pong-ppo"), ("minigrid", "minigrid-ppo")):
        data = record(preset, shares)
        raw = sum(len(r) for r in data.records)
        results = {c.name: measure(c, data.records, repeats) for c in codecs()}
        for name, (ratio, seconds) in results.items():
            other = "zstd" if name == "lz4" else "lz4"
            other_ratio, other_seconds = results[other]
            emit(f"{env}_{name}_ratio", ratio, "x", other, other_ratio)
            emit(f"{env}_{name}_mb_per_s", raw / seconds / 1e6, "MB/s", other,
                 raw / other_seconds / 1e6)  # fmt: skip
            emit(f"{env}_{name}_us_per_step", seconds / data.steps * 1e6, "us", "env_step",
                 data.step_us)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(jsonl.run(main))
