"""Training plumbing shared by ``verispec.distill`` and ``verispec.distill.eagle_train``: atomic
safetensors and JSON writes, resumable training state (model + AdamW, never pickle) and the schedule."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Container
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn

__all__ = ["atomic_json", "atomic_save", "save_training_state", "load_training_state", "cosine_lr"]


def atomic_save(tensors: dict[str, torch.Tensor], path: Path, metadata: dict[str, str] | None = None) -> None:
    """Write safetensors to a temp file beside ``path`` and rename it: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp), metadata=metadata)
    os.replace(tmp, path)


def atomic_json(obj: object, path: Path) -> None:
    """Write ``obj`` as indented JSON the same way (temp file beside ``path``, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(obj, indent=2))
    os.replace(tmp, path)


def save_training_state(path: Path, model: nn.Module, opt: torch.optim.Optimizer, step: int, extra: object,
                        skip: Container[str] = ()) -> None:
    """Model weights (minus ``skip``, e.g. tied copies) + AdamW moments and step, atomically;
    ``step`` and the JSON of ``extra`` go in the header."""
    tensors = {f"model.{k}": v.detach().clone() for k, v in model.state_dict().items() if k not in skip}
    names = {id(p): n for n, p in model.named_parameters()}
    for group in opt.param_groups:
        for p in group["params"]:
            st = opt.state.get(p)
            if st:
                for k in ("exp_avg", "exp_avg_sq"):
                    tensors[f"opt.{names[id(p)]}.{k}"] = st[k]
                tensors[f"opt.{names[id(p)]}.step"] = torch.as_tensor(st["step"], dtype=torch.float32).reshape(1)
    atomic_save(tensors, path, metadata={"step": str(step), "extra": json.dumps(extra)})


def load_training_state(path: Path, model: nn.Module, opt: torch.optim.Optimizer, *, strict: bool = True
                        ) -> tuple[int, object]:
    """Restore what :func:`save_training_state` wrote; returns ``(step, extra)``."""
    with safe_open(str(path), "pt") as f:
        meta = f.metadata()
    tensors = load_file(str(path))
    model.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")}, strict=strict)
    for n, p in model.named_parameters():
        if f"opt.{n}.exp_avg" in tensors:
            opt.state[p] = {"step": tensors[f"opt.{n}.step"].reshape(()).clone(),
                            "exp_avg": tensors[f"opt.{n}.exp_avg"], "exp_avg_sq": tensors[f"opt.{n}.exp_avg_sq"]}
    return int(meta["step"]), json.loads(meta.get("extra", "null"))


def cosine_lr(step: int, total: int, peak: float, *, warmup: int = 50, floor: float = 0.1) -> float:
    """Linear warm-up over ``warmup`` steps, then cosine from ``peak`` down to ``floor * peak``."""
    if step < warmup:
        return peak * (step + 1) / warmup
    frac = (step - warmup) / max(1, total - warmup)
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))
