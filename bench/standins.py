"""Stand-ins for a rollout worker's transport, so the benches can time its acting loop alone:
a writer that sends nothing and a policy source with one version that never changes."""

from __future__ import annotations

from coach_stream.core import ExperienceChunk, LoadedPolicy, RunFinished


class DiscardingWriter:
    """The same ``ExperienceWriter`` calls, no transport: the loop's cost without producing."""

    def write(self, chunk: ExperienceChunk) -> None:
        pass

    def flush(self, timeout: float | None = None) -> None:
        pass

    def next_chunk_seqs(self, worker_id: int, num_envs: int) -> list[int]:
        return [0] * num_envs

    def acknowledged(self) -> dict[str, int]:
        return {}

    def close(self) -> None:
        pass

    def __enter__(self) -> DiscardingWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


class CapturingWriter(DiscardingWriter):
    """Keeps the chunks instead of sending them."""

    def __init__(self) -> None:
        self.chunks: list[ExperienceChunk] = []

    def write(self, chunk: ExperienceChunk) -> None:
        self.chunks.append(chunk)


class FixedPolicy:
    """A policy source with one version that never changes and a run that never ends."""

    def __init__(self, policy: LoadedPolicy) -> None:
        self.policy = policy

    def latest(self, timeout: float) -> LoadedPolicy | None:
        return self.policy

    def poll(self) -> LoadedPolicy | None:
        return None

    def wait_for(self, version: int, timeout: float) -> LoadedPolicy:
        return self.policy

    @property
    def finished(self) -> RunFinished | None:
        return None
