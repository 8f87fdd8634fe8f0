"""The ``verispec`` command line: ``certify`` (and, as they land, ``generate``, ``bench``, ``distill``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``verispec`` console script; returns the process exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        Console(stderr=True).print("[yellow]interrupted[/]")
        return 130
    except (ValueError, TypeError, FileNotFoundError) as e:  # user errors: one clear line
        Console(stderr=True).print(f"[red]verispec {args.command}: error:[/] {e}")
        return 2


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="verispec", description="Exact, deterministic speculative decoding.")
    sub = p.add_subparsers(dest="command")

    c = sub.add_parser("certify", help="prove exactness by enumeration over toy models")
    c.add_argument("--quick", action="store_true", help="a smaller grid (under a minute on 2 cores)")
    c.set_defaults(func=_cmd_certify)
    return p


def _cmd_certify(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    from .certify import TV_TOLERANCE, default_grid, run_case

    console = Console()
    cases = default_grid(args.quick)
    results = []
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("enumerating", total=len(cases))
        for case in cases:
            results.append(run_case(case))
            progress.advance(task)

    # One table row per (mode, edge case): the worst total variation over its V x K grid.
    table = Table(title=f"verispec certify{' --quick' if args.quick else ''}: exact emitted law vs target "
                        f"(pass: TV <= {TV_TOLERANCE:g})")
    for col in ("mode", "edge case", "V", "K", "N", "cases", "max TV", "pathwise", "result"):
        table.add_column(col, justify="right" if col not in ("mode", "edge case") else "left")
    groups: dict[tuple[str, str], list] = {}
    for r in results:
        groups.setdefault((r.case.method, r.case.edge), []).append(r)
    failed = 0
    for (method, edge), rs in groups.items():
        ok = all(r.passed for r in rs)
        failed += sum(not r.passed for r in rs)
        pathwise = "-" if method != "gumbel" else f"{sum(r.pathwise_mismatches or 0 for r in rs)} bad"
        table.add_row(
            method, edge,
            _span(r.case.vocab for r in rs), _span(r.case.k for r in rs), _span(r.case.n_tokens for r in rs),
            str(len(rs)), f"{max(r.tv for r in rs):.1e}", pathwise,
            "[green]pass[/]" if ok else "[red]FAIL[/]",
        )
    console.print(table)
    console.print(f"{len(results) - failed} passed, {failed} failed" if failed else
                  f"all {len(results)} cases passed")
    return 1 if failed else 0


def _span(values) -> str:
    vs = sorted(set(values))
    return str(vs[0]) if len(vs) == 1 else f"{vs[0]}-{vs[-1]}"


if __name__ == "__main__":
    sys.exit(main())
