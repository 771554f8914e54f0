"""A rich progress bar on stderr for long replay work, or nothing when stderr is not a TTY."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn


@contextmanager
def records_progress(
    description: str, total: int, enabled: bool = True, unit: str = "records"
) -> Iterator[Callable[[int], None]]:
    """A callback to advance by ``n`` records (or ``unit``); the bar lives on stderr for
    the ``with``."""
    if not enabled:
        yield lambda _n: None
        return
    console = Console(stderr=True, soft_wrap=True)  # lines printed meanwhile stay whole
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(unit),
        TimeRemainingColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    ) as progress:
        task = progress.add_task(description, total=total)
        yield lambda n: progress.advance(task, n)
