"""The training stage for the student: AdamW on :func:`~verispec.distill.loss.distill_loss`,
resumable from ``out/checkpoints/last.safetensors`` (model + AdamW state, written atomically every
``ckpt_every`` steps). A resumed run replays the batch stream, so it sees the same batches as an
uninterrupted one."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from .training import cosine_lr, load_training_state, save_training_state
from .config import DistillConfig, mix
from .dataset import LabelSet, sequence_weights
from .loss import distill_loss, evaluate
from .progress import progress_bar
from .student import build_student

if TYPE_CHECKING:
    from transformers import LlamaForCausalLM

    from ..models import CausalLM


__all__ = ["train_student"]


def _save_checkpoint(path: Path, student, opt: torch.optim.Optimizer, step: int, extra: dict) -> None:
    save_training_state(path, student, opt, step, extra, skip={"lm_head.weight"})  # tied to the embedding


def _load_checkpoint(path: Path, student, opt: torch.optim.Optimizer) -> tuple[int, dict]:
    step, extra = load_training_state(path, student, opt, strict=False)
    student.tie_weights()
    return step, extra


def _inverse(vocab_map: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """``[vocab_size]`` int64: the vocab-map row of each target id, -1 outside the map."""
    inverse = torch.full((vocab_size,), -1, dtype=torch.int64)
    inverse[vocab_map] = torch.arange(len(vocab_map))
    return inverse


def _optimizer(student, lr: float) -> torch.optim.AdamW:
    """AdamW with weight decay 0.01 on the matrices other than the embedding, none elsewhere."""
    decay = [p for n, p in student.named_parameters() if p.ndim >= 2 and "embed" not in n]
    rest = [p for n, p in student.named_parameters() if not (p.ndim >= 2 and "embed" not in n)]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.98))


def _train_step(cfg: DistillConfig, student, opt: torch.optim.Optimizer, batch: LabelSet, step: int,
                vocab_map: torch.Tensor, inverse: torch.Tensor) -> dict[str, float]:
    """One optimiser step on ``batch`` (``[B, L]`` sequences) at schedule position ``step``; returns
    the batch's ``kl`` and ``agree``."""
    for group in opt.param_groups:
        group["lr"] = cosine_lr(step, cfg.steps, cfg.lr)
    # The head (N x H per position) dominates the cost: score a random subset of positions.
    h = student.model(input_ids=batch.input_ids).last_hidden_state  # [B, L, H]
    sel = batch.weight > 0
    if cfg.loss_fraction < 1:
        pick = torch.Generator().manual_seed(mix(cfg.seed, "positions", step))
        sel &= torch.rand(sel.shape, generator=pick) < cfg.loss_fraction
    logits = h[sel] @ student.get_output_embeddings().weight[vocab_map].T  # [M, N]
    flat = LabelSet(batch.input_ids[sel], batch.topk_ids[sel], batch.topk_logp[sel], batch.weight[sel],
                    batch.generated[sel])
    loss, info = distill_loss(logits, flat, inverse, cfg.ce_weight)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(student.parameters(), 1.0)
    opt.step()
    return info


def train_student(cfg: DistillConfig, out: Path, target: CausalLM, train: LabelSet, held: LabelSet,
                  vocab_map: torch.Tensor, progress: bool = True, log: Callable[[str], None] = print
                  ) -> tuple[LlamaForCausalLM, dict]:
    """Train (or resume) the student for ``cfg.steps`` steps (or up to ``cfg.pause_at``) over the
    ``vocab_map [N]`` rows; returns it and a dict of the last evaluation, every evaluation
    (``history``) and the PCA variance kept by its embedding."""
    student, kept = build_student(target, cfg.arch, cfg.seed)
    student.train()
    inverse = _inverse(vocab_map, student.config.vocab_size)
    opt = _optimizer(student, cfg.lr)
    ckpt = out / "checkpoints" / "last.safetensors"
    step, history = 0, {"evals": []}
    if ckpt.is_file():
        step, history = _load_checkpoint(ckpt, student, opt)
        log(f"resumed from {ckpt} at step {step}")
    g = torch.Generator().manual_seed(mix(cfg.seed, "batches"))
    seq_w = sequence_weights(cfg, train)

    def draw() -> torch.Tensor:
        return torch.multinomial(seq_w, cfg.batch_size, replacement=True, generator=g)

    for _ in range(step):  # replay the batch stream so a resumed run sees the same batches
        draw()
    t0 = time.perf_counter()
    last_eval: dict = history["evals"][-1] if history["evals"] else {}
    with progress_bar(progress) as bar:
        task = bar.add_task("training (student)", total=cfg.steps, completed=step)
        while step < cfg.steps and not (cfg.pause_at and step >= cfg.pause_at):
            info = _train_step(cfg, student, opt, train.subset(draw()), step, vocab_map, inverse)
            step += 1
            bar.update(task, advance=1, description=f"training (student) kl {info['kl']:.3f} agree {info['agree']:.3f}")
            if step % cfg.eval_every == 0 or step == cfg.steps:
                last_eval = {"step": step, "seconds": time.perf_counter() - t0,
                             **evaluate(student, held, vocab_map, inverse)}
                history["evals"].append(last_eval)
                log(json.dumps(last_eval))
            if step % cfg.ckpt_every == 0 or step == cfg.steps or step == cfg.pause_at:
                _save_checkpoint(ckpt, student, opt, step, history)
    return student, {"eval": last_eval, "history": history["evals"], "pca_variance_kept": kept}
