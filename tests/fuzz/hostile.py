"""Hostile wire records for the fuzz tests, and the hypothesis profiles that bound them.

Three kinds of input reach a decoder from a topic anyone with write access can fill:
arbitrary bytes, genuine records damaged in transit or by a buggy producer (bit flips,
truncation, extension, a wrong header), and records that are valid Avro but carry values
no coach_stream writer produces (negative or huge shapes, sizes that do not match, NaN,
unknown dtypes, absurd counters, empty strings). The strategies here make each kind.

Profiles: ``COACH_STREAM_FUZZ=ci`` (the default, what ``pytest tests`` runs: a few hundred
examples per test, derandomized so CI cannot turn red on a new random draw) or
``COACH_STREAM_FUZZ=long`` (by hand: 20,000 random examples per test, or
``COACH_STREAM_FUZZ_EXAMPLES``). docs/testing.md says how to run them.
"""

from __future__ import annotations

import os
import tracemalloc
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from coach_stream.codec import SingleObjectCodec, default_registry
from coach_stream.codec.avro import MAGIC
from coach_stream.codec.chunks import CHUNK_SCHEMA
from coach_stream.codec.control import CONTROL_SCHEMA
from coach_stream.codec.fastpath import varint
from coach_stream.codec.tensors import DTYPES
from coach_stream.core import ExperienceChunk

_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
settings.register_profile(
    "fuzz-ci",
    max_examples=200,
    deadline=timedelta(seconds=2),  # a record decodes in microseconds; seconds means a loop
    derandomize=True,
    database=None,
    suppress_health_check=_SLOW_OK,
)
settings.register_profile(
    "fuzz-long",
    max_examples=int(os.environ.get("COACH_STREAM_FUZZ_EXAMPLES", "20000")),
    deadline=timedelta(seconds=2),
    suppress_health_check=_SLOW_OK,
    print_blob=True,
)
_PROFILE = os.environ.get("COACH_STREAM_FUZZ", "ci")
if _PROFILE not in ("ci", "long"):
    raise pytest.UsageError(
        f"COACH_STREAM_FUZZ={_PROFILE!r} is not a fuzz profile; use ci or long."
    )
FUZZ = settings.get_profile(f"fuzz-{_PROFILE}")
"""The settings every fuzz test runs under (``@FUZZ``): bounded in CI, long by hand."""

TIMEOUT = pytest.mark.timeout(120 if _PROFILE == "ci" else 3600)
"""A hang fails the test (pytest-timeout) instead of stalling CI: one example is ~1 ms."""

RUN_ID = "fuzz-run"
OBS_SHAPE = (3,)
NUM_ACTIONS = 4

# ------------------------------------------------------------------ memory bound

ALLOWANCE = 4 << 20
"""Bytes a decode may allocate beyond a small multiple of its input (dicts, views, text)."""


@contextmanager
def bounded_memory(input_size: int, factor: int = 8) -> Iterator[None]:
    """Fail if the block allocates more than ``factor`` x the input plus ``ALLOWANCE`` bytes.

    A declared length or shape that the decoder believes would show up here as a peak of
    gigabytes (or a MemoryError, which is not a DecodeError either). numpy and fastavro
    allocate through Python's allocator, so tracemalloc sees their buffers.
    """
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        yield
        _, peak = tracemalloc.get_traced_memory()
    finally:
        if started:
            tracemalloc.stop()
    limit = factor * input_size + ALLOWANCE
    assert peak - before <= limit, (
        f"decoding {input_size} bytes allocated {peak - before} bytes (limit {limit})"
    )


# ------------------------------------------------------------------ numbers and strings

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)


def edge_ints(low: int, high: int) -> st.SearchStrategy[int]:
    """Integers in ``[low, high]`` weighted towards the values bugs live at."""
    edges = sorted({low, high, -1, 0, 1, 2, 255, 256, 2**31 - 1, 2**31, 2**32, 2**53, 2**62})
    return st.one_of(
        st.sampled_from([e for e in edges if low <= e <= high]),
        st.integers(min_value=max(low, -3), max_value=min(high, 64)),
        st.integers(min_value=low, max_value=high),
    )


def longs() -> st.SearchStrategy[int]:
    return edge_ints(*_INT64)


def avro_ints() -> st.SearchStrategy[int]:
    return edge_ints(*_INT32)


