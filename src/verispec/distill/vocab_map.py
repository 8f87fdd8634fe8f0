"""The vocab map: the target ids a draft can propose (its output rows), chosen from the labels.

A draft with a vocab map gives every token outside it probability 0, which keeps decoding exact.
The map is fixed once training starts (``out/checkpoints/vocab_map.safetensors``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors.torch import load_file

from .training import atomic_save
from .config import DistillConfig
from .dataset import LabelSet, sequence_weights

if TYPE_CHECKING:
    from ..drafters.eagle_head import EagleFiles
    from ..models import CausalLM


__all__ = ["choose_vocab_map", "coverage", "extend_map", "run_vocab_map"]


def choose_vocab_map(labels: LabelSet, size: int, always: Sequence[int] = (),
                     seq_weight: torch.Tensor | None = None) -> torch.Tensor:
    """The ``size`` tokens the teacher most often prefers (argmax counts, then top-k mass):
    ``[size]`` int64 ids, sorted. ``always`` ids are kept whatever their counts.

    ``seq_weight [N]`` weights each sequence's counts (as training samples them).
    """
    V = int(max(labels.topk_ids.max().item() + 1, max(always, default=0) + 1))
    w = labels.weight if seq_weight is None else labels.weight * seq_weight[:, None].to(labels.weight.dtype)
    counts = torch.zeros(V, dtype=torch.float64).index_add_(0, labels.topk_ids[..., 0].reshape(-1),
                                                            w.reshape(-1).double())
    mass = torch.zeros(V, dtype=torch.float64).index_add_(
        0, labels.topk_ids.reshape(-1), (labels.topk_logp.exp() * w[..., None]).reshape(-1).double())
    score = counts + 1e-3 * mass / max(float(mass.max()), 1e-12)
    for t in always:
        score[t] = float("inf")
    size = min(size, V)
    return torch.sort(score.topk(size).indices).values.long()


def extend_map(counts: torch.Tensor, keep: torch.Tensor | Sequence[int], size: int) -> torch.Tensor:
    """``keep`` (a map to extend, EOS) plus the ids of the highest ``counts [V]`` not in it, ``size``
    ids in all (fewer if fewer ids were counted at all; ties go to the lower id): ``[N]`` int64, sorted."""
    keep = torch.as_tensor(keep, dtype=torch.int64)
    if len(keep) and int(keep.max()) >= len(counts):
        counts = torch.cat([counts, counts.new_zeros(int(keep.max()) + 1 - len(counts))])
    taken = torch.zeros(len(counts), dtype=torch.bool)
    taken[keep] = True
    order = counts.argsort(descending=True, stable=True)
    order = order[~taken[order] & (counts[order] > 0)]
    return torch.unique(torch.cat([keep, order[: max(0, size - int(taken.sum()))]]))


def coverage(labels: LabelSet, vocab_map: torch.Tensor) -> float:
    """Share of (weighted) teacher argmaxes that are in the vocab map."""
    inside = torch.isin(labels.topk_ids[..., 0], vocab_map).float()
    return float((inside * labels.weight).sum() / labels.weight.sum())


def run_vocab_map(cfg: DistillConfig, out: Path, target: CausalLM, train: LabelSet, init: EagleFiles | None = None
                  ) -> torch.Tensor:
    """The run's vocab map, ``[N]`` int64 sorted target ids (``N = V`` for the full vocabulary).

    Once training has checkpointed, the stored map; when fine-tuning the EAGLE head files
    ``init``, that head's own map; otherwise :func:`choose_vocab_map` over ``train`` with
    ``cfg.vocab_size`` rows (EOS always in). A new map is stored before training starts.
    """
    V = target.model.config.vocab_size
    n_vocab = cfg.vocab_size if 0 < cfg.vocab_size < V else V
    eos = [target.tokenizer.eos_token_id] if target.tokenizer.eos_token_id is not None else []
    vmap_file = out / "checkpoints" / "vocab_map.safetensors"  # fixed once training starts
    started = any((out / "checkpoints" / n).is_file() for n in ("last.safetensors", "eagle-last.safetensors"))
    if vmap_file.is_file() and started:
        return load_file(vmap_file)["vocab_map"].long()
    if init is not None:  # fine-tuning keeps the head's own output rows
        vmap = init.vocab_map if init.vocab_map is not None else torch.arange(V)
        if int(vmap.max()) >= V:
            raise ValueError(f"init_from {cfg.init_from!r}: its vocab map has ids >= the target's vocabulary {V}")
    else:
        vmap = (choose_vocab_map(train, n_vocab, eos, sequence_weights(cfg, train)) if n_vocab < V
                else torch.arange(V))
    atomic_save({"vocab_map": vmap}, vmap_file)
    return vmap
