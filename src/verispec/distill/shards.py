"""The label stage: which shards a run needs, what goes into each, and writing the missing ones.

Shards live in ``out/labels/{split}-{kind}-{index:05d}.safetensors`` (``split`` "train" or
"heldout", ``kind`` one of :data:`~verispec.distill.config.KINDS`), written atomically. A shard is
a pure function of (corpus, seed, split, kind, index), so a killed run continues where it stopped.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from .training import atomic_save
from .config import DistillConfig, mix
from .labels import generate_chat, generate_labelled, label_chunks
from .progress import progress_bar

if TYPE_CHECKING:
    from ..models import CausalLM


__all__ = ["make_labels", "shard_path"]


def _plan_shards(cfg: DistillConfig, split: str) -> list[tuple[str, int]]:
    """The (kind, index) of every shard of a split, interleaved so that a stopped run has both kinds."""
    if split == "heldout":
        n_tf = math.ceil(cfg.heldout_tokens / (cfg.shard_seqs * cfg.seq_len))
        n_sd = math.ceil(cfg.heldout_prompts / cfg.shard_seqs)
    else:
        n_tf = math.ceil(cfg.label_tokens / (cfg.shard_seqs * cfg.seq_len))
        n_sd = math.ceil(cfg.self_distill_prompts / cfg.shard_seqs)
    plan: list[tuple[str, int]] = []
    n_chat = cfg.chat_prompts if split == "train" else cfg.heldout_chat_prompts
    plan += [("chat", i) for i in range(math.ceil(n_chat / cfg.chat_batch))]  # closest to real use: first
    if split == "train":  # code-completion style prompts next (few)
        plan += [("sdd", i) for i in range(math.ceil(cfg.def_prompts / cfg.shard_seqs))]
    i = j = 0
    while i < n_sd or j < n_tf:  # proportional interleaving
        if j >= n_tf or (i < n_sd and i * max(n_tf, 1) <= j * max(n_sd, 1)):
            plan.append(("sd", i))
            i += 1
        else:
            plan.append(("tf", j))
            j += 1
    return plan


def shard_path(out: Path, split: str, kind: str, index: int) -> Path:
    """``out/labels/{split}-{kind}-{index:05d}.safetensors``."""
    return out / "labels" / f"{split}-{kind}-{index:05d}.safetensors"


def _def_header_ends(stream: torch.Tensor, tok, min_start: int) -> torch.Tensor:
    """``[M]`` int64 offsets into ``stream [T]`` just after ``def name(...):`` + the body's
    newline-and-indent token."""
    colon = tok.encode("):", add_special_tokens=False)
    defs = {t for w in ("def", " def") for t in tok.encode(w, add_special_tokens=False)[:1]}
    if len(colon) != 1:
        return torch.empty(0, dtype=torch.int64)
    at = (stream[:-1] == colon[0]).nonzero().flatten()
    at = at[at >= max(min_start, 12)]
    nxt = stream[at + 1]
    indent = {t for t in nxt.unique().tolist() if (d := tok.decode([t])).startswith("\n") and d.strip() == ""
              and len(d) > 1}
    keep = [int(a) + 2 for a, t in zip(at.tolist(), nxt.tolist())
            if t in indent and any(int(x) in defs for x in stream[a - 12:a])]
    return torch.tensor(keep, dtype=torch.int64)


def _chat_shard(cfg: DistillConfig, target: CausalLM, split: str, index: int,
                files: tuple[list[Path], list[Path]] | None) -> dict[str, torch.Tensor]:
    """Shard ``index`` of the split's chat prompts (``cfg.chat_batch`` of them), answered by the target."""
    if files is None:
        raise ValueError("chat shards need the corpus files")
    from .chat_prompts import chat_prompts

    n_all = cfg.chat_prompts if split == "train" else cfg.heldout_chat_prompts
    msgs = chat_prompts(files[0] if split == "train" else files[1], n_all,
                        seed=mix(cfg.seed, split, "chat"))[index * cfg.chat_batch:(index + 1) * cfg.chat_batch]
    sampled = cfg.sample_every > 0 and index % cfg.sample_every == cfg.sample_every - 1
    return generate_chat(target, msgs, cfg.chat_len, cfg.chat_new_tokens,
                         temperature=0.8 if sampled else 0.0, seed=mix(cfg.seed, split, "chat", index),
                         batch=cfg.label_batch)


