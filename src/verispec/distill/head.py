"""Train an EAGLE head on the target's own answers: ``python -m verispec.distill.head``.

Input: answer shards written by ``python -m verispec.distill.answers --features`` (prompt +
answer tokens and the target's hidden states recorded while it generated). The head learns
only at answer positions (where it drafts; the prompt is context), from a head directory
(``--init-from``, e.g. the built-in ``eagle``) or from the pass-through start, and is exported
as a head directory with its held-out top-1 agreement per task family in the metadata.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from ..drafters.eagle_head import EagleHead
    from .eagle_train import FeatureSet
    from .features_on_disk import FeaturesOnDisk
    from ..models import CausalLM

__all__ = ["answer_vocab_map", "family_agreement", "family_weights", "load_answers", "main", "map_coverage",
           "train_head"]

BALANCE = ("none", "families")


def answer_vocab_map(data: FeatureSet, size: int, always: Sequence[int] | torch.Tensor = ()) -> torch.Tensor:
    """``always`` (e.g. EOS, or a map to extend) plus the tokens the target wrote most often in
    the answers of ``data`` (its own choices, so mostly its argmax), ``size`` ids in all (or
    fewer if the answers use fewer): ``[N]`` int64, sorted."""
    from .vocab_map import extend_map

    nxt = data.input_ids[:, 1:].long()
    scored = (data.weight[:, :-1].bool() & data.generated[:, :-1].bool())
    return extend_map(torch.bincount(nxt[scored]), always, size)


def map_coverage(data: FeatureSet, vocab_map: torch.Tensor, families: Sequence[str]) -> dict[str, float]:
    """Share of answer tokens in ``vocab_map``, per family and over all."""
    nxt = data.input_ids[:, 1:].long()
    scored = (data.weight[:, :-1].bool() & data.generated[:, :-1].bool())
    inmap = torch.isin(nxt, vocab_map) & scored
    fam = torch.tensor([sorted(set(families)).index(f) for f in families])
    out = {}
    for i, name in enumerate(sorted(set(families))):
        rows = fam == i
        out[name] = float(inmap[rows].sum() / scored[rows].sum().clamp_min(1))
    out["all"] = float(inmap.sum() / scored.sum().clamp_min(1))
    return out


def family_weights(families: Sequence[str]) -> torch.Tensor:
    """``[N]`` float64 drawing weights, one per sequence, under which every family is drawn
    equally often (each sequence ``1 / count(its family)``; within a family, uniform). The data
    runs answer whatever the instruction corpus holds (most of it rag, translation and
    summarization, whose passages make many instructions); the held-out measure and the chat
    workload weigh the families equally, so training can too."""
    if not len(families):
        raise ValueError("no sequences to weigh")
    counts = Counter(families)
    return torch.tensor([1.0 / counts[f] for f in families], dtype=torch.float64)


def load_answers(paths: Sequence[Path], taps: bool = True,
                 on_disk: bool = False) -> tuple[FeatureSet | FeaturesOnDisk, list[str]]:
    """Answer shards (with features) as one :class:`FeatureSet`, and each sequence's family
    (``taps``: with the shards' taps, where every shard has the same). ``on_disk``: features and
    taps stay in the shards and are read batch by batch (:class:`FeaturesOnDisk`)."""
    from .eagle_train import FeatureSet
    from .features_on_disk import FeaturesOnDisk
    from .answers import read_answer_index

    if not paths:
        raise ValueError("no answer shards given")
    families: list[str] = []
    for p in paths:
        _, fam, names = read_answer_index(p)
        if "features" not in names:
            raise ValueError(f"{p} has no features: write it with `distill.answers --features`")
        families += fam
    return (FeaturesOnDisk(paths, taps=taps) if on_disk else FeatureSet.load(paths, taps=taps)), families


def family_agreement(head: EagleHead, target: CausalLM, vocab_map: torch.Tensor, held: FeatureSet,
                     families: Sequence[str], depth: int) -> dict[str, dict]:
    """Held-out top-1 agreement with the target per unrolled step, at answer positions, per
    family and over all (``"all"``)."""
    from .eagle_train import evaluate_eagle

    model = target.model
    embed, out_full = model.get_input_embeddings(), model.get_output_embeddings().weight.detach()
    out = {}
    for fam in sorted(set(families)) + ["all"]:
        idx = torch.tensor([i for i, f in enumerate(families) if fam in (f, "all")])
        out[fam] = evaluate_eagle(head, embed, out_full, vocab_map, held.subset(idx), depth, answers_only=True)
        out[fam]["sequences"] = len(idx)
    return out


def train_head(target: CausalLM, train_paths: Sequence[Path], held_paths: Sequence[Path], out: Path, *,
               init_from: str = "eagle", map_size: int = 0, steps: int = 1000, lr: float = 5e-4, batch_size: int = 4, depth: int = 3,
               noise: float = 0.05, seed: int = 0, held_eval: int = 64, time_budget_s: float = 0.0,
               autocast: torch.dtype | None = None, balance: str = "none", taps: Sequence[int] | None = None,
               layers: int | None = None, top1_weight: float = 0.0, opening: tuple[int, float] = (0, 1.0),
               log: Callable[[str], None] = print) -> dict:
    """Train, export to ``out`` and return a summary: data sizes, the training result, and the
    per-family held-out agreement of the initial and of the trained head. ``map_size`` > 0:
    the initial head's vocab map grown to ``map_size`` ids with the tokens the answers use most
    (:func:`answer_vocab_map`); the head's weights do not depend on the map, only its output
    rows do. ``autocast``: train with the forward's matrix products in that dtype (see
    :func:`verispec.distill.eagle_train.train_eagle`); evaluation stays float32. ``balance``: ``"none"``
    draws training sequences uniformly, ``"families"`` draws every family equally often
    (:func:`family_weights`). ``taps``: the target's decoder layers the head reads beside its final
    features (default: the init's; see :func:`verispec.distill.eagle_train.train_eagle`); the
    shards must hold them (`distill features --taps`). ``layers``: the head's decoder layers
    (default: the init's; more start as the init's drafts, :func:`verispec.drafters.eagle_head.deepen`).
    ``top1_weight``: weight of the cross-entropy at the target's argmax beside the KL
    (:func:`verispec.distill.eagle_train.unrolled_loss`). ``opening = (n, x)``: the first n
    positions of every answer weigh x times as much in the loss (default: every position alike)."""
    from ..drafters.eagle_head import save_eagle_head
    from .eagle_train import train_eagle
    from .eagle_stage import init_head

    if balance not in BALANCE:
        raise ValueError(f"balance must be one of {BALANCE}, got {balance!r}")
    init = init_head(init_from) if init_from else None
    if init is None or init.vocab_map is None:
        raise ValueError("init_from must name a head directory with a vocab map (e.g. 'eagle')")
    if taps is None:
        taps = init.head.feature_taps
    train, train_fam = load_answers(train_paths, taps=bool(taps), on_disk=True)  # read batch by batch
    held, held_fam = load_answers(held_paths, taps=bool(taps))
    before_cov = map_coverage(held, init.vocab_map, held_fam)
    vmap = init.vocab_map
    if map_size:
        always = torch.cat([init.vocab_map, torch.tensor(sorted(target.eos_token_ids), dtype=torch.int64)])
        vmap = answer_vocab_map(train, map_size, always=always)
    coverage = map_coverage(held, vmap, held_fam)
    log(f"held-out answer tokens in the map: {before_cov['all']:.3f} (initial) -> {coverage['all']:.3f}")
    answer_tokens = int((train.weight.bool() & train.generated.bool()).sum())
    log(f"train: {len(train)} sequences, {answer_tokens} answer positions; held-out: {len(held)}")
    per_family = dict(sorted(Counter(train_fam).items()))
    drawn = " (each family drawn equally often)" if balance == "families" else ""
    log(f"train sequences per family: {per_family}{drawn}")
    sample_weight = family_weights(train_fam) if balance == "families" else None
    before = family_agreement(init.head, target, init.vocab_map, held, held_fam, depth)
    log("before: " + json.dumps({k: round(v["agree"][0], 4) for k, v in before.items()}))
    t0 = time.perf_counter()
    head, result = train_eagle(target.model, train, held, vmap, out, steps=steps, batch_size=batch_size, lr=lr,
                               depth=depth, noise=noise, seed=seed, init_from=init.head, answers_only=True,
                               held_eval=held_eval, eval_every=max(50, steps // 10), ckpt_every=50,
                               sample_weight=sample_weight, time_budget_s=time_budget_s, autocast=autocast,
                               taps=taps, layers=layers, top1_weight=top1_weight, opening=opening, log=log)
    seconds = time.perf_counter() - t0
    after = family_agreement(head, target, vmap, held, held_fam, depth)
    log("after: " + json.dumps({k: round(v["agree"][0], 4) for k, v in after.items()}))
    summary = {"train_sequences": len(train), "train_answer_positions": answer_tokens, "held_sequences": len(held),
               "train_families": per_family, "balance": balance, "init_from": init_from, "map_size": len(vmap),
               "map_coverage_before": before_cov,
               "map_coverage": coverage, "steps": result["steps"], "lr": lr, "batch_size": batch_size, "depth": depth,
               "seed": seed, "top1_weight": top1_weight, "opening": {"tokens": opening[0], "weight": opening[1]},
               "autocast": str(autocast) if autocast is not None else None, "taps": list(taps),
               "layers": len(head.body.layers), "seconds": seconds, "train": result, "before": before, "after": after}
    save_eagle_head(head, out, vocab_map=vmap, meta={"target": target.name, "train": summary})
    return summary


def main(argv: Sequence[str] | None = None, prog: str = "python -m verispec.distill.head") -> int:
    """Command line: ``--train DIR... --heldout DIR --out DIR [--init-from eagle] [--steps N]``."""
    import argparse

    from ..exits import run_command

    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument("--train", nargs="+", required=True, help="folders of answer shards (with features)")
    ap.add_argument("--heldout", required=True, help="folder of held-out answer shards (with features)")
    ap.add_argument("--out", required=True, help="output head directory")
    ap.add_argument("--target", default="smollm2-135m")
    ap.add_argument("--init-from", default="eagle")
    ap.add_argument("--map-size", type=int, default=0,
                    help="grow the init's vocab map to this many ids with the answers' most used tokens (0 = keep it)")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--depth", type=int, default=3,
                    help="draft steps unrolled per position in training (step s reads the head's own features "
                         "of the steps before it, as drafting does; default 3)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--top1-weight", type=float, default=0.0,
                    help="add this weight x the head's cross-entropy at the target's argmax (the token greedy "
                         "decoding keeps) to the KL against the target's distribution (default 0: KL only)")
    ap.add_argument("--opening-tokens", type=int, default=0,
                    help="the first N positions of every answer weigh --opening-weight times as much (0 = off)")
    ap.add_argument("--opening-weight", type=float, default=1.0,
                    help="weight of an answer's first --opening-tokens positions against 1 for the rest")
    ap.add_argument("--time-budget", type=float, default=0.0,
                    help="seconds of training: fewer steps than --steps if they would not fit (0 = no limit)")
    ap.add_argument("--max-shards", type=int, default=0, help="use the first N training shards (0 = all)")
    ap.add_argument("--balance", default="none", choices=BALANCE,
                    help="families: draw every task family equally often (default: every sequence equally often)")
    ap.add_argument("--precision", default="float32", choices=("float32", "bfloat16", "auto"),
                    help="bfloat16: the training forward's matrix products in bfloat16 (autocast; weights, "
                         "optimizer and softmaxes stay float32), faster on some CPUs and slower on others (both "
                         "seen with avx512_bf16); auto: whichever multiplies matrices faster on this machine")
    ap.add_argument("--taps", default=None, metavar="L,L,...",
                    help="also read the residual stream after these decoder layers of the target (1-based, as "
                         "EAGLE-3 reads low and middle layers; the shards need them: `distill features --taps`); "
                         "default: the init's")
    ap.add_argument("--layers", type=int, default=None,
                    help="decoder layers of the head (default: the init's); layers beyond the init's start "
                         "adding nothing, so training starts from its drafts")
    args = ap.parse_args(argv)

    def body() -> int:
        from ..models import load_causal_lm, matmul_dtype
        from .answers import answer_shards
        from .refeature import parse_taps

        if not 1 <= args.steps <= 10_000_000:
            raise ValueError(f"--steps must be in 1..10000000 (optimizer steps), got {args.steps}")
        if not 0 < args.lr <= 1:
            raise ValueError(f"--lr must be in (0, 1] (the peak learning rate), got {args.lr}")
        if not 1 <= args.batch_size <= 4096:
            raise ValueError(f"--batch-size must be in 1..4096 (sequences per step), got {args.batch_size}")
        if not 1 <= args.depth <= 16:
            raise ValueError(f"--depth must be in 1..16 (unrolled draft steps), got {args.depth}")
        if not 0 <= args.time_budget < float("inf"):
            raise ValueError(f"--time-budget must be >= 0 seconds (0 = no limit), got {args.time_budget}")
        if args.map_size < 0:
            raise ValueError(f"--map-size must be >= 0 (0 = keep the init's map), got {args.map_size}")
        if args.max_shards < 0:
            raise ValueError(f"--max-shards must be >= 0 (0 = all), got {args.max_shards}")
        if not 0 <= args.top1_weight <= 100:
            raise ValueError(f"--top1-weight must be in 0..100 (a loss weight), got {args.top1_weight}")
        if not 0 <= args.opening_tokens <= 100_000:
            raise ValueError(f"--opening-tokens must be in 0..100000 (answer positions), got {args.opening_tokens}")
        if not 0 < args.opening_weight <= 100:
            raise ValueError(f"--opening-weight must be in (0, 100] (a loss weight), got {args.opening_weight}")
        if args.layers is not None and not 1 <= args.layers <= 8:
            raise ValueError(f"--layers must be in 1..8 (decoder layers of the head), got {args.layers}")
        train_paths = [p for d in args.train for p in answer_shards(Path(d))]
        if args.max_shards:
            train_paths = train_paths[: args.max_shards]
        held_paths = answer_shards(Path(args.heldout))
        target = load_causal_lm(args.target)
        taps = None if args.taps is None else parse_taps(args.taps, target.model.config, "--taps")
        precision = matmul_dtype(args.precision)
        autocast = precision if precision != torch.float32 else None
        if args.precision == "auto":
            print(f"--precision auto: {str(precision).removeprefix('torch.')} multiplies faster on this CPU")
        out = Path(args.out)
        summary = train_head(target, train_paths, held_paths, out, init_from=args.init_from, map_size=args.map_size, steps=args.steps,
                             lr=args.lr, batch_size=args.batch_size, depth=args.depth, seed=args.seed,
                             time_budget_s=args.time_budget, autocast=autocast, balance=args.balance, taps=taps,
                             layers=args.layers, top1_weight=args.top1_weight,
                             opening=(args.opening_tokens, args.opening_weight))
        (out / "train-summary.json").write_text(json.dumps(summary, indent=2))
        return 0

    return run_command("distill head", body)


if __name__ == "__main__":
    raise SystemExit(main())