def hostile_text(max_size: int = 40) -> st.SearchStrategy[str]:
    """Empty, long, control characters, path tricks, other scripts."""
    return st.one_of(
        st.sampled_from(["", " ", "\x00", "run-1", RUN_ID, "../..", "a" * 300, "é🚀", "\u202e"]),
        st.text(max_size=max_size),
    )


def hostile_floats() -> st.SearchStrategy[float]:
    return st.one_of(
        st.sampled_from([float("nan"), float("inf"), -float("inf"), -0.0, 1e308, 5e-324]),
        st.floats(allow_nan=True, allow_infinity=True),
    )


# ------------------------------------------------------------------ genuine records


@st.composite
def genuine_chunks(draw: st.DrawFn) -> ExperienceChunk:
    """A chunk a rollout worker of the fuzz run could write (it fits ``chunk_spec()``)."""
    steps = draw(st.integers(min_value=1, max_value=4))
    rng = np.random.default_rng(draw(st.integers(min_value=0, max_value=2**32 - 1)))
    ended = draw(st.sampled_from(["no", "terminated", "truncated"]))
    terminated = np.zeros(steps, bool)
    truncated = np.zeros(steps, bool)
    if ended == "terminated":
        terminated[-1] = True
    elif ended == "truncated":
        truncated[-1] = True
    behaviour = draw(st.booleans())
    return ExperienceChunk(
        run_id=RUN_ID,
        worker_id=draw(st.integers(min_value=0, max_value=70)),
        env_index=draw(st.integers(min_value=0, max_value=70)),
        chunk_seq=draw(st.integers(min_value=0, max_value=2**40)),
        policy_version=draw(st.integers(min_value=0, max_value=1000)),
        first_step=draw(st.integers(min_value=0, max_value=10_000)),
        observations=rng.standard_normal((steps + 1, *OBS_SHAPE)).astype(np.float32),
        actions=rng.integers(0, NUM_ACTIONS, size=steps, dtype=np.int64),
        rewards=rng.standard_normal(steps).astype(np.float32),
        terminated=terminated,
        truncated=truncated,
        log_probs=rng.standard_normal(steps).astype(np.float32) if behaviour else None,
        values=rng.standard_normal(steps).astype(np.float32) if behaviour else None,
        episode_return=float(rng.standard_normal()) if ended != "no" else None,
        episode_length=draw(st.integers(min_value=1, max_value=500)) if ended != "no" else None,
        created_at_ms=draw(st.integers(min_value=0, max_value=2**42)),
    )


# ------------------------------------------------------------------ damaged bytes


def fingerprints() -> list[bytes]:
    """Every registered fingerprint: a record of another type is one header away."""
    return [version.fingerprint for version in default_registry()]


