"""A spinner on stderr saying what a slow command is doing, with the seconds it has taken.

Shown only when stderr is a terminal: in logs and CI output nothing is written (no
control characters, no stale lines), and the spinner leaves no line behind when done.
Commands with a known amount of work use a bar instead (``replay.progress``)::

    with spinner("starting the stack") as steps:
        stack.up(steps=steps)          # steps("Kafka: fetching ...") updates the line
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Column


@contextmanager
def spinner(
    text: str, enabled: bool = True, console: Console | None = None
) -> Iterator[Callable[[str], None]]:
    """A callback that replaces the spinner's text; a no-op off a terminal or disabled."""
    err = console or Console(stderr=True)
    if not enabled or not err.is_terminal:
        yield lambda _text: None
        return
    with Progress(
        SpinnerColumn(),
        TimeElapsedColumn(),  # before the text: a long text is cut, never the clock
        TextColumn(
            "{task.description}", table_column=Column(ratio=1, no_wrap=True, overflow="ellipsis")
        ),
        console=err,
        transient=True,
        expand=True,  # the text takes the width left, so long texts are cut to fit
    ) as progress:
        task = progress.add_task(text, total=None)
        yield lambda now: progress.update(task, description=now)
