"""How a ``verispec`` command ends: its exit code, and one clear line instead of a traceback.

Shared by the console script (:mod:`verispec.cli`) and ``python -m verispec.distill``, which
may not import the CLI (the layers point one way).
"""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console
from rich.markup import escape

__all__ = ["run_command", "USER_ERRORS"]

#: Errors that mean bad input (a wrong argument, a missing file): one line, exit code 2.
USER_ERRORS = (ValueError, TypeError, FileNotFoundError, NotADirectoryError)


def run_command(command: str, call: Callable[[], int | None]) -> int:
    """Run ``call`` and return its exit code: 130 on Ctrl-C, 2 with one red line naming
    ``command`` on a user error, its own return value (0 for None) otherwise."""
    try:
        return int(call() or 0)
    except KeyboardInterrupt:
        Console(stderr=True).print("[yellow]interrupted[/]")
        return 130
    except USER_ERRORS as e:
        # soft_wrap: a long path stays on one line (copyable), however narrow the terminal;
        # escape: the message's own brackets ("[Errno 2]", "[B, K]") are text, not markup
        Console(stderr=True).print(f"[red]verispec {command}: error:[/] {escape(str(e))}", soft_wrap=True)
        return 2
