"""The whole distillation: labels, then training, then export, each stage resumable, all state
under one output directory (see :mod:`verispec.distill`)."""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from .training import atomic_json
from .config import DistillConfig
from .corpus import prepare_streams
from .dataset import LabelSet, label_files, sequence_weights
from .eagle_stage import check_init_head, init_head, train_export_eagle
from .measure import measure_acceptance, measure_cost
from .shards import make_labels
from .student import export_student, parse_arch
from .train import train_student
from .vocab_map import coverage, run_vocab_map

if TYPE_CHECKING:
    from transformers import LlamaForCausalLM

    from ..drafters.eagle_head import EagleFiles
    from ..models import CausalLM


__all__ = ["distill"]

STAGES = ("label", "train", "export")
# settings that are counts: the least each may be, and the flag of `verispec distill` that sets it
_COUNTS = {"steps": ("--steps", 1), "batch_size": ("--batch-size", 1), "depth": ("--depth", 1),
           "vocab_size": ("--vocab-size", 0), "label_tokens": ("--label-tokens", 0),
           "self_distill_prompts": ("--self-distill-prompts", 0), "def_prompts": ("--def-prompts", 0),
           "chat_prompts": ("--chat-prompts", 0), "heldout_chat_prompts": ("--heldout-chat-prompts", 0)}
# settings that are reals: (flag, whether 0 is allowed)
_REALS = {"lr": ("--lr", False), "chat_weight": ("--chat-weight", True), "def_oversample": ("--def-oversample", True),
          "time_budget_s": ("--label-seconds", True)}


