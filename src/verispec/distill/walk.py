"""The greedy chain walked over held-out answers without the engine: the alpha a head would get.

Teacher-forced agreement scores a head's first step at every answer position, but the engine asks
for a first draft only where the last pass ended (after a rejection or a fully accepted draft),
and drafts after the first read the head's own features. This walk replays greedy speculative
decoding on each held-out answer from the head's unrolled predictions: draft up to K tokens,
accept the prefix that agrees with the target's argmax, go on one token past it (the target's
own), and count what the engine's bench counts (alpha = accepted / tested drafts). ``first``
keeps only passes that start within the first N answer tokens.

With several heads, each one after the first is compared with the first on the same answers: the
difference of their alphas with its 95% paired bootstrap interval over answers
(:func:`verispec.bench.intervals.bootstrap_difference`), so a change of a few thousandths in a
family of 40 answers reads as noise or as a real gain or loss.

``python -m verispec.distill.walk --head eagle [--head DIR ...] --heldout DIR --k 4 [--first 64] [--by-family]``
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

import torch

from ..bench.intervals import bootstrap_difference

__all__ = ["WalkCounts", "alpha_difference", "walk_chain", "walk_head", "main"]


@dataclass
class WalkCounts:
    """Counts of one walk: passes, their first drafts (accepted, and after a rejection / after a
    fully accepted pass), and drafts accepted and tested (a draft is tested when all before it in
    its pass were accepted); ``answer_accepted`` / ``answer_tested``: the last two per answer walked,
    in the order of the answers (one entry for every row, a row too short to walk counting 0)."""

    passes: int = 0
    first_accepted: int = 0
    after_rejection: int = 0
    after_rejection_accepted: int = 0
    after_full: int = 0
    after_full_accepted: int = 0
    accepted: int = 0
    tested: int = 0
    answer_accepted: list[int] = field(default_factory=list)
    answer_tested: list[int] = field(default_factory=list)

    @property
    def alpha(self) -> float:
        return self.accepted / max(1, self.tested)

    @property
    def first_rate(self) -> float:
        return self.first_accepted / max(1, self.passes)

    def add(self, other: WalkCounts) -> None:
        """Add ``other``'s counts to these (its answers after these ones)."""
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


def walk_chain(hits: Sequence[torch.Tensor], scored: torch.Tensor, first: int = 0) -> WalkCounts:
    """Walk the greedy chain over each row.

    ``hits[s] [B, T]`` bool: draft step ``s + 1`` made at position ``t`` agrees with the target
    (step 1 at ``t`` guesses token ``t + 1`` from real features; step 2 at ``t + 1`` the one after,
    from step 1's feature; ...). ``scored [B, T]`` bool: answer positions. A walk starts ``K``
    positions into the answer (where every step has real features behind it) and ends where a
    full pass no longer fits; ``first`` > 0 ends it ``first`` positions after the answer starts.
    """
    counts = WalkCounts()
    for r in range(scored.shape[0]):
        accepted, tested = counts.accepted, counts.tested
        _walk_row(hits, scored, r, first, counts)
        counts.answer_accepted.append(counts.accepted - accepted)
        counts.answer_tested.append(counts.tested - tested)
    return counts


def _walk_row(hits: Sequence[torch.Tensor], scored: torch.Tensor, r: int, first: int, counts: WalkCounts) -> None:
    """Walk row ``r`` (see :func:`walk_chain`), adding its passes to ``counts``."""
    k = len(hits)
    pos = scored[r].nonzero().flatten().tolist()
    if len(pos) < k + 2:
        return
    end = pos[-1] if first <= 0 else min(pos[-1], pos[0] + first)
    p, last = pos[k], None
    while p + k <= end:
        n = 0
        while n < k and bool(hits[n][r, p + n]):
            n += 1
        counts.passes += 1
        counts.first_accepted += int(n > 0)
        if last == "rejection":
            counts.after_rejection += 1
            counts.after_rejection_accepted += int(n > 0)
        elif last == "full":
            counts.after_full += 1
            counts.after_full_accepted += int(n > 0)
        counts.accepted += n
        counts.tested += n + (n < k)
        last = "full" if n == k else "rejection"
        p += n + 1  # the accepted drafts, then the target's own token


def alpha_difference(base: WalkCounts, other: WalkCounts) -> tuple[float, tuple[float, float] | None]:
    """``(other's alpha - base's alpha, its 95% paired bootstrap interval over answers or None)``:
    both walks over the same answers in the same order."""
    if len(base.answer_tested) != len(other.answer_tested):
        raise ValueError(f"alpha_difference: walks over {len(base.answer_tested)} and "
                         f"{len(other.answer_tested)} answers; compare walks over the same answers")
    interval = bootstrap_difference(other.answer_accepted, other.answer_tested, base.answer_accepted,
                                    base.answer_tested)
    return other.alpha - base.alpha, interval