@st.composite
def mutated(draw: st.DrawFn, data: bytes) -> bytes:
    """``data`` after 1-4 random edits of the kinds that happen to bytes in the wild."""
    out = bytearray(data)
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        kind = draw(
            st.sampled_from(
                [
                    "flip",
                    "set",
                    "truncate",
                    "extend",
                    "delete",
                    "insert",
                    "varint",
                    "header",
                    "duplicate",
                ]
            )
        )
        if not out and kind not in ("extend", "insert", "header"):
            continue
        pos = draw(st.integers(min_value=0, max_value=max(len(out) - 1, 0)))
        if kind == "flip":
            out[pos] ^= 1 << draw(st.integers(min_value=0, max_value=7))
        elif kind == "set":
            out[pos] = draw(st.integers(min_value=0, max_value=255))
        elif kind == "truncate":
            del out[draw(st.integers(min_value=0, max_value=len(out))) :]
        elif kind == "extend":
            out += draw(st.binary(min_size=1, max_size=64))
        elif kind == "delete":
            del out[pos : pos + draw(st.integers(min_value=1, max_value=16))]
        elif kind == "insert":
            out[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "varint":  # a length, count or number replaced by an absurd one
            number = draw(st.sampled_from([-1, -(2**63), 2**31, 2**40, 2**62, 2**63 - 1]))
            out[pos : pos + draw(st.integers(min_value=0, max_value=3))] = varint(number)
        elif kind == "header":
            magic = draw(st.sampled_from([MAGIC, b"\xc3\x00", b"\x00\x00", b"\xc3"]))
            fingerprint = draw(st.sampled_from([*fingerprints(), b"\x00" * 8, b"\xff" * 8]))
            out[:10] = magic + fingerprint
        else:  # duplicate a slice in place (a replayed write)
            out[pos:pos] = out[pos : pos + draw(st.integers(min_value=1, max_value=32))]
    return bytes(out)


def header_then_junk(schema: str) -> st.SearchStrategy[bytes]:
    """A correct header for ``schema`` followed by arbitrary bytes: past the first gate."""
    header = MAGIC + default_registry().latest(schema).fingerprint
    return st.binary(max_size=256).map(lambda body: header + body)


def arbitrary_bytes(schema: str) -> st.SearchStrategy[bytes]:
    return st.one_of(st.binary(max_size=256), header_then_junk(schema))


# ------------------------------------------------------------------ valid Avro, hostile values

BAD_DTYPES = ["", "float", "object", "O", "complex64", "<f4", "float32\x00", "U3", "V8", "S5"]


@st.composite
def hostile_tensors(draw: st.DrawFn) -> dict[str, Any]:
    """An Avro ``Tensor`` record: often consistent, often not, sometimes absurd."""
    dtype = draw(
        st.sampled_from(sorted(DTYPES)) | st.sampled_from(BAD_DTYPES) | st.text(max_size=8)
    )
    small = st.lists(st.integers(min_value=0, max_value=5), max_size=3)
    shape = draw(st.one_of(small, st.lists(longs(), max_size=12)))
    itemsize = DTYPES[dtype].itemsize if dtype in DTYPES else 4
    count = 1
    for dim in shape:
        count *= dim
    consistent = 0 <= count * itemsize <= 4096
    if consistent and draw(st.booleans()):
        data = draw(st.binary(min_size=count * itemsize, max_size=count * itemsize))
    else:
        data = draw(st.binary(max_size=64))
    return {"dtype": dtype, "shape": shape, "data": data}


def _floats_tensor(values: Sequence[float], dtype: str = "float32") -> dict[str, Any]:
    with np.errstate(over="ignore"):  # 1e308 as float32 is inf: one more hostile value
        array = np.asarray(values, dtype=dtype)
    return {"dtype": dtype, "shape": list(array.shape), "data": array.tobytes()}


@st.composite
def hostile_chunk_records(draw: st.DrawFn) -> bytes:
    """Valid Avro ``ExperienceChunk`` bytes whose fields are hostile, alone or together.

    Starts from a genuine chunk's record and replaces a random subset of fields, so one
    bad field at a time reaches the checks after the ones it would otherwise trip.
    """
    chunk = draw(genuine_chunks())
    record: dict[str, Any] = {
        "run_id": chunk.run_id,
        "worker_id": chunk.worker_id,
        "env_index": chunk.env_index,
        "chunk_seq": chunk.chunk_seq,
        "policy_version": chunk.policy_version,
        "first_step": chunk.first_step,
        "episode_return": chunk.episode_return,
        "episode_length": chunk.episode_length,
        "created_at_ms": chunk.created_at_ms,
    }
    for name in ("observations", "actions", "rewards", "terminated", "truncated"):
        array = getattr(chunk, name)
        record[name] = {
            "dtype": array.dtype.name,
            "shape": list(array.shape),
            "data": array.tobytes(),
        }
    for name in ("log_probs", "values"):
        array = getattr(chunk, name)
        record[name] = (
            None
            if array is None
            else {"dtype": "float32", "shape": list(array.shape), "data": array.tobytes()}
        )
    steps = chunk.num_steps
    hostile: dict[str, st.SearchStrategy[Any]] = {
        "run_id": hostile_text(),
        "worker_id": avro_ints(),
        "env_index": avro_ints(),
        "chunk_seq": longs(),
        "policy_version": longs(),
        "first_step": longs(),
        "episode_return": st.none() | hostile_floats(),
        "episode_length": st.none() | longs(),
        "created_at_ms": longs(),
        "observations": hostile_tensors()
        | st.lists(hostile_floats(), min_size=(steps + 1) * 3, max_size=(steps + 1) * 3).map(
            lambda v: {**_floats_tensor(v), "shape": [steps + 1, *OBS_SHAPE]}
        ),
        "actions": hostile_tensors()
        | st.lists(longs(), min_size=steps, max_size=steps).map(
            lambda v: _floats_tensor(v, "float64")
        ),
        "rewards": hostile_tensors()
        | st.lists(hostile_floats(), min_size=steps, max_size=steps).map(_floats_tensor),
        "terminated": hostile_tensors(),
        "truncated": hostile_tensors(),
        "log_probs": st.none()
        | hostile_tensors()
        | st.lists(hostile_floats(), min_size=steps, max_size=steps).map(_floats_tensor),
        "values": st.none() | hostile_tensors(),
    }
    # mostly one bad field, so it reaches the checks after those the others would trip
    count = draw(st.sampled_from([1, 1, 1, 2, 3, 4]))
    names = st.lists(st.sampled_from(sorted(hostile)), min_size=count, max_size=count, unique=True)
    for name in draw(names):
        record[name] = draw(hostile[name])
    return _codec(CHUNK_SCHEMA).encode(record)


def _codec(schema: str) -> SingleObjectCodec:
    registry = default_registry()
    return SingleObjectCodec(registry, registry.latest(schema), return_record_name=True)


# ------------------------------------------------------------------ control messages

SHA = "0123456789abcdef" * 4


def hostile_sha256() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(["", SHA, SHA.upper(), SHA[:-1], SHA + "0", "g" * 64, " " * 64]),
        st.text(alphabet="0123456789abcdefABCDEF", min_size=62, max_size=66),
        hostile_text(),
    )