def _check_config(cfg: DistillConfig, stages: Sequence[str]) -> EagleFiles | None:
    """Refuse bad settings before anything is written; returns the EAGLE head files of
    ``cfg.init_from`` (or None)."""
    if cfg.arch != "eagle":
        parse_arch(cfg.arch)
        if cfg.init_from:
            raise ValueError("init_from (--init-from) fine-tunes an EAGLE head; it needs arch='eagle'")
    for name, (flag, least) in _COUNTS.items():
        v = getattr(cfg, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < least:
            raise ValueError(f"{name} ({flag}) must be an int >= {least}, got {v!r}")
    for name, (flag, zero) in _REALS.items():
        v = float(getattr(cfg, name))
        if not (0 <= v < math.inf if zero else 0 < v < math.inf):
            raise ValueError(f"{name} ({flag}) must be a finite number {'>=' if zero else '>'} 0, got {v}")
    init = init_head(cfg.init_from) if cfg.init_from else None
    bad = set(stages) - set(STAGES)
    if bad:
        raise ValueError(f"unknown stages {sorted(bad)}")
    return init


def _label_stage(cfg: DistillConfig, out: Path, tgt: CausalLM, corpus: Sequence[str | os.PathLike], stdlib: bool,
                 progress: bool) -> dict:
    """Tokenize the corpus and write the missing label shards; the summary's ``corpus`` and ``labels``."""
    train_s, held_s, info = prepare_streams(tgt.tokenizer, corpus, out, stdlib=stdlib)
    files = info.pop("files")
    return {"corpus": info, "labels": make_labels(cfg, out, tgt, train_s, held_s, progress, files=files)}


def _data_summary(train: LabelSet, held: LabelSet, vmap: torch.Tensor) -> dict:
    """Sequence and token counts of the labels, the vocab map's size and its held-out argmax coverage."""
    return {"train_seqs": len(train), "train_tokens": int(train.weight.sum()),
            "train_generated_tokens": int((train.weight * train.generated).sum()),
            "heldout_tokens": int(held.weight.sum()), "vocab_map_size": len(vmap),
            "vocab_map_heldout_argmax_coverage": coverage(held, vmap)}


def _export_student(cfg: DistillConfig, out: Path, tgt: CausalLM, student: LlamaForCausalLM, vmap: torch.Tensor,
                    measure: bool) -> dict:
    """Export the student into ``out`` (with ``vmap`` unless it is the full vocabulary); its size in
    bytes, and when ``measure`` the exported draft's cost c and acceptance."""
    from ..models import load_causal_lm

    V = tgt.model.config.vocab_size
    summary: dict = {"size_bytes": export_student(student, tgt, vmap if 0 < cfg.vocab_size < V else None, out)}
    if measure:
        draft = load_causal_lm(out)
        summary["cost"] = measure_cost(tgt, draft)
        from ..drafters import ModelDrafter

        summary["acceptance"] = measure_acceptance(tgt, ModelDrafter(draft))
    return summary


def _train_stage(cfg: DistillConfig, out: Path, tgt: CausalLM, stages: Sequence[str], measure: bool, progress: bool,
                 log: Callable[[str], None], init: EagleFiles | None = None) -> dict:
    """Load the label shards, fix the vocab map, train (or resume) the student or EAGLE head and,
    when "export" is in ``stages``, export it; the summary's ``data``, ``train`` and export entries."""
    tr_files, he_files = label_files(out, "train"), label_files(out, "heldout")
    if not tr_files or not he_files:
        raise ValueError(f"no label shards in {out / 'labels'}: run the 'label' stage first")
    train, held = LabelSet.load(tr_files), LabelSet.load(he_files)
    vmap = run_vocab_map(cfg, out, tgt, train, init)
    summary: dict = {"data": _data_summary(train, held, vmap)}
    log(json.dumps(summary["data"]))
    t0 = time.perf_counter()
    if cfg.arch == "eagle":
        summary.update(train_export_eagle(cfg, out, tgt, tr_files, he_files, vmap, sequence_weights(cfg, train),
                                          stages, measure, progress, log,
                                          init=init.head if init is not None else None))
        summary["train"]["seconds_this_run"] = time.perf_counter() - t0
        return summary
    student, result = train_student(cfg, out, tgt, train, held, vmap, progress, log)
    summary["train"] = {**result, "seconds_this_run": time.perf_counter() - t0}
    if "export" in stages:
        summary.update(_export_student(cfg, out, tgt, student, vmap, measure))
    return summary


def distill(target: str, corpus: list[str], out: str, *, arch: str = DistillConfig.arch,
            vocab_size: int = DistillConfig.vocab_size, steps: int = DistillConfig.steps, seed: int = 0,
            label_tokens: int = DistillConfig.label_tokens,
            self_distill_prompts: int = DistillConfig.self_distill_prompts, progress: bool = True,
            stdlib: bool = True, stages: Sequence[str] = STAGES, measure: bool = True,
            threads: int | None = None, **overrides) -> dict:
    """Distil a draft for ``target`` into directory ``out`` (resumable; see :mod:`verispec.distill`).

    Args:
        target: the target model (built-in name, HF directory or .gguf file).
        corpus: extra files / folders of text (the Python stdlib is always included unless ``stdlib=False``).
        out: output directory; it ends up loadable by ``load_causal_lm`` (labels and checkpoints
            live in its ``labels/`` and ``checkpoints/`` subfolders).
        arch: ``llama-l<layers>-h<hidden>[-i<intermediate>]``, or ``eagle`` for an EAGLE head.
        vocab_size: rows of the draft's output vocabulary (the vocab map); 0 = full vocabulary.
        steps: training steps (batches of ``batch_size`` x ``seq_len`` tokens).
        label_tokens / self_distill_prompts: teacher-forced tokens and target continuations to label.
        stages: any of "label", "train", "export" (in that order).
        measure: measure c (draft step / target step) and acceptance after export.
        threads: torch intra-op threads (default: leave torch's setting). On a busy 2-core machine
            1 thread is several times faster than 2.
        overrides: any other ``DistillConfig`` field.

    Returns:
        a summary dict (also written to ``out/distill-summary.json``).
    """
    from ..models import load_causal_lm

    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 0):
        raise ValueError(f"threads (--threads) must be an int >= 0 (0 or None: torch's setting), got {threads!r}")
    cfg = DistillConfig(target=target, arch=arch, vocab_size=vocab_size, steps=steps, seed=seed,
                        label_tokens=label_tokens, self_distill_prompts=self_distill_prompts, **overrides)
    init = _check_config(cfg, stages)
    if threads:
        torch.set_num_threads(threads)
    outp = Path(out)
    outp.mkdir(parents=True, exist_ok=True)
    atomic_json(asdict(cfg), outp / "distill.json")
    log = (lambda s: None) if not progress else (lambda s: print(s, flush=True))
    summary: dict = {"config": asdict(cfg)}
    t_all = time.perf_counter()
    tgt = load_causal_lm(target)
    tgt.model.requires_grad_(False)
    if init is not None:  # before any labelling: a head fits only the target it was made for
        check_init_head(init, cfg, tgt)
    if "label" in stages:
        summary.update(_label_stage(cfg, outp, tgt, corpus, stdlib, progress))
    if "train" in stages or "export" in stages:
        summary.update(_train_stage(cfg, outp, tgt, stages, measure, progress, log, init))
    summary["seconds"] = time.perf_counter() - t_all
    atomic_json(summary, outp / "distill-summary.json")
    return summary
