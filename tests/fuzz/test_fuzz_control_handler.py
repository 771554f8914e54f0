"""Fuzz: control messages, from bytes on the topic to the worker's policy and the trainer.

Properties: ``decode_control`` turns any bytes into a valid message or a ``DecodeError``
(what ``KafkaControlSubscriber`` counts and skips); the subscriber, the workers' policy
source and the trainer's control handling never raise on what comes out; and a worker
never acts with weights whose sha256 differs from the version it says it runs.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterator, Mapping
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from coach_stream.checkpoints import policy_to_bytes
from coach_stream.checkpoints.keys import policy_key, sha256_hex, trainer_key
from coach_stream.checkpoints.local import LocalCheckpointStore
from coach_stream.checkpoints.serialization import policy_from_bytes
from coach_stream.codec import decode_control, encode_control
from coach_stream.codec.control import CONTROL_SCHEMA
from coach_stream.control.policy_source import CheckpointPolicySource
from coach_stream.core import (
    CheckpointStore,
    ClosingContext,
    ControlMessage,
    EvaluationReport,
    PolicyVersion,
    RunFinished,
    TrainerRendezvous,
)
from coach_stream.errors import DecodeError
from coach_stream.runids import check_run_id
from coach_stream.testing.memory_store import MemoryCheckpointStore
from coach_stream.trainer.loop import Trainer
from coach_stream.trainer.progress import ProgressMeter
from coach_stream.transport.control import KafkaControlSubscriber
from coach_stream.transport.settings import KafkaSettings, RunTopics

from .hostile import (
    FUZZ,
    RUN_ID,
    SHA,
    TIMEOUT,
    arbitrary_bytes,
    bounded_memory,
    encode_control_record,
    hostile_control_bodies,
    hostile_control_records,
    longs,
    mutated,
    one_of_kinds,
)

pytestmark = TIMEOUT

_SHA256 = re.compile(r"[0-9a-f]{64}")


@st.composite
def genuine_messages(draw: st.DrawFn) -> ControlMessage:
    created = draw(st.integers(min_value=0, max_value=2**42))
    version = draw(st.integers(min_value=0, max_value=10_000))
    kind = draw(st.sampled_from(["policy", "finished", "evaluation", "rendezvous"]))
    if kind == "policy":
        return PolicyVersion(
            RUN_ID,
            version,
            f"mem://checkpoints/{policy_key(RUN_ID, version)}",
            draw(st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)),
            draw(st.integers(min_value=0, max_value=2**30)),
            draw(st.integers(min_value=0, max_value=2**40)),
            draw(st.integers(min_value=0, max_value=2**40)),
            created,
        )
    if kind == "finished":
        reason = draw(st.sampled_from(["target_reached", "budget_exhausted", "stopped"]))
        return RunFinished(RUN_ID, version - 1, reason, created)
    if kind == "rendezvous":
        port = draw(st.integers(min_value=1, max_value=65535))
        return TrainerRendezvous(RUN_ID, f"10.1.2.3:{port}", version + 2, created)
    returns = draw(st.lists(st.floats(-1e6, 1e6), max_size=10))
    return EvaluationReport(RUN_ID, version, version * 100, tuple(returns), created)


GENUINE = genuine_messages().map(encode_control)
_POLICY = {
    "run_id": RUN_ID,
    "version": 0,
    "uri": "mem://checkpoints/runs/fuzz-run/policies/00000000.pt",
    "sha256": SHA,
    "size": 0,
    "trainer_step": 0,
    "env_steps": 0,
    "created_at_ms": 0,
}
_FINISHED = {"run_id": RUN_ID, "final_version": 0, "reason": "stopped", "created_at_ms": 0}
_EVALUATION = {
    "run_id": RUN_ID,
    "policy_version": 0,
    "env_steps": 0,
    "returns": [1.0],
    "created_at_ms": 0,
}
ANY_RECORD = one_of_kinds(arbitrary_bytes(CONTROL_SCHEMA), GENUINE, hostile_control_records())


def assert_valid(message: ControlMessage) -> None:
    """What every consumer of the control topic may rely on, and a bit-exact round trip."""
    check_run_id(message.run_id)
    if isinstance(message, PolicyVersion):
        assert message.version >= 0 and message.size >= 0, message
        assert message.trainer_step >= 0 and message.env_steps >= 0, message
        assert _SHA256.fullmatch(message.sha256), message
        assert message.uri, message
    elif isinstance(message, RunFinished):
        assert message.final_version >= -1 and message.reason, message
    elif isinstance(message, TrainerRendezvous):
        host, _, port = message.address.rpartition(":")
        assert host and 0 < int(port) < 65536 and message.world >= 2, message
    else:
        assert message.policy_version >= 0 and message.env_steps >= 0, message
        assert all(math.isfinite(r) for r in message.returns), message
    encoded = encode_control(message)
    assert encode_control(decode_control(encoded)) == encoded


def decode_or_reject(data: bytes) -> ControlMessage | None:
    try:
        with bounded_memory(len(data)):
            return decode_control(data)
    except DecodeError:
        return None


@FUZZ
@given(arbitrary_bytes(CONTROL_SCHEMA))
def test_arbitrary_bytes_decode_or_raise_decode_error(data: bytes) -> None:
    message = decode_or_reject(data)
    if message is not None:
        assert_valid(message)


# Found by this test before decoding checked values: a space in the sha256 decoded.
@FUZZ
@given(GENUINE.flatmap(mutated))
@example(
    b"\xc3\x01\x16\xe7)U\x9e\xeb\xb5`\x00\x10fuzz-run\x00hmem://checkpoints/runs/fuzz-run/"
    b"policies/00000000.pt\x80\x01 " + b"0" * 63 + b"\x00\x00\x00\x00"
)
def test_damaged_messages_decode_or_raise_decode_error(data: bytes) -> None:
    message = decode_or_reject(data)
    if message is not None:
        assert_valid(message)


# Found by this test before decoding checked values: each of these decoded.
@FUZZ
@given(hostile_control_records())
@example(encode_control_record(("io.coachstream.RunFinished", {**_FINISHED, "reason": ""})))
@example(encode_control_record(("io.coachstream.RunFinished", {**_FINISHED, "run_id": ""})))
@example(
    encode_control_record(
        ("io.coachstream.EvaluationReport", {**_EVALUATION, "returns": [float("inf")]})
    )
)
@example(encode_control_record(("io.coachstream.PolicyVersion", {**_POLICY, "size": -1})))
def test_hostile_field_values_decode_or_raise_decode_error(data: bytes) -> None:
    message = decode_or_reject(data)
    if message is not None:
        assert_valid(message)


# ------------------------------------------------------------------ the subscriber


class FakeMessage:
    """What ``KafkaControlSubscriber`` reads of a confluent_kafka ``Message``."""

    def __init__(self, value: bytes | None, offset: int) -> None:
        self._value, self._offset = value, offset

    def error(self) -> None:
        return None

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes | None:
        return self._value


def subscriber() -> KafkaControlSubscriber:
    settings = KafkaSettings(bootstrap_servers="127.0.0.1:9")  # never contacted
    return KafkaControlSubscriber(settings, RunTopics.for_run(RUN_ID))


def through_subscriber(values: list[bytes | None]) -> list[ControlMessage]:
    """The messages ``KafkaControlSubscriber`` hands on for these record values."""
    reader = subscriber()
    batch: list[Any] = [FakeMessage(v, i) for i, v in enumerate(values)]
    decoded = reader._decode(batch)
    assert len(decoded) + reader.undecodable == len(values)
    assert reader.position == len(values)
    return decoded


@FUZZ
@given(st.lists(st.none() | ANY_RECORD, max_size=10))
def test_the_subscriber_skips_what_does_not_decode(values: list[bytes | None]) -> None:
    for message in through_subscriber(values):
        assert_valid(message)


# ------------------------------------------------------------------ the trainer


@FUZZ
@given(st.lists(ANY_RECORD, max_size=10))
def test_the_trainer_absorbs_any_control_topic(values: list[bytes | None]) -> None:
    messages = through_subscriber(list(values))
    trainer: Any = SimpleNamespace(
        settings=SimpleNamespace(run_id=RUN_ID),
        progress=ProgressMeter(lambda: 0.0, eval_episodes=10),
        events=lambda kind, fields: None,
        finished=None,
    )
    newest = Trainer._absorb(trainer, messages)
    if newest is not None:
        assert isinstance(newest, PolicyVersion) and newest.run_id == RUN_ID
    if trainer.finished is not None:
        assert trainer.finished.run_id == RUN_ID
    # a return of inf would reach the target, a NaN would hide it: both are refused
    assert all(math.isfinite(r) for r in trainer.progress.eval_returns)


# ------------------------------------------------------------------ the workers' policy source

VERSIONS = 3


def weights(version: int) -> bytes:
    return policy_to_bytes({"w": torch.full((2,), float(version))})


def fill(store: CheckpointStore) -> list[PolicyVersion]:
    """Genuine versions 0..2 and a trainer state (a file a forger may point at)."""
    announced = []
    for version in range(VERSIONS):
        stored = store.put(policy_key(RUN_ID, version), weights(version))
        announced.append(
            PolicyVersion(RUN_ID, version, stored.uri, stored.sha256, stored.size, 1, 1, 1)
        )
    store.put(trainer_key(RUN_ID, 0), b"not a policy at all")
    return announced


@pytest.fixture(scope="module")
def memory_store() -> tuple[MemoryCheckpointStore, list[PolicyVersion]]:
    store = MemoryCheckpointStore()
    return store, fill(store)


@pytest.fixture(scope="module")
def local_store(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[LocalCheckpointStore, list[PolicyVersion]]:
    root = tmp_path_factory.mktemp("fuzz-store")
    store = LocalCheckpointStore(root)
    genuine = fill(store)
    (root / "outside.pt").write_bytes(weights(99))  # in the directory, not a store key
    return store, genuine


class ScriptedControl(ClosingContext):
    """A ``ControlLogReader`` that hands out one prepared batch per call."""

    def __init__(self, batches: list[list[ControlMessage]]) -> None:
        self._batches: Iterator[list[ControlMessage]] = iter(batches)

    def poll(self, timeout: float) -> list[ControlMessage]:
        return next(self._batches, [])

    def read_to_end(self, timeout: float) -> list[ControlMessage]:
        return self.poll(timeout)


@st.composite
def forgeries(draw: st.DrawFn, genuine: list[PolicyVersion]) -> bytes:
    """A PolicyVersion made from a genuine one with hostile fields, as bytes on the topic."""
    base = draw(st.sampled_from(genuine))
    _, body = draw(hostile_control_bodies().filter(lambda b: b[0].endswith("PolicyVersion")))
    fields = {**base.__dict__}
    for name in draw(st.lists(st.sampled_from(sorted(body)), min_size=1, unique=True)):
        fields[name] = body[name]
    if draw(st.booleans()):
        fields["version"] = draw(longs())
    return encode_control_record(("io.coachstream.PolicyVersion", fields))


def topic_records(genuine: list[PolicyVersion]) -> st.SearchStrategy[list[list[bytes | None]]]:
    """Batches of records: genuine announcements, forgeries, damage and anything else."""
    record = st.one_of(
        st.sampled_from(genuine).map(encode_control),
        forgeries(genuine),
        ANY_RECORD,
        st.none(),
    )
    return st.lists(st.lists(record, max_size=5), min_size=1, max_size=4)


def check_source(
    store: CheckpointStore, batches: list[list[bytes | None]], background: bool
) -> None:
    loaded: dict[int, bytes] = {}  # id(state_dict) -> the bytes it was loaded from

    def loader(blob: bytes) -> Mapping[str, object]:
        state = policy_from_bytes(blob)
        loaded[id(state)] = blob
        return state

    control = ScriptedControl([through_subscriber(batch) for batch in batches])
    with CheckpointPolicySource(
        control, store, run_id=RUN_ID, loader=loader, retry_after_s=0.0, background=background
    ) as source:
        source.latest(timeout=0.0)
        for _ in batches:
            source.poll()
            source.join_fetch()
            current = source.current
            if current is None:
                continue
            blob = loaded[id(current.state_dict)]
            announced = current.version
            assert sha256_hex(blob) == announced.sha256, "accepted a policy whose sha256 differs"
            assert len(blob) == announced.size
            assert announced.run_id == RUN_ID
            assert hashlib.sha256(store.get(announced.uri)).hexdigest() == announced.sha256


@FUZZ
@given(data=st.data(), background=st.booleans())
def test_the_policy_source_never_crashes_nor_loads_a_mismatched_policy(
    memory_store: tuple[MemoryCheckpointStore, list[PolicyVersion]],
    data: st.DataObject,
    background: bool,
) -> None:
    store, genuine = memory_store
    check_source(store, data.draw(topic_records(genuine)), background)


@FUZZ
@given(data=st.data(), background=st.booleans())
def test_the_policy_source_on_a_local_store_never_crashes(
    local_store: tuple[LocalCheckpointStore, list[PolicyVersion]],
    data: st.DataObject,
    background: bool,
) -> None:
    store, genuine = local_store
    check_source(store, data.draw(topic_records(genuine)), background)


def test_forged_sha256_on_a_genuine_uri_is_rejected_and_the_good_policy_kept(
    memory_store: tuple[MemoryCheckpointStore, list[PolicyVersion]],
) -> None:
    store, genuine = memory_store
    good, forged = genuine[0], PolicyVersion(**{**genuine[1].__dict__, "sha256": SHA})
    control = ScriptedControl([[good], [forged]])
    with CheckpointPolicySource(control, store, run_id=RUN_ID) as source:
        assert source.latest(0.0) is not None
        assert source.poll() is None
        assert source.current is not None and source.current.version == good
        assert "sha256" in source.rejected[forged.version]


# Found by test_the_policy_source_on_a_local_store_never_crashes: a NUL byte in the uri
# raised ValueError out of poll() (the worker died); /dev/zero would have grown it without
# end. Fixed in LocalCheckpointStore: only regular files inside its root are read.
@pytest.mark.parametrize("uri", ["file:///tmp/a%00b", "runs/a\x00b.pt", "file:///dev/zero"])
def test_a_forged_uri_outside_the_store_is_rejected_and_the_good_policy_kept(
    local_store: tuple[LocalCheckpointStore, list[PolicyVersion]], uri: str
) -> None:
    store, genuine = local_store
    good, forged = genuine[0], PolicyVersion(**{**genuine[1].__dict__, "uri": uri})
    control = ScriptedControl([[good], [forged]])
    for background in (False, True):
        with CheckpointPolicySource(control, store, run_id=RUN_ID, background=background) as source:
            source.latest(0.0)
            source.poll()
            source.join_fetch()
            assert source.current is not None and source.current.version == good
            assert "is not a file in this checkpoint store" in source.rejected[forged.version]
        control = ScriptedControl([[good], [forged]])
