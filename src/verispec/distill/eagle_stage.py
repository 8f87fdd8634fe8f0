"""``--arch eagle``: train an EAGLE-style head (:mod:`verispec.drafters.eagle_head`) on the label shards instead
of a student, with :mod:`verispec.distill.eagle_train`.

The target's final hidden states for every label shard are stored in ``out/features/``
(resumable), the head is trained on them, and the export is ``eagle_config.json`` +
``eagle.safetensors`` + ``vocab_map.safetensors`` (the head uses the target's own embedding and
output rows, so it holds no copy of them).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from .config import DistillConfig
from .measure import measure_acceptance, measure_cost
from .progress import progress_bar

if TYPE_CHECKING:
    from ..drafters.eagle_head import EagleFiles, EagleHead
    from ..models import CausalLM


__all__ = ["init_head", "train_export_eagle"]


def init_head(spec: str) -> EagleFiles:
    """The EAGLE head files to fine-tune from: a built-in name ("eagle") or a head directory."""
    from ..drafters import eagle_head_dir
    from ..drafters.eagle_head import load_eagle_head

    path = eagle_head_dir(spec)
    if path is None:
        raise ValueError(f"init_from {spec!r} is not an EAGLE head directory (no eagle_config.json)")
    return load_eagle_head(path)


def new_folder_problem(out: Path) -> str | None:
    """Why ``out`` cannot be a new output folder (it exists, or its parent does not), or None."""
    if out.exists():
        return f"{str(out)!r} exists; give a new folder"
    if not out.parent.is_dir():
        return f"{str(out)!r}: its folder does not exist"
    return None


def save_head_whole(head: EagleHead, out: Path, *, vocab_map: torch.Tensor | None, meta: dict) -> None:
    """Save a head into the new folder ``out`` whole or not at all: written into a temporary
    sibling folder, renamed to ``out`` once complete, removed on any failure."""
    from ..drafters.eagle_head import save_eagle_head

    tmp = out.parent / f".{out.name}.part-{os.getpid()}"
    tmp.mkdir()
    try:
        save_eagle_head(head, tmp, vocab_map=vocab_map, meta=meta)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def check_init_head(init: EagleFiles, cfg: DistillConfig, target: CausalLM) -> None:
    """Refuse a head ``init`` made for another target (other hidden or intermediate size)."""
    c, ct = init.head.config, target.model.config
    if (c.hidden_size, c.intermediate_size) != (ct.hidden_size, ct.intermediate_size):
        raise ValueError(f"init_from {cfg.init_from!r}: the head (hidden {c.hidden_size}) was made for another "
                         f"target than {cfg.target!r} (hidden {ct.hidden_size})")


def _export_and_measure(cfg: DistillConfig, out: Path, tgt: CausalLM, head: EagleHead, vmap: torch.Tensor,
                        measure: bool) -> dict:
    """Write the head (with ``vmap`` when it is not the full vocabulary); its size in bytes, and
    when ``measure`` its cost c and acceptance."""
    from ..drafters.eagle_head import save_eagle_head

    V = tgt.model.config.vocab_size
    save_eagle_head(head, out, vocab_map=vmap if len(vmap) < V else None,
                    meta={"target": cfg.target, "distill": asdict(cfg)})
    summary: dict = {"size_bytes": sum(f.stat().st_size for f in out.iterdir() if f.is_file())}
    if measure:
        from ..drafters import EagleDrafter
        from ..drafters.eagle_head import load_eagle_head

        drafter = EagleDrafter(load_eagle_head(out), name=str(out))
        summary["cost"] = measure_cost(tgt, drafter)
        summary["acceptance"] = measure_acceptance(tgt, drafter)
    return summary


def train_export_eagle(cfg: DistillConfig, out: Path, tgt: CausalLM, tr_files: list[Path], he_files: list[Path],
                       vmap: torch.Tensor, sample_weight: torch.Tensor, stages: Sequence[str], measure: bool,
                       progress: bool, log: Callable[[str], None], init: EagleHead | None = None) -> dict:
    """Target features for every label shard, then the EAGLE head over the ``vmap [N]`` rows
    (from ``init``'s weights when given; ``sample_weight [n_train_seqs]`` weights the training
    sequences), exported as ``eagle_config.json`` + ``eagle.safetensors`` when "export" is in
    ``stages``. Returns the summary entries ``train`` (and ``size_bytes``, ``cost``, ``acceptance``)."""
    from ..drafters.eagle_head import features_match_logits
    from .eagle_train import FeatureSet, make_features, train_eagle
    from .features_on_disk import FeaturesOnDisk

    if not features_match_logits(tgt.model):
        raise ValueError(f"target {cfg.target!r} does not compute its logits as lm_head(final hidden state); "
                         "--arch eagle cannot use it")
    with progress_bar(progress) as bar:
        task = bar.add_task("target features", total=len(tr_files) + len(he_files))
        ftr = make_features(tgt.model, tr_files, progress=bar, task=task)
        fhe = make_features(tgt.model, he_files, progress=bar, task=task)
        train, held = FeaturesOnDisk(ftr), FeatureSet.load(fhe)  # training reads its batches from disk
        head, result = train_eagle(tgt.model, train, held, vmap, out, steps=cfg.steps, batch_size=cfg.batch_size,
                                   lr=cfg.lr, depth=cfg.depth, noise=cfg.feature_noise, seed=cfg.seed,
                                   sample_weight=sample_weight, init_from=init,
                                   eval_every=cfg.eval_every, ckpt_every=cfg.ckpt_every,
                                   progress=bar if progress else None, log=log)
    summary: dict = {"train": result}
    if "export" in stages:
        summary.update(_export_and_measure(cfg, out, tgt, head, vmap, measure))
    return summary
