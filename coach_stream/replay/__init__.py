"""Offline replay of stored experience topics: inspect, export, train offline.

``coach_stream.replay.open(run_id)`` gives a ``ReplayReader`` over a run's experience
topic (see ``docs/replay.md`` for a notebook example). Submodules are imported on use:
``import coach_stream.replay`` stays cheap (no torch, no pyarrow).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from coach_stream.replay.reader import ReplayReader, TransitionBatch

__all__ = ["ReplayReader", "TransitionBatch", "open"]


def open(run_id: str | None = None, **options: Any) -> ReplayReader:
    """``ReplayReader`` over ``run_id``'s experience topic, opened (``reader.open``)."""
    from coach_stream.replay.reader import open as _open

    return _open(run_id, **options)


def __getattr__(name: str) -> Any:
    if name in ("ReplayReader", "TransitionBatch"):
        from coach_stream.replay import reader

        return getattr(reader, name)
    raise AttributeError(name)
