"""The student's objective against the teacher's top-k labels, and its held-out evaluation.

Both compare over the vocab map: the teacher's top-k is renormalised over the ids inside the
map, and ``inverse [V]`` int64 maps a target id to its vocab-map row (-1 outside).
"""

from __future__ import annotations

import torch

from .dataset import LabelSet
from .student import student_logits

__all__ = ["distill_loss", "evaluate"]


def _compare(logq: torch.Tensor, topk_ids: torch.Tensor, topk_logp: torch.Tensor, inverse: torch.Tensor
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Student log-probs ``logq [..., N]`` vs teacher labels ``[..., k]``.

    Returns ``kl [...]`` = KL(teacher renormalised over the map || student), ``q_at [..., k]``
    (the student's log-probs at the teacher's ids), ``inside [..., k]`` (id in the map) and
    ``agree [...]`` (student argmax = teacher argmax, a miss when that is outside the map).
    """
    rows = inverse[topk_ids]  # [..., k]
    inside = rows >= 0
    p = topk_logp.exp() * inside
    p = p / p.sum(-1, keepdim=True).clamp_min(1e-12)
    q_at = logq.gather(-1, rows.clamp_min(0))  # [..., k]
    kl = (p * (torch.log(p.clamp_min(1e-12)) - q_at)).sum(-1)
    agree = ((logq.argmax(-1) == rows[..., 0]) & inside[..., 0]).float()
    return kl, q_at, inside, agree


def distill_loss(logits: torch.Tensor, batch: LabelSet, inverse: torch.Tensor, ce_weight: float
                 ) -> tuple[torch.Tensor, dict[str, float]]:
    """KL(teacher top-k renormalised over the vocab map || student) + ce_weight x CE(teacher argmax),
    averaged over the weighted positions whose top-k touches the map.

    ``logits [..., N]`` are the student's over the vocab map, ``batch`` the labels of the same
    positions. Returns the loss and floats ``kl`` (mean) and ``agree`` (top-1 agreement).
    """
    logq = torch.log_softmax(logits.float(), dim=-1)  # [..., N]
    kl, q_at, inside, agree = _compare(logq, batch.topk_ids, batch.topk_logp, inverse)
    top_in = inside[..., 0]
    ce = -q_at[..., 0] * top_in
    w = batch.weight * (inside.any(-1))
    denom = w.sum().clamp_min(1.0)
    loss = ((kl + ce_weight * ce) * w).sum() / denom
    return loss, {"kl": float((kl.detach() * w).sum() / denom), "agree": float((agree * batch.weight).sum()
                                                                      / batch.weight.sum().clamp_min(1.0))}


@torch.no_grad()
def evaluate(student, labels: LabelSet, vocab_map: torch.Tensor, inverse: torch.Tensor, batch: int = 8) -> dict:
    """Held-out KL (over the vocab map) and top-1 agreement with the target, overall and by kind
    (``kl_/agree_/tokens_`` + ``all``, ``human``, ``generated``), ``batch`` sequences per pass.

    Agreement counts a position as a miss when the teacher's argmax is outside the vocab map.
    """
    student.eval()
    tot = {"all": [0.0, 0.0, 0.0], "human": [0.0, 0.0, 0.0], "generated": [0.0, 0.0, 0.0]}
    for s in range(0, len(labels), batch):
        b = labels.subset(torch.arange(s, min(s + batch, len(labels))))
        logq = torch.log_softmax(student_logits(student, b.input_ids, vocab_map).float(), -1)
        kl, _, inside, agree = _compare(logq, b.topk_ids, b.topk_logp, inverse)
        for name, m in (("all", b.weight), ("human", b.weight * ~b.generated), ("generated", b.weight * b.generated)):
            tot[name][0] += float((kl * m * inside.any(-1)).sum())
            tot[name][1] += float((agree * m).sum())
            tot[name][2] += float(m.sum())
    student.train()
    out = {}
    for name, (kl, ag, n) in tot.items():
        if n:
            out[f"kl_{name}"] = kl / n
            out[f"agree_{name}"] = ag / n
            out[f"tokens_{name}"] = int(n)
    return out
