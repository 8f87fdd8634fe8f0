"""``python -m verispec.distill.instructions --n 12000 --seed 0 --out FILE.jsonl``: build the
instruction corpus, write it as JSONL and print the counts per family and split.
``--exclude EARLIER.jsonl`` (with a larger ``--n``) writes only what an earlier corpus lacks, so a
data run can grow past it without repeating an instruction or crossing its held-out split."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from .build import build_instructions, new_beside, read_jsonl, split_counts, write_jsonl


def _positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {v}")
    return v


def _seed(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer seed, got {text!r}") from None


def main(argv: Sequence[str] | None = None, prog: str = "python -m verispec.distill.instructions") -> int:
    """Parse arguments, build, write, report; returns the exit status."""
    parser = argparse.ArgumentParser(prog=prog,
                                     description="Build the offline instruction corpus for self-distillation.")
    parser.add_argument("--n", type=_positive, default=12000, help="number of instructions (default 12000)")
    parser.add_argument("--seed", type=_seed, default=0, help="RNG seed (default 0)")
    parser.add_argument("--out", required=True, help="output .jsonl file (its folder must exist)")
    parser.add_argument("--exclude", action="append", default=[], metavar="FILE",
                        help="an earlier corpus (.jsonl): write only instructions it lacks, each source "
                             "on the side of the split it has there (repeatable)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if out.is_dir():
        parser.error(f"--out {str(out)!r} is a directory; give a file name")
    if not out.parent.is_dir():
        parser.error(f"--out: folder {str(out.parent)!r} does not exist")
    known = []
    for path in args.exclude:
        if not Path(path).is_file():
            parser.error(f"--exclude: no file {path!r}")
        if Path(path).resolve() == out.resolve():
            parser.error(f"--exclude {path!r} is the --out file; write the new instructions elsewhere")
        try:
            known += read_jsonl(path)
        except ValueError as e:
            parser.error(f"--exclude: {e}")
    t0 = time.perf_counter()
    stats: dict = {}
    instructions = build_instructions(args.n, args.seed, stats=stats)
    if args.exclude:
        built = len(instructions)
        instructions = new_beside(instructions, known)
        stats.update(split_counts(instructions))
        print(f"{built - stats['total']} of the {built} built are in --exclude ({len(known)} instructions)")
    write_jsonl(instructions, out)
    print(f"{stats['total']} instructions in {time.perf_counter() - t0:.1f} s -> {out}")
    print(f"{'family':<14} {'train':>6} {'heldout':>8} {'total':>6}")
    for family, c in stats["families"].items():
        print(f"{family:<14} {c['train']:>6} {c['heldout']:>8} {c['train'] + c['heldout']:>6}")
    train = sum(c["train"] for c in stats["families"].values())
    held = sum(c["heldout"] for c in stats["families"].values())
    print(f"{'all':<14} {train:>6} {held:>8} {train + held:>6}")
    print(f"sources: {stats['sources']['train']} train, {stats['sources']['heldout']} heldout")
    print("dropped: " + ", ".join(f"{k} {v}" for k, v in sorted(stats["drops"].items()) if k != "candidates")
          + f" (of {stats['drops'].get('candidates', 0)} candidates)")
    if stats["total"] < args.n and not args.exclude:
        print(f"warning: only {stats['total']} of {args.n} instructions could be built", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
