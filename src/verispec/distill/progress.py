"""Progress bars for the labelling and training stages: rich's, or a silent stand-in."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.progress import Progress

__all__ = ["NullBar", "progress_bar"]


class NullBar:
    """The part of ``rich.progress.Progress`` the stages use, doing nothing (``progress=False``)."""

    def add_task(self, *a, **k) -> int:
        return 0

    def update(self, *a, **k) -> None:
        pass

    def advance(self, *a, **k) -> None:
        pass

    def __enter__(self) -> NullBar:
        return self

    def __exit__(self, *a) -> bool:
        return False


def progress_bar(enabled: bool) -> Progress | NullBar:
    """A context manager with ``add_task`` / ``update`` / ``advance``: rich's bar when ``enabled``."""
    if not enabled:
        return NullBar()
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TimeRemainingColumn())