def _against(base: tuple[str, WalkCounts] | None, counts: WalkCounts) -> str:
    """``"; against NAME +0.004 [-0.002, +0.010]"`` (nothing for the first head)."""
    if base is None:
        return ""
    diff, iv = alpha_difference(base[1], counts)
    span = "" if iv is None else f" [{iv[0]:+.3f}, {iv[1]:+.3f}]"
    return f"; against {base[0]} {diff:+.3f}{span}"


@torch.no_grad()
def walk_head(head, vocab_map: torch.Tensor, target, held, k: int = 4, first: int = 0,
              batch: int = 4) -> tuple[float, WalkCounts]:
    """``(teacher-forced step-1 agreement over all answer positions, walk counts)`` of ``head``
    (an EAGLE head with its ``vocab_map``) for ``target`` (a loaded ``CausalLM``) on ``held`` (a
    ``FeatureSet`` of answers with features, as ``verispec.distill.head.load_answers`` reads)."""
    from .eagle_train import held_out_batches

    embed, out_full = target.model.get_input_embeddings(), target.model.get_output_embeddings().weight.detach()
    rows = out_full[vocab_map]  # [V_map, H]
    counts, agree, scored_total = WalkCounts(), 0, 0
    for f, w, outs in held_out_batches(head.eval(), embed, held, k, batch, answers_only=True):
        want = (f @ out_full.T).argmax(-1)  # [B, T]: the target's next token at each position
        hits = [vocab_map[(o @ rows.T).argmax(-1)] == want for o in outs]
        scored = w > 0
        agree += int(hits[0][scored].sum())
        scored_total += int(scored.sum())
        counts.add(walk_chain(hits, scored, first))
    return agree / max(1, scored_total), counts


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m verispec.distill.walk", description=__doc__.split("\n")[0])
    ap.add_argument("--head", action="append", required=True, help="head name or folder (repeatable)")
    ap.add_argument("--heldout", required=True, help="folder of held-out answer shards with features")
    ap.add_argument("--k", type=int, default=4, help="drafts per pass (default 4)")
    ap.add_argument("--first", type=int, default=0, help="only passes within the first N answer tokens (0 = all)")
    ap.add_argument("--target", default="smollm2-135m")
    ap.add_argument("--by-family", action="store_true", help="also alpha per task family")
    args = ap.parse_args(argv)
    if args.k < 1:
        ap.error(f"--k must be >= 1, got {args.k}")
    if args.first < 0:
        ap.error(f"--first must be >= 0, got {args.first}")
    held = Path(args.heldout)
    shards = sorted(held.rglob("*.safetensors")) if held.is_dir() else []
    if not shards:
        ap.error(f"--heldout {held}: no answer shards (*.safetensors) there or in its folders")
    from ..models import load_causal_lm
    from .eagle_stage import init_head
    from .head import load_answers

    heads = {}
    for name in args.head:
        try:
            heads[name] = init_head(name)
        except (ValueError, OSError) as e:
            ap.error(f"--head {name!r}: {e}")
    target = load_causal_lm(args.target)
    answers, families = load_answers(shards)
    span = "whole answers" if args.first == 0 else f"first {args.first} answer tokens"
    if len(heads) > 1:
        print(f"against {args.head[0]}: the alpha difference, 95% paired bootstrap interval over answers")
    first: dict[str, tuple[str, WalkCounts]] = {}  # family ("" = all) -> the first head's walk
    for name, init in heads.items():
        tf, c = walk_head(init.head, init.vocab_map, target, answers, args.k, args.first)
        print(f"{name}: step-1 agreement {tf:.3f} over all answer positions; walk (K = {args.k}, {span}): "
              f"first draft accepted {c.first_rate:.3f} (after a rejection "
              f"{c.after_rejection_accepted / max(1, c.after_rejection):.3f}, n {c.after_rejection}; after a full "
              f"accept {c.after_full_accepted / max(1, c.after_full):.3f}, n {c.after_full}); alpha {c.alpha:.3f} "
              f"({c.accepted} of {c.tested} tested, {c.passes} passes){_against(first.get(''), c)}")
        first.setdefault("", (name, c))
        for family in sorted(set(families)) if args.by_family else ():
            rows = torch.tensor([i for i, f in enumerate(families) if f == family])
            tf, c = walk_head(init.head, init.vocab_map, target, answers.subset(rows), args.k, args.first)
            print(f"  {family:<15} {len(rows):>4} answers: step-1 agreement {tf:.3f}, alpha {c.alpha:.3f} "
                  f"({c.accepted} of {c.tested}), first draft accepted {c.first_rate:.3f}"
                  f"{_against(first.get(family), c)}")
            first.setdefault(family, (name, c))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
