"""The student: a small ``LlamaForCausalLM`` draft with the target's vocabulary and tied
embeddings (initialised by PCA of the target's), its logits over the vocab map, and its export.

An exported student is a model directory ``load_causal_lm`` loads: config.json +
model.safetensors (float16) + the target's tokenizer files + ``vocab_map.safetensors`` (int64
target ids, sorted, unique). verispec then computes only the vocab-map rows of the head, HF
assisted generation uses the full tied head (both exact: tokens outside the map get q = 0).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from .training import atomic_json, atomic_save

if TYPE_CHECKING:
    from transformers import LlamaConfig, LlamaForCausalLM, PretrainedConfig

    from ..models import CausalLM


__all__ = ["build_student", "export_student", "parse_arch", "pca_embedding", "student_config", "student_logits"]


def parse_arch(arch: str) -> dict[str, int]:
    """``"llama-l2-h128-i384"`` -> layers 2, hidden 128, intermediate 384 (``-i`` optional: 3 x hidden)."""
    parts = arch.split("-")
    if parts[0] != "llama" or len(parts) < 3:
        raise ValueError(f"arch must look like 'llama-l2-h128[-i384]', got {arch!r}")
    spec = {}
    for p in parts[1:]:
        if len(p) < 2 or p[0] not in "lhi" or not p[1:].isdigit():
            raise ValueError(f"arch {arch!r}: bad part {p!r} (use l<layers>, h<hidden>, i<intermediate>)")
        spec[p[0]] = int(p[1:])
    if "l" not in spec or "h" not in spec or spec["h"] % 16:
        raise ValueError(f"arch {arch!r}: needs l<layers> and h<hidden> with hidden a multiple of 16")
    return {"layers": spec["l"], "hidden": spec["h"], "intermediate": spec.get("i", 3 * spec["h"])}


def student_config(target_config: PretrainedConfig, arch: str) -> LlamaConfig:
    """A LlamaConfig for the student: the target's vocabulary, RoPE and special ids, tied embeddings;
    heads of 32 dims (16 when ``hidden`` is not a multiple of 32)."""
    from transformers import LlamaConfig

    a = parse_arch(arch)
    head_dim = 32 if a["hidden"] % 32 == 0 else 16
    heads = a["hidden"] // head_dim
    kw = {}
    rope = getattr(target_config, "rope_parameters", None)
    if rope is not None:
        kw["rope_parameters"] = dict(rope)
    return LlamaConfig(
        vocab_size=target_config.vocab_size, hidden_size=a["hidden"], intermediate_size=a["intermediate"],
        num_hidden_layers=a["layers"], num_attention_heads=heads, num_key_value_heads=heads, head_dim=head_dim,
        max_position_embeddings=target_config.max_position_embeddings, rms_norm_eps=1e-5,
        tie_word_embeddings=True, bos_token_id=target_config.bos_token_id,
        eos_token_id=target_config.eos_token_id, pad_token_id=target_config.pad_token_id, **kw,
    )


def pca_embedding(embedding: torch.Tensor, width: int) -> tuple[torch.Tensor, float]:
    """Project ``[V, D]`` embeddings to their top ``width`` principal components (mean removed).

    Returns the ``[V, width]`` float32 projection and the fraction of variance kept.
    """
    e = embedding.double()
    e = e - e.mean(0)
    evals, evecs = torch.linalg.eigh(e.T @ e)  # ascending
    top = evecs[:, -width:].flip(1)
    kept = float(evals[-width:].sum() / evals.sum())
    return (e @ top).float(), kept


def build_student(target: CausalLM, arch: str, seed: int = 0) -> tuple[LlamaForCausalLM, float]:
    """A fresh student (weights drawn from ``seed``) whose tied embedding is the PCA projection of
    the target's. Returns the model and the fraction of embedding variance kept."""
    from transformers import LlamaForCausalLM

    cfg = student_config(target.model.config, arch)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        student = LlamaForCausalLM(cfg)
    emb, kept = pca_embedding(target.model.get_input_embeddings().weight.detach(), cfg.hidden_size)
    with torch.no_grad():
        student.model.embed_tokens.weight.copy_(emb)
    student.tie_weights()
    return student, kept


def student_logits(student: LlamaForCausalLM, input_ids: torch.Tensor, vocab_map: torch.Tensor) -> torch.Tensor:
    """``input_ids [B, L]`` -> ``[B, L, N]`` logits over the ``N`` vocab-map rows of the tied head
    (as verispec computes them)."""
    h = student.model(input_ids=input_ids).last_hidden_state  # [B, L, H]
    w = student.get_output_embeddings().weight[vocab_map]  # [N, H]
    return h @ w.T


def export_student(student: LlamaForCausalLM, target: CausalLM, vocab_map: torch.Tensor | None, path: Path,
                   card: dict | None = None) -> int:
    """Write a model directory ``load_causal_lm`` loads (fp16 weights, tokenizer, vocab map, and
    ``card`` as distill-summary.json when given); returns the bytes of its top-level files."""
    path.mkdir(parents=True, exist_ok=True)
    s = student.to(torch.float16)
    s.config.dtype = torch.float16
    from ..models import _quiet

    with _quiet():
        s.save_pretrained(path)
        target.tokenizer.save_pretrained(path)
    student.to(torch.float32)
    tj = path / "tokenizer.json"
    if tj.is_file():  # compact JSON: the pretty-printed 49k vocabulary is 3.5 MB
        tj.write_text(json.dumps(json.loads(tj.read_text()), separators=(",", ":"), ensure_ascii=False))
    if vocab_map is not None:
        atomic_save({"vocab_map": vocab_map.to(torch.int64)}, path / "vocab_map.safetensors")
    if card is not None:
        atomic_json(card, path / "distill-summary.json")
    return sum(f.stat().st_size for f in path.iterdir() if f.is_file())  # labels/, checkpoints/ excluded
