"""``verispec distill grow-map``: an EAGLE head with its vocab map grown, its weights unchanged.

The head drafts only the target ids of its vocab map; a token outside it is a rejection whatever
the head computed. The head's weights do not depend on the map (its output rows are the target's
own output embeddings, picked by the map), so a map can grow after training: the new head keeps
every id of the old map and adds the ids the target wrote most often in the answers of the given
archives. A larger map costs the draft step one output row per id.

``verispec distill grow-map --head eagle --archive A.safetensors [...] --size 20480 --out DIR``
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import torch

from ..exits import run_command
from .archive import AnswerArchive, read_archive
from .eagle_stage import init_head, new_folder_problem, save_head_whole
from .vocab_map import extend_map

__all__ = ["answer_counts", "grow_map", "main"]


def answer_counts(archives: Sequence[AnswerArchive]) -> torch.Tensor:
    """``[V]`` int64: how often each id is an answer token of ``archives`` (prompts not counted),
    ``V`` one past the largest id seen."""
    answers = [torch.tensor(a, dtype=torch.int64) for arc in archives for a in arc.answers()]
    return torch.bincount(torch.cat(answers)) if answers else torch.zeros(0, dtype=torch.int64)


def grow_map(vocab_map: torch.Tensor, archives: Sequence[AnswerArchive], size: int) -> torch.Tensor:
    """``vocab_map`` plus the answers' most used ids outside it, ``size`` ids in all: ``[size]`` int64,
    sorted (fewer if the answers use fewer ids)."""
    if size < len(vocab_map):
        raise ValueError(f"size {size} is smaller than the head's map ({len(vocab_map)} ids); a map only grows")
    return extend_map(answer_counts(archives), vocab_map, size)


def main(argv: Sequence[str] | None = None, prog: str = "python -m verispec.distill.grow_map") -> int:
    """Grow ``--head``'s map to ``--size`` ids with ``--archive``'s answers into ``--out`` (whole or not at all)."""
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    ap.add_argument("--head", required=True, help="head name or folder")
    ap.add_argument("--archive", nargs="+", required=True, help="answer archives (`distill pack`) whose answers "
                                                               "choose the new ids")
    ap.add_argument("--size", type=int, required=True, help="ids in the grown map")
    ap.add_argument("--out", required=True, help="output head folder (must not exist)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    if problem := new_folder_problem(out):
        ap.error(f"--out {problem}")
    try:
        files = init_head(args.head)
    except (ValueError, OSError) as e:
        ap.error(f"--head {args.head!r}: {e}")
    if files.vocab_map is None:
        ap.error(f"--head {args.head!r} drafts the whole vocabulary already (no vocab map)")
    archives = []
    for path in args.archive:
        try:
            archives.append(read_archive(Path(path)))
        except ValueError as e:
            ap.error(f"--archive: {e}")
    try:
        vmap = grow_map(files.vocab_map, archives, args.size)
    except ValueError as e:
        ap.error(f"--size: {e}")
    meta = {k: v for k, v in files.meta.items() if k not in ("format", "config")}
    meta["grown_map"] = {"from": len(files.vocab_map), "to": len(vmap), "archives": [Path(p).name for p in args.archive]}

    def write() -> int:
        save_head_whole(files.head, out, vocab_map=vmap, meta=meta)
        print(f"vocab map {len(files.vocab_map)} -> {len(vmap)} ids -> {out}")
        return 0

    return run_command("distill grow-map", write)


if __name__ == "__main__":
    raise SystemExit(main())
