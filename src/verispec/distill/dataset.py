"""Label shards in memory, for training and evaluation, and how often training draws each sequence."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file

from .config import KINDS, DistillConfig

__all__ = ["LabelSet", "label_files", "sequence_weights"]


def _pad_to(x: torch.Tensor, length: int) -> torch.Tensor:
    """Right-pad ``[N, L]`` or ``[N, L, k]`` with zeros to ``length`` positions."""
    return torch.nn.functional.pad(x, (0, 0, 0, length - x.shape[1]) if x.ndim == 3 else (0, length - x.shape[1]))


@dataclass
class LabelSet:
    """Label shards in memory: ``input_ids [N, L]`` int64, ``topk_ids [N, L, k]`` int64,
    ``topk_logp [N, L, k]`` float32, ``weight [N, L]`` float32, ``generated [N, L]`` bool."""

    input_ids: torch.Tensor
    topk_ids: torch.Tensor
    topk_logp: torch.Tensor
    weight: torch.Tensor
    generated: torch.Tensor
    kind: torch.Tensor | None = None  # [N] index into KINDS per sequence

    @classmethod
    def load(cls, paths: Sequence[Path]) -> LabelSet:
        """Concatenate shards; shorter sequences (chat shards are longer) are right-padded, weight 0."""
        shards = [load_file(p) for p in paths]
        if not shards:
            raise ValueError("no label shards")
        L = max(s["input_ids"].shape[1] for s in shards)
        cat = {k: torch.cat([_pad_to(s[k], L) for s in shards]) for k in shards[0]}
        kinds = torch.cat([torch.full((len(s["input_ids"]),), KINDS.index(Path(p).name.split("-")[1]))
                           for p, s in zip(paths, shards)])
        return cls(cat["input_ids"].long(), cat["topk_ids"].long(), cat["topk_logp"].float(),
                   cat["weight"].float(), cat["generated"].bool(), kinds)

    def __len__(self) -> int:
        return len(self.input_ids)

    def subset(self, idx: torch.Tensor) -> LabelSet:
        """The sequences ``idx`` (``[n]`` indices) as a new set."""
        return LabelSet(self.input_ids[idx], self.topk_ids[idx], self.topk_logp[idx], self.weight[idx],
                        self.generated[idx], None if self.kind is None else self.kind[idx])


def sequence_weights(cfg: DistillConfig, labels: LabelSet) -> torch.Tensor:
    """``[N]`` float64 sampling weight per training sequence: def-header and chat continuations
    are oversampled by ``def_oversample`` / ``chat_weight``."""
    w = torch.ones(len(labels), dtype=torch.float64)
    if labels.kind is not None:
        w[labels.kind == KINDS.index("sdd")] = cfg.def_oversample
        w[labels.kind == KINDS.index("chat")] = cfg.chat_weight
    return w


def label_files(out: Path, split: str) -> list[Path]:
    """The label shards of ``split`` ("train" or "heldout") under ``out/labels/``, sorted."""
    return sorted((out / "labels").glob(f"{split}-*-*.safetensors"))
