"""Progress on long work: a bar on stderr (rich) for a table, a composition or a Ray job that runs past a couple of
seconds, when stderr is a terminal; nothing at all when it is not, so logs and pipes get only the summary line.

    with Progress("scoring rows", total=rows) as progress:
        for chunk in chunks:
            ...
            progress.advance(len(chunk))

The bar appears only once the work has run PROGRESS_AFTER seconds (NAMEORIGIN_PROGRESS_AFTER overrides it; 0 shows
it at once), so a quick job prints nothing extra even on a terminal.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

PROGRESS_AFTER = 2.0  # seconds of work before a bar is worth drawing


def wanted() -> bool:
    """A terminal reads stderr: a bar helps there and only there."""
    return sys.stderr.isatty()


def delay() -> float:
    try:
        return float(os.environ.get("NAMEORIGIN_PROGRESS_AFTER", PROGRESS_AFTER))
    except ValueError:
        return PROGRESS_AFTER


class Progress:
    """One task's bar (a count without a total draws as a spinner with the count), started lazily."""

    def __init__(self, description: str, total: int | None = None):
        self.description, self.total = description, total
        self.done, self.started = 0, time.monotonic()
        self.enabled, self.bar, self.task = wanted(), None, None

    def __enter__(self) -> Progress:
        return self

    def advance(self, amount: int = 1) -> None:
        self.done += amount
        if not self.enabled:
            return
        if self.bar is None and time.monotonic() - self.started >= delay():
            self.start()
        if self.bar is not None:
            self.bar.update(self.task, completed=self.done)

    def start(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as RichProgress

        columns: list[Any] = [TextColumn("{task.description}")]
        if self.total:
            columns += [BarColumn(), MofNCompleteColumn()]
        else:
            columns += [SpinnerColumn(), TextColumn("{task.completed:,}")]
        self.bar = RichProgress(*columns, TimeElapsedColumn(), console=Console(stderr=True), transient=True)
        self.bar.start()
        self.task = self.bar.add_task(self.description, total=self.total, completed=self.done)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()