def hostile_uris() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(
            [
                "",
                "mem://checkpoints/runs/fuzz-run/policies/00000001.pt",
                "mem://elsewhere/runs/fuzz-run/policies/00000001.pt",
                "gs://bucket/key",
                "file:///etc/hostname",
                "file:///tmp/a%00b",
                "runs/../../etc/passwd",
                "runs/fuzz-run/policies/\x00.pt",
                "/absolute",
                "://",
            ]
        ),
        hostile_text(),
    )


@st.composite
def hostile_control_bodies(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """A union branch name and a body of hostile (but Avro-valid) field values."""
    kind = draw(
        st.sampled_from(["PolicyVersion", "RunFinished", "EvaluationReport", "TrainerRendezvous"])
    )
    run_id = draw(st.just(RUN_ID) | hostile_text())
    if kind == "PolicyVersion":
        body: dict[str, Any] = {
            "run_id": run_id,
            "version": draw(longs()),
            "uri": draw(hostile_uris()),
            "sha256": draw(hostile_sha256()),
            "size": draw(longs()),
            "trainer_step": draw(longs()),
            "env_steps": draw(longs()),
            "created_at_ms": draw(longs()),
        }
    elif kind == "RunFinished":
        body = {
            "run_id": run_id,
            "final_version": draw(longs()),
            "reason": draw(hostile_text()),
            "created_at_ms": draw(longs()),
        }
    elif kind == "TrainerRendezvous":
        body = {
            "run_id": run_id,
            "address": draw(st.sampled_from(["10.0.0.1:29500", "h:0", ":1", "[::1]:99999"])
                            | hostile_text()),
            "world": draw(longs()),
            "created_at_ms": draw(longs()),
        }  # fmt: skip
    else:
        body = {
            "run_id": run_id,
            "policy_version": draw(longs()),
            "env_steps": draw(longs()),
            "returns": draw(st.lists(hostile_floats(), max_size=20)),
            "created_at_ms": draw(longs()),
        }
    return f"io.coachstream.{kind}", body


def encode_control_record(branch: tuple[str, dict[str, Any]]) -> bytes:
    """Avro bytes of a control record, whatever its values (no semantic check)."""
    return _codec(CONTROL_SCHEMA).encode({"message": branch})


def hostile_control_records() -> st.SearchStrategy[bytes]:
    return hostile_control_bodies().map(encode_control_record)


def one_of_kinds(
    arbitrary: st.SearchStrategy[bytes],
    genuine: st.SearchStrategy[bytes],
    hostile: st.SearchStrategy[bytes],
) -> st.SearchStrategy[bytes]:
    """Arbitrary bytes, damaged genuine records and hostile valid records, mixed."""
    return st.one_of(arbitrary, genuine.flatmap(mutated), hostile, genuine)
