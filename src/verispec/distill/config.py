"""The settings of a distillation run, the label-shard constants, and the seeds derived from them."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

__all__ = ["DistillConfig", "KINDS", "SEQ_LEN", "TOPK", "mix"]

TOPK = 32  # teacher log-probs kept per position
SEQ_LEN = 256  # tokens per labelled sequence (default)
KINDS = ("tf", "sd", "sdd", "chat")  # teacher forcing, self-distillation from windows / def headers / chat prompts


@dataclass
class DistillConfig:
    """Every knob of a distillation run (written to ``out/distill.json``)."""

    target: str = "smollm2-135m"
    arch: str = "llama-l2-h128-i384"
    vocab_size: int = 8192
    steps: int = 2000
    seed: int = 0
    label_tokens: int = 120_000  # teacher-forced tokens (train split)
    self_distill_prompts: int = 256  # target-generated continuations (train split)
    heldout_tokens: int = 4096  # teacher-forced held-out tokens
    heldout_prompts: int = 16  # self-distilled held-out continuations
    seq_len: int = SEQ_LEN  # tokens per labelled sequence
    prompt_len: int = 64  # self-distillation prompt tokens (the rest of seq_len is generated)
    sample_every: int = 4  # every n-th self-distillation batch is sampled (T=1), the rest greedy
    def_prompts: int = 0  # extra continuations from short prompts ending at a Python ``def ...):`` header
    def_prompt_len: int = 24
    def_oversample: float = 1.0  # sampling weight of def-header continuations relative to other sequences
    label_batch: int = 4
    gen_batch: int = 16
    shard_seqs: int = 16
    batch_size: int = 8
    lr: float = 3e-3
    ce_weight: float = 0.2
    loss_fraction: float = 0.5  # share of positions scored per step (the head is the costly part)
    ckpt_every: int = 200
    eval_every: int = 250
    time_budget_s: float = 0.0  # stop labelling after this many seconds (0 = no limit)
    pause_at: int = 0  # stop training at this step (checkpointed; a later run resumes); 0 = never
    chat_prompts: int = 0  # target answers to chat prompts built from the corpus (verispec.distill.chat_prompts)
    heldout_chat_prompts: int = 0
    chat_len: int = 320  # tokens per chat sequence (prompt + answer, right-padded)
    chat_new_tokens: int = 160  # longest answer
    chat_batch: int = 32  # chat prompts per shard (one batched generation)
    chat_weight: float = 3.0  # sampling weight of chat sequences relative to the others
    depth: int = 3  # EAGLE only: unrolled draft steps trained per position ("training-time test")
    feature_noise: float = 0.05  # EAGLE only: std of Gaussian noise on the input features
    init_from: str = ""  # EAGLE only: a head directory (or "eagle") to fine-tune instead of a fresh start


def mix(*parts: object) -> int:
    """A 60-bit seed that is a stable function of ``parts`` (e.g. the run seed, split, kind, index)."""
    return int(hashlib.sha1(repr(parts).encode()).hexdigest()[:15], 16)
