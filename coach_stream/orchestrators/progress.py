"""Following a run through its tasks' logs: the JSON event lines, folded into ``RunTelemetry``.

Every process of a run prints one JSON object per line on stdout (``{"event":
"progress", ...}``, ``"evaluation"``, ``"finished"``) next to human logging on stderr;
the supervisor appends both to ``logs/<task>.log``. The launcher's live display,
`coach-stream status` and the end-to-end tests all read the run this way, so what they
show is exactly what the processes reported, from any process, even after the run.
"""

from __future__ import annotations

from pathlib import Path

from coach_stream.observability.fold import RunTelemetry


class LogFollower:
    """Yields complete new lines of every ``*.log`` in a directory, remembering offsets."""

    def __init__(self, logs_dir: Path) -> None:
        self._dir = logs_dir
        self._offsets: dict[Path, int] = {}
        self._partial: dict[Path, bytes] = {}

    def poll(self) -> list[tuple[str, str]]:
        """``(task, line)`` pairs written since the last call (a half-written line waits)."""
        lines: list[tuple[str, str]] = []
        if not self._dir.is_dir():
            return lines
        for path in sorted(self._dir.glob("*.log")):
            offset = self._offsets.get(path, 0)
            try:
                with path.open("rb") as handle:
                    handle.seek(offset)
                    data = handle.read()
            except OSError:
                continue
            self._offsets[path] = offset + len(data)
            data = self._partial.pop(path, b"") + data
            *complete, rest = data.split(b"\n")
            if rest:
                self._partial[path] = rest
            lines += [(path.stem, raw.decode("utf-8", errors="replace")) for raw in complete]
        return lines


def fold_run_logs(logs_dir: Path, run_id: str, eval_episodes: int = 20) -> RunTelemetry:
    """A run's events as its task logs hold them, read once (a local run's `status` when
    its telemetry topic cannot be read)."""
    telemetry = RunTelemetry(run_id, eval_episodes=eval_episodes)
    for task, line in LogFollower(logs_dir).poll():
        telemetry.feed_line(task, line)
    return telemetry