def _forced_shard(cfg: DistillConfig, model, split: str, stream: torch.Tensor, g: torch.Generator
                  ) -> dict[str, torch.Tensor]:
    """``cfg.shard_seqs`` random ``seq_len``-token windows of ``stream [T]``, teacher-forced."""
    L = cfg.seq_len
    if len(stream) < L + 1:
        raise ValueError(f"the {split} corpus has only {len(stream)} tokens (< {L + 1})")
    starts = torch.randint(0, len(stream) // L, (cfg.shard_seqs,), generator=g) * L
    ids = torch.stack([stream[s:s + L] for s in starts.tolist()])
    return label_chunks(model, ids, cfg.label_batch)


def _prompts(cfg: DistillConfig, split: str, kind: str, stream: torch.Tensor, g: torch.Generator,
             def_ends: torch.Tensor | None) -> torch.Tensor:
    """``[shard_seqs, P]`` prompts from ``stream``: random windows (``sd``, P = ``prompt_len``) or
    the tokens before random def headers (``sdd``, P = ``def_prompt_len``)."""
    n = cfg.shard_seqs
    if kind == "sdd":
        if not len(def_ends):
            raise ValueError(f"no Python def headers in the {split} corpus")
        pick = def_ends[torch.randint(0, len(def_ends), (n,), generator=g)].tolist()
        return torch.stack([stream[e - cfg.def_prompt_len:e] for e in pick])
    starts = torch.randint(0, len(stream) - cfg.prompt_len, (n,), generator=g).tolist()
    return torch.stack([stream[s:s + cfg.prompt_len] for s in starts])


def _self_distilled_shard(cfg: DistillConfig, target: CausalLM, index: int, prompts: torch.Tensor
                          ) -> dict[str, torch.Tensor]:
    """The target's continuations of ``prompts [n, P]`` to ``seq_len`` tokens, ``gen_batch`` at a
    time; every ``sample_every``-th batch (counted over the whole kind) is sampled at T=1."""
    n, parts = cfg.shard_seqs, []
    for b in range(0, n, cfg.gen_batch):
        sampled = cfg.sample_every > 0 and (index * n // cfg.gen_batch + b // cfg.gen_batch) \
            % cfg.sample_every == cfg.sample_every - 1
        parts.append(generate_labelled(target.model, prompts[b:b + cfg.gen_batch], cfg.seq_len,
                                       temperature=1.0 if sampled else 0.0,
                                       seed=mix(cfg.seed, index, b), eos_id=target.tokenizer.eos_token_id))
    return {k: torch.cat([p[k] for p in parts]) for k in parts[0]}


def make_labels(cfg: DistillConfig, out: Path, target: CausalLM, train_stream: torch.Tensor, held_stream: torch.Tensor,
                progress: bool = True, files: tuple[list[Path], list[Path]] | None = None) -> dict:
    """Write every missing label shard (held-out first), from the token streams ``[T]`` of each split.

    ``files`` (train, held-out) are the corpus files chat prompts are built from. Stops early
    after ``cfg.time_budget_s`` seconds when set. Returns counts (shards, weighted tokens) and the
    seconds spent.
    """
    jobs = [("heldout", k, i) for k, i in _plan_shards(cfg, "heldout")]
    jobs += [("train", k, i) for k, i in _plan_shards(cfg, "train")]
    todo = [j for j in jobs if not shard_path(out, *j).is_file()]
    t0, tokens, done = time.perf_counter(), 0, 0
    def_ends: dict[str, torch.Tensor] = {}
    with progress_bar(progress) as bar:
        task = bar.add_task("labelling (target)", total=len(jobs), completed=len(jobs) - len(todo))
        for split, kind, index in todo:
            if cfg.time_budget_s and time.perf_counter() - t0 > cfg.time_budget_s:
                break
            stream = train_stream if split == "train" else held_stream
            g = torch.Generator().manual_seed(mix(cfg.seed, split, kind, index))
            if kind == "chat":
                shard = _chat_shard(cfg, target, split, index, files)
            elif kind == "tf":
                shard = _forced_shard(cfg, target.model, split, stream, g)
            else:
                if kind == "sdd" and split not in def_ends:
                    def_ends[split] = _def_header_ends(stream, target.tokenizer, cfg.def_prompt_len)
                prompts = _prompts(cfg, split, kind, stream, g, def_ends.get(split))
                shard = _self_distilled_shard(cfg, target, index, prompts)
            atomic_save(shard, shard_path(out, split, kind, index))
            tokens += int(shard["weight"].sum())
            done += 1
            rate = tokens / (time.perf_counter() - t0)
            bar.update(task, advance=1, description=f"labelling (target) {rate:.0f} tok/s")
    dt = time.perf_counter() - t0
    return {"shards_written": done, "tokens_written": tokens, "seconds": dt,
            "shards_total": len(jobs), "shards_missing": len(todo) - done}
