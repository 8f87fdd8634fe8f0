"""``verispec distill average``: one EAGLE head whose weights are the mean of several heads'.

Heads fine-tuned from the same weights on different answers lie close enough together that the
mean of their weights is a head too, and often a better one than each (weight averaging, "model
soups"): run 25 of the shipped head is the mean of runs 23 and 24, both trained from run 19. The
heads must have the same shape (config) and the same vocab map; the mean is taken in float32 and
saved as :func:`verispec.drafters.eagle_head.save_eagle_head` saves any head.

``verispec distill average --head DIR --head DIR [...] --out DIR [--history eagle]``

The output's ``eagle_config.json`` keeps how the head was made: ``average_of`` (each head and what
made it) and, with ``--history``, ``earlier_runs`` (the start's earlier runs, then the start's own
record). A mean of a mean would copy its start's whole record, nested once more each round; instead
a record that repeats an earlier run is written ``{"same_as": "earlier_runs[j]"}``
(:func:`compact_history`), so the file grows by one record per round.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import torch

from ..drafters.eagle_head import EagleFiles, EagleHead
from ..exits import run_command
from .eagle_stage import init_head, new_folder_problem, save_head_whole

__all__ = ["average_heads", "compact_history", "expand_history", "main", "run_record"]

_REF = "same_as"


def run_record(meta: dict) -> dict | None:
    """What made a head, from its ``eagle_config.json``: its training record, or for a head made
    without training (a mean, a grown map) the heads it is the mean of and how its map grew."""
    if "train" in meta:
        return meta["train"]
    return {k: meta[k] for k in ("average_of", "grown_map") if k in meta} or None


def _ref_index(x: object) -> int | None:
    """j for a reference ``{"same_as": "earlier_runs[j]"}``, else None."""
    if isinstance(x, dict) and set(x) == {_REF} and isinstance(x[_REF], str):
        ref = x[_REF]
        if ref.startswith("earlier_runs[") and ref.endswith("]") and ref[13:-1].isdigit():
            return int(ref[13:-1])
    return None


def expand_history(record: object, runs: list) -> object:
    """``record`` with every reference into ``runs`` (an ``earlier_runs`` list as written) replaced
    by the run it names, itself expanded (run j may refer to runs before it only); a reference
    that points past that is an error."""
    def expand(x: object, limit: int) -> object:
        j = _ref_index(x)
        if j is not None:
            if j >= limit:
                raise ValueError(f"its history refers to {x[_REF]} where only {limit} earlier runs precede")
            return expand(runs[j], j)
        if isinstance(x, dict):
            return {k: expand(v, limit) for k, v in x.items()}
        if isinstance(x, list):
            return [expand(v, limit) for v in x]
        return x
    return expand(record, len(runs))


def compact_history(meta: dict) -> dict:
    """``meta`` (with its records expanded) as written: inside each earlier run and in the rest of
    ``meta``, every record equal to an earlier run before it replaced by a reference to that run."""
    runs = meta.get("earlier_runs") or []

    def compact(x: object, before: int) -> object:
        if isinstance(x, dict):
            j = next((j for j in range(before) if runs[j] == x), None)
            if j is not None:
                return {_REF: f"earlier_runs[{j}]"}
            return {k: compact(v, before) for k, v in x.items()}
        if isinstance(x, list):
            return [compact(v, before) for v in x]
        return x

    out = {k: (v if k == "config" else compact(v, len(runs))) for k, v in meta.items() if k != "earlier_runs"}
    if "earlier_runs" in meta:  # run i may repeat runs before it only
        out["earlier_runs"] = [x if not isinstance(x, dict) else {k: compact(v, i) for k, v in x.items()}
                               for i, x in enumerate(runs)]
    return out


def average_heads(heads: Sequence[EagleFiles]) -> EagleHead:
    """The head whose every weight is the mean of ``heads``' (two or more of one config and map)."""
    if len(heads) < 2:
        raise ValueError(f"average: give two or more heads, got {len(heads)}")
    first = heads[0]
    for i, h in enumerate(heads[1:], 2):
        if h.head.config.to_dict() != first.head.config.to_dict():
            raise ValueError(f"average: head {i} has another shape (config) than head 1")
        same_map = (h.vocab_map is None and first.vocab_map is None) or (
            h.vocab_map is not None and first.vocab_map is not None and torch.equal(h.vocab_map, first.vocab_map))
        if not same_map:
            raise ValueError(f"average: head {i} has another vocab map than head 1")
    states = [h.head.state_dict() for h in heads]
    mean = {k: torch.stack([s[k].float() for s in states]).mean(0) for k in states[0]}
    out = EagleHead(first.head.config)
    out.load_state_dict(mean)
    return out


def main(argv: Sequence[str] | None = None, prog: str = "python -m verispec.distill.average") -> int:
    """Average the ``--head``s into ``--out`` (written whole or not at all)."""
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    ap.add_argument("--head", action="append", required=True, help="head name or folder (give two or more)")
    ap.add_argument("--out", required=True, help="output head folder (must not exist)")
    ap.add_argument("--history", help="head whose earlier runs and training record the output keeps as its "
                                      "earlier runs (the heads' common starting point, say eagle)")
    args = ap.parse_args(argv)
    if len(args.head) < 2:
        ap.error(f"--head: give two or more heads to average, got {len(args.head)}")
    out = Path(args.out)
    if problem := new_folder_problem(out):
        ap.error(f"--out {problem}")
    loaded = {}
    for name in [*args.head, *([args.history] if args.history else [])]:
        try:
            loaded[name] = init_head(name)
        except (ValueError, OSError) as e:
            flag = "--history" if name == args.history and name not in args.head else "--head"
            ap.error(f"{flag} {name!r}: {e}")
    heads = [loaded[n] for n in args.head]
    try:
        head = average_heads(heads)
    except ValueError as e:
        ap.error(f"--head: {e}")
    made = {}  # per head: (its earlier runs, what made it), references resolved in its own history
    for name, files in loaded.items():
        earlier = files.meta.get("earlier_runs") or []
        try:
            made[name] = ([expand_history(r, earlier[:i]) for i, r in enumerate(earlier)],
                          expand_history(run_record(files.meta), earlier))
        except ValueError as e:
            flag = "--history" if name == args.history and name not in args.head else "--head"
            ap.error(f"{flag} {name!r}: {e}")
    meta = {"target": heads[0].meta.get("target"),
            "average_of": [{"head": n, "train": made[n][1]} for n in args.head]}
    if args.history:
        runs, record = made[args.history]
        meta["earlier_runs"] = [*runs, *filter(None, [record])]
    meta = compact_history(meta)

    def write() -> int:
        save_head_whole(head, out, vocab_map=heads[0].vocab_map, meta=meta)
        print(f"the mean of {len(heads)} heads -> {out}")
        return 0

    return run_command("distill average", write)


if __name__ == "__main__":
    raise SystemExit(main())
