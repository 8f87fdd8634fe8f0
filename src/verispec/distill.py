"""Distil a small draft model for a target: ``verispec distill``.

Three stages, each resumable, all state under one output directory ``out``:

1. **Labels** (``out/labels/``). The target reads the corpus with teacher forcing and its
   next-token distribution at every position is kept as the top-32 log-probs (ids + values),
   in safetensors shards written atomically (temp file + rename). *Self-distillation* shards
   hold continuations the target generated itself (greedy, and sampled every
   ``sample_every``-th batch) from corpus prompts, labelled with the target's full
   distribution at every position: the target loops and repeats itself along its own output,
   and a student trained only on human text does not learn to copy (docs/design.md section 7). Shards are
   a pure function of (corpus, seed, shard index), so a killed run continues where it stopped
   and ``train`` can be re-run without running the target again.
2. **Training** (``out/checkpoints/``). A small ``LlamaForCausalLM`` with tied input/output
   embeddings (one ``49152 x H`` matrix, initialised by PCA of the target's embedding) learns
   KL(teacher top-k, renormalised || student) + ``ce_weight`` x CE(teacher argmax), with the
   student's output restricted to the ``vocab_size`` tokens the teacher most often prefers
   (the *vocab map*). Checkpoints (model + AdamW state, safetensors) are written atomically
   every ``ckpt_every`` steps; a re-run resumes from the last one.
3. **Export** (``out/``): config.json + model.safetensors (float16) + the target's tokenizer
   files + ``vocab_map.safetensors`` (int64 target ids, sorted, unique). ``load_causal_lm(out)``
   loads it; verispec then computes only the vocab-map rows of the head, HF assisted
   generation uses the full tied head (both exact: tokens outside the map get q = 0).

``--arch eagle`` trains an EAGLE-style head instead (:mod:`verispec.eagle`, training in
:mod:`verispec.eagle_train`): after the labels, the target's final hidden states for every
label shard are stored in ``out/features/`` (resumable), the head is trained on them, and the
export is ``eagle_config.json`` + ``eagle.safetensors`` + ``vocab_map.safetensors`` (the head
uses the target's own embedding and output rows, so it holds no copy of them).

Corpus: by default the Python standard library's own sources (offline, ~3M tokens), split into
train / held-out by file. Add any local text with ``--corpus PATH`` (files, or folders searched
for ``*.py *.txt *.md *.rst *.json *.c *.h *.js *.ts *.java *.go *.rs *.html``). With internet a
bigger corpus is just more local files, e.g. ``git clone`` a few repositories or save a dataset
split as text files, and pass the folders with ``--corpus``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sysconfig
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file

from .training import atomic_save, cosine_lr, load_training_state, save_training_state

__all__ = ["DistillConfig", "add_distill_arguments", "distill", "run_from_args", "stdlib_files"]

TOPK = 32
SEQ_LEN = 256
KINDS = ("tf", "sd", "sdd", "chat")  # teacher forcing, self-distillation from windows / def headers / chat prompts
TEXT_SUFFIXES = (".py", ".txt", ".md", ".rst", ".json", ".c", ".h", ".js", ".ts", ".java", ".go", ".rs", ".html")
_SKIP_DIRS = {"site-packages", "dist-packages", "__pycache__", "test", "tests", "idle_test", "lib2to3"}


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
    chat_prompts: int = 0  # target answers to chat prompts built from the corpus (verispec.chat_prompts)
    heldout_chat_prompts: int = 0
    chat_len: int = 320  # tokens per chat sequence (prompt + answer, right-padded)
    chat_new_tokens: int = 160  # longest answer
    chat_batch: int = 32  # chat prompts per shard (one batched generation)
    chat_weight: float = 3.0  # sampling weight of chat sequences relative to the others
    depth: int = 3  # EAGLE only: unrolled draft steps trained per position ("training-time test")
    feature_noise: float = 0.05  # EAGLE only: std of Gaussian noise on the input features
    init_from: str = ""  # EAGLE only: a head directory (or "eagle") to fine-tune instead of a fresh start


# ----------------------------------------------------------------------------------------------
# corpus


def stdlib_files() -> list[Path]:
    """The standard library's ``*.py`` files (tests and site-packages excluded), sorted."""
    root = Path(sysconfig.get_paths()["stdlib"])
    return sorted(p for p in root.rglob("*.py") if not (_SKIP_DIRS & set(p.relative_to(root).parts[:-1])))


def corpus_files(paths: Sequence[str | os.PathLike] = (), *, stdlib: bool = True) -> list[Path]:
    """Expand files and folders (recursively, text suffixes only) plus, by default, the stdlib."""
    files = stdlib_files() if stdlib else []
    for p in map(Path, paths):
        if p.is_dir():
            files += sorted(f for f in p.rglob("*") if f.is_file() and f.suffix in TEXT_SUFFIXES)
        elif p.is_file():
            files.append(p)
        else:
            raise FileNotFoundError(f"corpus path {str(p)!r} does not exist")
    return files


def split_files(files: Sequence[Path], heldout_frac: float = 0.1) -> tuple[list[Path], list[Path]]:
    """Train / held-out split by a stable hash of each file's name (a file is never in both)."""
    train, held = [], []
    for f in files:
        h = int(hashlib.sha1(f"{f.parent.name}/{f.name}".encode()).hexdigest()[:8], 16) / 16**8
        (held if h < heldout_frac else train).append(f)
    return train, held


def _read_texts(files: Sequence[Path]) -> list[str]:
    texts = []
    for f in files:
        try:
            texts.append(f.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            continue
    return [t for t in texts if t.strip()]


def _token_stream(tok, texts: Sequence[str], cache: Path | None) -> torch.Tensor:
    """All texts tokenized and concatenated, EOS between documents (cached in ``cache``)."""
    if cache is not None and cache.is_file():
        return load_file(cache)["ids"].long()
    eos = tok.eos_token_id if tok.eos_token_id is not None else 0
    ids: list[int] = []
    for start in range(0, len(texts), 64):
        for doc in tok(list(texts[start:start + 64]), add_special_tokens=False)["input_ids"]:
            ids.extend(doc)
            ids.append(eos)
    stream = torch.tensor(ids, dtype=torch.int32)
    if cache is not None:
        atomic_save({"ids": stream}, cache)
    return stream.long()


# ----------------------------------------------------------------------------------------------
# atomic files


def _atomic_json(obj: object, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(obj, indent=2))
    os.replace(tmp, path)


# ----------------------------------------------------------------------------------------------
# teacher labels


@torch.inference_mode()
def _topk_logprobs(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``[..., V]`` logits -> top-k (ids int32, log-probs float16) of the log-softmax."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    vals, ids = logp.topk(TOPK, dim=-1)
    return ids.to(torch.int32), vals.to(torch.float16)


@torch.inference_mode()
def label_chunks(model, ids: torch.Tensor, batch: int = 4) -> dict[str, torch.Tensor]:
    """Teacher forcing over ``ids [N, L]``: label at position t = the target's top-k for token t+1."""
    out_ids, out_lp = [], []
    for s in range(0, len(ids), batch):
        logits = model(input_ids=ids[s:s + batch]).logits  # [b, L, V]
        i, v = _topk_logprobs(logits)
        out_ids.append(i)
        out_lp.append(v)
    weight = torch.ones(ids.shape, dtype=torch.uint8)
    weight[:, -1] = 0  # the last position's label is kept but its token is not in the chunk
    return {"input_ids": ids.to(torch.int32), "topk_ids": torch.cat(out_ids), "topk_logp": torch.cat(out_lp),
            "weight": weight, "generated": torch.zeros(ids.shape, dtype=torch.uint8)}


@torch.inference_mode()
def generate_labelled(model, prompts: torch.Tensor, length: int, *, temperature: float = 0.0,
                      seed: int = 0, eos_id: int | None = None) -> dict[str, torch.Tensor]:
    """Continue ``prompts [B, P]`` to ``length`` tokens with the target (greedy, ties to the lowest
    id, or sampled at ``temperature``), keeping the target's top-k at every position.

    Positions after a generated EOS get weight 0.
    """
    from transformers import DynamicCache

    B, P = prompts.shape
    gen = torch.Generator().manual_seed(seed)
    cache = DynamicCache(config=model.config)
    logits = model(input_ids=prompts, cache=cache, use_cache=True).logits  # [B, P, V]
    ids, lps = [], []
    i, v = _topk_logprobs(logits)
    ids.append(i)
    lps.append(v)
    seq = [prompts]
    nxt = logits[:, -1]
    for t in range(length - P):
        if temperature > 0:
            probs = torch.softmax(nxt.float() / temperature, dim=-1)
            tok = torch.multinomial(probs, 1, generator=gen)  # [B, 1]
        else:
            tok = nxt.argmax(dim=-1, keepdim=True)  # first maximum = lowest id
        seq.append(tok)
        if t == length - P - 1:
            break
        nxt = model(input_ids=tok, cache=cache, use_cache=True,
                    position_ids=torch.full((B, 1), P + t)).logits[:, -1]
        i, v = _topk_logprobs(nxt[:, None])
        ids.append(i)
        lps.append(v)
    seq_t = torch.cat(seq, dim=1)  # [B, length]
    topk_ids = torch.cat(ids, dim=1)  # [B, length - 1, k]
    topk_lp = torch.cat(lps, dim=1)
    pad_i = torch.zeros(B, 1, TOPK, dtype=torch.int32)
    topk_ids = torch.cat([topk_ids, pad_i], dim=1)
    topk_lp = torch.cat([topk_lp, torch.zeros(B, 1, TOPK, dtype=torch.float16)], dim=1)
    weight = torch.ones(B, length, dtype=torch.uint8)
    weight[:, -1] = 0
    if eos_id is not None:
        is_eos = seq_t[:, P:] == eos_id
        after = (torch.cumsum(is_eos.int(), dim=1) - is_eos.int()) > 0  # strictly after the first EOS
        weight[:, P:][after | is_eos] = 0
    generated = torch.zeros(B, length, dtype=torch.uint8)
    generated[:, P - 1:] = 1  # labels whose next token was generated by the target
    return {"input_ids": seq_t.to(torch.int32), "topk_ids": topk_ids, "topk_logp": topk_lp, "weight": weight,
            "generated": generated}


def generate_chat(target, messages: Sequence[str], length: int, max_new: int, *, temperature: float = 0.0,
                  seed: int = 0, batch: int = 4) -> dict[str, torch.Tensor]:
    """The target's answers to chat ``messages`` (its chat template, one batched generation with
    verispec's engine, target only), labelled by teacher forcing over prompt + answer.

    Sequences are right-padded to ``length`` (weight 0); ``generated`` marks the answer tokens.
    """
    from .engine import SpeculativeDecoder
    from .sampling import SamplingParams

    dec = SpeculativeDecoder(target, None)
    prompts = [dec.encode([m[:900]], chat=True)[0][: length - 64] for m in messages]  # room for an answer
    res = dec.generate(prompts, min(max_new, length - min(map(len, prompts))),
                       SamplingParams(temperature=temperature, seed=seed))
    ids = torch.zeros(len(prompts), length, dtype=torch.int64)
    weight = torch.zeros(len(prompts), length, dtype=torch.uint8)
    generated = torch.zeros_like(weight)
    for b, (p, a) in enumerate(zip(prompts, res.token_ids)):
        seq = (p + a)[:length]
        ids[b, : len(seq)] = torch.tensor(seq)
        weight[b, : len(seq) - 1] = 1  # the last token's label would be about a token not in the sequence
        generated[b, len(p) - 1 : len(seq)] = 1  # labels whose next token the target generated
    shard = label_chunks(target.model, ids, batch)
    shard["weight"], shard["generated"] = weight, generated
    return shard


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
    return out / "labels" / f"{split}-{kind}-{index:05d}.safetensors"


def make_labels(cfg: DistillConfig, out: Path, target, train_stream: torch.Tensor, held_stream: torch.Tensor,
                progress: bool = True, files: tuple[list[Path], list[Path]] | None = None) -> dict:
    """Write every missing label shard (held-out first). Returns counts and throughput.

    ``files`` (train, held-out) are the corpus files chat prompts are built from.
    """
    model = target.model
    eos = target.tokenizer.eos_token_id
    jobs = [("heldout", k, i) for k, i in _plan_shards(cfg, "heldout")]
    jobs += [("train", k, i) for k, i in _plan_shards(cfg, "train")]
    todo = [j for j in jobs if not shard_path(out, *j).is_file()]
    t0, tokens, done = time.perf_counter(), 0, 0
    def_ends: dict[str, torch.Tensor] = {}
    with _progress(progress) as bar:
        task = bar.add_task("labelling (target)", total=len(jobs), completed=len(jobs) - len(todo))
        for split, kind, index in todo:
            if cfg.time_budget_s and time.perf_counter() - t0 > cfg.time_budget_s:
                break
            stream = train_stream if split == "train" else held_stream
            g = torch.Generator().manual_seed(_mix(cfg.seed, split, kind, index))
            n = cfg.shard_seqs
            if kind == "chat":
                if files is None:
                    raise ValueError("chat shards need the corpus files")
                from .chat_prompts import chat_prompts

                n_all = cfg.chat_prompts if split == "train" else cfg.heldout_chat_prompts
                msgs = chat_prompts(files[0] if split == "train" else files[1], n_all,
                                    seed=_mix(cfg.seed, split, "chat"))[index * cfg.chat_batch:(index + 1) * cfg.chat_batch]
                sampled = cfg.sample_every > 0 and index % cfg.sample_every == cfg.sample_every - 1
                shard = generate_chat(target, msgs, cfg.chat_len, cfg.chat_new_tokens,
                                      temperature=0.8 if sampled else 0.0, seed=_mix(cfg.seed, split, "chat", index),
                                      batch=cfg.label_batch)
            elif kind == "tf":
                L = cfg.seq_len
                if len(stream) < L + 1:
                    raise ValueError(f"the {split} corpus has only {len(stream)} tokens (< {L + 1})")
                starts = torch.randint(0, len(stream) // L, (n,), generator=g) * L
                ids = torch.stack([stream[s:s + L] for s in starts.tolist()])
                shard = label_chunks(model, ids, cfg.label_batch)
            else:
                if kind == "sdd":
                    if split not in def_ends:
                        def_ends[split] = _def_header_ends(stream, target.tokenizer, cfg.def_prompt_len)
                    ends = def_ends[split]
                    if not len(ends):
                        raise ValueError(f"no Python def headers in the {split} corpus")
                    pick = ends[torch.randint(0, len(ends), (n,), generator=g)].tolist()
                    prompts = torch.stack([stream[e - cfg.def_prompt_len:e] for e in pick])
                else:
                    starts = torch.randint(0, len(stream) - cfg.prompt_len, (n,), generator=g).tolist()
                    prompts = torch.stack([stream[s:s + cfg.prompt_len] for s in starts])
                parts = []
                for b in range(0, n, cfg.gen_batch):
                    sampled = cfg.sample_every > 0 and (index * n // cfg.gen_batch + b // cfg.gen_batch) \
                        % cfg.sample_every == cfg.sample_every - 1
                    parts.append(generate_labelled(model, prompts[b:b + cfg.gen_batch], cfg.seq_len,
                                                   temperature=1.0 if sampled else 0.0,
                                                   seed=_mix(cfg.seed, index, b), eos_id=eos))
                shard = {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
            atomic_save(shard, shard_path(out, split, kind, index))
            tokens += int(shard["weight"].sum())
            done += 1
            bar.update(task, advance=1, description=f"labelling (target) {tokens / (time.perf_counter() - t0):.0f} tok/s")
    dt = time.perf_counter() - t0
    return {"shards_written": done, "tokens_written": tokens, "seconds": dt,
            "shards_total": len(jobs), "shards_missing": len(todo) - done}


def _def_header_ends(stream: torch.Tensor, tok, min_start: int) -> torch.Tensor:
    """Stream offsets just after ``def name(...):`` + the body's newline-and-indent token."""
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


def _mix(*parts: object) -> int:
    return int(hashlib.sha1(repr(parts).encode()).hexdigest()[:15], 16)


class _NullBar:
    def add_task(self, *a, **k):
        return 0

    def update(self, *a, **k):
        pass

    def advance(self, *a, **k):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def _progress(enabled: bool):
    if not enabled:
        return _NullBar()
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TimeRemainingColumn())


def prepare_streams(tok, corpus: Sequence[str | os.PathLike], out: Path, *, stdlib: bool = True
                    ) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """Token streams (train, held-out) of the corpus, cached in ``out/labels/``."""
    files = corpus_files(corpus, stdlib=stdlib)
    if not files:
        raise ValueError("the corpus is empty: pass --corpus files or folders (or keep the stdlib default)")
    train_f, held_f = split_files(files)
    if not held_f:  # tiny corpora: hold out the last file
        train_f, held_f = train_f[:-1] or train_f, train_f[-1:]
    labels = out / "labels"
    train = _token_stream(tok, _read_texts(train_f), labels / "stream-train.safetensors")
    held = _token_stream(tok, _read_texts(held_f), labels / "stream-heldout.safetensors")
    info = {"files_train": len(train_f), "files_heldout": len(held_f), "tokens_train": len(train),
            "tokens_heldout": len(held), "files": (train_f, held_f)}
    return train, held, info


# ----------------------------------------------------------------------------------------------
# student


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


def student_config(target_config, arch: str):
    """A LlamaConfig for the student: the target's vocabulary, RoPE and special ids, tied embeddings."""
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

    Returns the ``[V, width]`` projection and the fraction of variance kept.
    """
    e = embedding.double()
    e = e - e.mean(0)
    evals, evecs = torch.linalg.eigh(e.T @ e)  # ascending
    top = evecs[:, -width:].flip(1)
    kept = float(evals[-width:].sum() / evals.sum())
    return (e @ top).float(), kept


def build_student(target, arch: str, seed: int = 0):
    """A fresh student whose tied embedding is the PCA projection of the target's."""
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


# ----------------------------------------------------------------------------------------------
# training data


@dataclass
class LabelSet:
    """Label shards in memory: ``input_ids [N, L]``, ``topk_ids/topk_logp [N, L, k]``, ``weight``, ``generated``."""

    input_ids: torch.Tensor
    topk_ids: torch.Tensor
    topk_logp: torch.Tensor
    weight: torch.Tensor
    generated: torch.Tensor
    kind: torch.Tensor | None = None  # [N] index into KINDS per sequence

    @classmethod
    def load(cls, paths: Sequence[Path]) -> LabelSet:
        shards = [load_file(p) for p in paths]
        if not shards:
            raise ValueError("no label shards")
        L = max(s["input_ids"].shape[1] for s in shards)  # chat shards are longer: right-pad the rest

        def pad(x: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.pad(x, (0, 0, 0, L - x.shape[1]) if x.ndim == 3 else (0, L - x.shape[1]))

        cat = {k: torch.cat([pad(s[k]) for s in shards]) for k in shards[0]}
        kinds = torch.cat([torch.full((len(s["input_ids"]),), KINDS.index(Path(p).name.split("-")[1]))
                           for p, s in zip(paths, shards)])
        return cls(cat["input_ids"].long(), cat["topk_ids"].long(), cat["topk_logp"].float(),
                   cat["weight"].float(), cat["generated"].bool(), kinds)

    def __len__(self) -> int:
        return len(self.input_ids)

    def subset(self, idx: torch.Tensor) -> LabelSet:
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
    return sorted((out / "labels").glob(f"{split}-*-*.safetensors"))


def choose_vocab_map(labels: LabelSet, size: int, always: Sequence[int] = (),
                     seq_weight: torch.Tensor | None = None) -> torch.Tensor:
    """The ``size`` tokens the teacher most often prefers (argmax counts, then top-k mass), sorted ids.

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


def coverage(labels: LabelSet, vocab_map: torch.Tensor) -> float:
    """Share of (weighted) teacher argmaxes that are in the vocab map."""
    inside = torch.isin(labels.topk_ids[..., 0], vocab_map).float()
    return float((inside * labels.weight).sum() / labels.weight.sum())


# ----------------------------------------------------------------------------------------------
# loss and evaluation


def student_logits(student, input_ids: torch.Tensor, vocab_map: torch.Tensor) -> torch.Tensor:
    """``[B, L, N]`` logits over the vocab-map rows of the tied head (as verispec computes them)."""
    h = student.model(input_ids=input_ids).last_hidden_state  # [B, L, H]
    w = student.get_output_embeddings().weight[vocab_map]  # [N, H]
    return h @ w.T


def distill_loss(logits: torch.Tensor, batch: LabelSet, inverse: torch.Tensor, ce_weight: float
                 ) -> tuple[torch.Tensor, dict[str, float]]:
    """KL(teacher top-k renormalised over the vocab map || student) + ce_weight x CE(teacher argmax).

    ``inverse [V]`` maps a target id to its vocab-map row, or -1.
    """
    logq = torch.log_softmax(logits.float(), dim=-1)  # [B, L, N]
    rows = inverse[batch.topk_ids]  # [B, L, k]
    inside = rows >= 0
    p = batch.topk_logp.exp() * inside
    p = p / p.sum(-1, keepdim=True).clamp_min(1e-12)
    q_at = logq.gather(-1, rows.clamp_min(0))  # [B, L, k]
    kl = (p * (torch.log(p.clamp_min(1e-12)) - q_at)).sum(-1)  # [B, L]
    top_in = inside[..., 0]
    ce = -q_at[..., 0] * top_in
    w = batch.weight * (inside.any(-1))
    denom = w.sum().clamp_min(1.0)
    loss = ((kl + ce_weight * ce) * w).sum() / denom
    agree = ((logq.argmax(-1) == rows[..., 0]) & top_in).float()
    return loss, {"kl": float((kl.detach() * w).sum() / denom), "agree": float((agree * batch.weight).sum()
                                                                      / batch.weight.sum().clamp_min(1.0))}


@torch.no_grad()
def evaluate(student, labels: LabelSet, vocab_map: torch.Tensor, inverse: torch.Tensor, batch: int = 8) -> dict:
    """Held-out KL (over the vocab map) and top-1 agreement with the target, overall and by kind.

    Agreement counts a position as a miss when the teacher's argmax is outside the vocab map.
    """
    student.eval()
    tot = {"all": [0.0, 0.0, 0.0], "human": [0.0, 0.0, 0.0], "generated": [0.0, 0.0, 0.0]}
    for s in range(0, len(labels), batch):
        b = labels.subset(torch.arange(s, min(s + batch, len(labels))))
        logq = torch.log_softmax(student_logits(student, b.input_ids, vocab_map).float(), -1)
        rows = inverse[b.topk_ids]
        inside = rows >= 0
        p = b.topk_logp.exp() * inside
        p = p / p.sum(-1, keepdim=True).clamp_min(1e-12)
        kl = (p * (torch.log(p.clamp_min(1e-12)) - logq.gather(-1, rows.clamp_min(0)))).sum(-1)
        agree = ((logq.argmax(-1) == rows[..., 0]) & inside[..., 0]).float()
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


# ----------------------------------------------------------------------------------------------
# checkpoints


def _save_checkpoint(path: Path, student, opt: torch.optim.Optimizer, step: int, extra: dict) -> None:
    save_training_state(path, student, opt, step, extra, skip={"lm_head.weight"})  # tied to the embedding


def _load_checkpoint(path: Path, student, opt: torch.optim.Optimizer) -> tuple[int, dict]:
    step, extra = load_training_state(path, student, opt, strict=False)
    student.tie_weights()
    return step, extra


def train_student(cfg: DistillConfig, out: Path, target, train: LabelSet, held: LabelSet, vocab_map: torch.Tensor,
                  progress: bool = True, log=print) -> tuple[object, dict]:
    """Train (or resume) the student for ``cfg.steps`` steps; returns it and the last evaluation."""
    student, kept = build_student(target, cfg.arch, cfg.seed)
    student.train()
    V = student.config.vocab_size
    inverse = torch.full((V,), -1, dtype=torch.int64)
    inverse[vocab_map] = torch.arange(len(vocab_map))
    decay = [p for n, p in student.named_parameters() if p.ndim >= 2 and "embed" not in n]
    rest = [p for n, p in student.named_parameters() if not (p.ndim >= 2 and "embed" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.0}],
                            lr=cfg.lr, betas=(0.9, 0.98))
    ckpt = out / "checkpoints" / "last.safetensors"
    step, history = 0, {"evals": []}
    if ckpt.is_file():
        step, history = _load_checkpoint(ckpt, student, opt)
        log(f"resumed from {ckpt} at step {step}")
    g = torch.Generator().manual_seed(_mix(cfg.seed, "batches"))
    seq_w = sequence_weights(cfg, train)

    def draw() -> torch.Tensor:
        return torch.multinomial(seq_w, cfg.batch_size, replacement=True, generator=g)

    for _ in range(step):  # replay the batch stream so a resumed run sees the same batches
        draw()
    t0 = time.perf_counter()
    last_eval: dict = history["evals"][-1] if history["evals"] else {}
    with _progress(progress) as bar:
        task = bar.add_task("training (student)", total=cfg.steps, completed=step)
        while step < cfg.steps and not (cfg.pause_at and step >= cfg.pause_at):
            idx = draw()
            batch = train.subset(idx)
            for group in opt.param_groups:
                group["lr"] = cosine_lr(step, cfg.steps, cfg.lr)
            # The head (N x H per position) dominates the cost: score a random subset of positions.
            h = student.model(input_ids=batch.input_ids).last_hidden_state  # [B, L, H]
            sel = batch.weight > 0
            if cfg.loss_fraction < 1:
                pick = torch.Generator().manual_seed(_mix(cfg.seed, "positions", step))
                sel &= torch.rand(sel.shape, generator=pick) < cfg.loss_fraction
            logits = h[sel] @ student.get_output_embeddings().weight[vocab_map].T  # [M, N]
            flat = LabelSet(batch.input_ids[sel], batch.topk_ids[sel], batch.topk_logp[sel], batch.weight[sel],
                            batch.generated[sel])
            loss, info = distill_loss(logits, flat, inverse, cfg.ce_weight)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(student.parameters(), 1.0)
            opt.step()
            step += 1
            bar.update(task, advance=1, description=f"training (student) kl {info['kl']:.3f} agree {info['agree']:.3f}")
            if step % cfg.eval_every == 0 or step == cfg.steps:
                last_eval = {"step": step, "seconds": time.perf_counter() - t0, **evaluate(student, held, vocab_map, inverse)}
                history["evals"].append(last_eval)
                log(json.dumps(last_eval))
            if step % cfg.ckpt_every == 0 or step == cfg.steps or step == cfg.pause_at:
                _save_checkpoint(ckpt, student, opt, step, history)
    history["pca_variance_kept"] = kept
    return student, {"eval": last_eval, "history": history["evals"], "pca_variance_kept": kept}


# ----------------------------------------------------------------------------------------------
# export and cost


def export_student(student, target, vocab_map: torch.Tensor | None, path: Path, card: dict | None = None) -> int:
    """Write a model directory ``load_causal_lm`` loads (fp16 weights, tokenizer, vocab map); returns bytes."""
    path.mkdir(parents=True, exist_ok=True)
    s = student.to(torch.float16)
    s.config.dtype = torch.float16
    from .models import _quiet

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
        _atomic_json(card, path / "distill-summary.json")
    return sum(f.stat().st_size for f in path.iterdir() if f.is_file())  # labels/, checkpoints/ excluded


def measure_cost(target, draft, prompt: str = "def fibonacci(n):\n    ", steps: int = 48, repeats: int = 3
                 ) -> dict[str, float]:
    """c = draft step time / target step time, one-token steps through verispec's ``KVRunner``
    (the draft with its vocab map applied as ``ModelDrafter`` does). Medians; interleaved A/B."""
    from .drafters import DraftContext, ModelDrafter
    from .runner import KVRunner
    from .sampling import SamplingParams

    ids = target.tokenizer(prompt)["input_ids"]
    V = target.vocab_size

    def run_target() -> list[float]:
        r = KVRunner(target.model, 1)
        r.forward(torch.tensor([ids]))
        tok, ts = torch.tensor([[ids[-1]]]), []
        for _ in range(steps):
            t0 = time.perf_counter()
            tok = r.forward(tok)[:, -1].argmax(-1, keepdim=True)
            ts.append(time.perf_counter() - t0)
        return ts

    def run_draft() -> list[float]:
        d = draft if hasattr(draft, "propose") else ModelDrafter(draft)
        d.bind(target)
        features = None
        if getattr(d, "uses_target_features", False):
            features = [target.model.base_model(input_ids=torch.tensor([ids[:-1]])).last_hidden_state[0]]
        d.start(DraftContext([ids], SamplingParams(temperature=0.0), torch.zeros(1, dtype=torch.int64), "exact", V,
                             torch.float32, features))
        ts = []
        for _ in range(steps // 4):
            t0 = time.perf_counter()
            out = d.propose(torch.tensor([4]))
            ts.append((time.perf_counter() - t0) / 4)
            toks = out.tokens[0].tolist()  # pretend everything was accepted (+ no bonus)
            if features is not None:  # stand-in features: the cost does not depend on their values
                d.update([toks], features=[torch.zeros(len(toks), target.model.config.hidden_size)])
            else:
                d.update([toks])
        return ts

    tt, td = [], []
    for _ in range(repeats):
        tt += run_target()
        td += run_draft()
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    return {"target_step_s": med(tt), "draft_step_s": med(td), "c": med(td) / med(tt)}


def measure_acceptance(target, drafter, *, workloads: str = "code,chat,grounded", limit: int = 2,
                       max_new_tokens: int = 48, k: int = 4) -> dict[str, dict[str, float]]:
    """alpha (per tested token), draft acceptance and tau of ``drafter`` with the engine (greedy,
    fixed ``k``) on the first ``limit`` prompts of each built-in bench workload, one batch each."""
    from .workloads import load_workload
    from .engine import SpeculativeDecoder
    from .sampling import SamplingParams

    out = {}
    dec = SpeculativeDecoder(target, drafter, k=k)
    for name in workloads.split(","):
        prompts = load_workload(name)[:limit]
        room = getattr(target.model.config, "max_position_embeddings", 1 << 30) - max_new_tokens
        ids = [dec.encode([p.text], chat=p.chat)[0][-room:] for p in prompts]  # (tiny test models: short context)
        st = dec.generate(ids, max_new_tokens, SamplingParams(temperature=0.0)).stats
        out[name] = {"alpha": st.alpha, "draft_acceptance": st.draft_acceptance, "tau": st.tau, "drafted": st.drafted,
                     "emitted": st.emitted}
    return out


# ----------------------------------------------------------------------------------------------
# the whole pipeline


def distill(target: str, corpus: list[str], out: str, *, arch: str = DistillConfig.arch,
            vocab_size: int = DistillConfig.vocab_size, steps: int = DistillConfig.steps, seed: int = 0,
            label_tokens: int = DistillConfig.label_tokens,
            self_distill_prompts: int = DistillConfig.self_distill_prompts, progress: bool = True,
            stdlib: bool = True, stages: Sequence[str] = ("label", "train", "export"), measure: bool = True,
            threads: int | None = None, **overrides) -> dict:
    """Distil a draft for ``target`` into directory ``out`` (resumable; see the module docstring).

    Args:
        target: the target model (built-in name, HF directory or .gguf file).
        corpus: extra files / folders of text (the Python stdlib is always included unless ``stdlib=False``).
        out: output directory; it ends up loadable by ``load_causal_lm`` (labels and checkpoints
            live in its ``labels/`` and ``checkpoints/`` subfolders).
        arch: ``llama-l<layers>-h<hidden>[-i<intermediate>]``.
        vocab_size: rows of the draft's output vocabulary (the vocab map); 0 = full vocabulary.
        steps: training steps (batches of ``batch_size`` x 256 tokens).
        label_tokens / self_distill_prompts: teacher-forced tokens and target continuations to label.
        stages: any of "label", "train", "export" (in that order).
        measure: measure c (draft step / target step) after export.
        threads: torch intra-op threads (default: leave torch's setting). On a busy 2-core machine
            1 thread is several times faster than 2.
        overrides: any other ``DistillConfig`` field.

    Returns:
        a summary dict (also written to ``out/distill-summary.json``).
    """
    from .models import load_causal_lm

    if threads:
        torch.set_num_threads(threads)
    cfg = DistillConfig(target=target, arch=arch, vocab_size=vocab_size, steps=steps, seed=seed,
                        label_tokens=label_tokens, self_distill_prompts=self_distill_prompts, **overrides)
    eagle = cfg.arch == "eagle"
    if not eagle:
        parse_arch(cfg.arch)
        if cfg.init_from:
            raise ValueError("init_from (--init-from) fine-tunes an EAGLE head; it needs arch='eagle'")
    init_files = _init_head(cfg.init_from) if cfg.init_from else None
    if cfg.depth < 1:
        raise ValueError(f"depth must be >= 1, got {cfg.depth}")
    bad = set(stages) - {"label", "train", "export"}
    if bad:
        raise ValueError(f"unknown stages {sorted(bad)}")
    outp = Path(out)
    outp.mkdir(parents=True, exist_ok=True)
    _atomic_json(asdict(cfg), outp / "distill.json")
    log = (lambda s: None) if not progress else (lambda s: print(s, flush=True))
    summary: dict = {"config": asdict(cfg)}
    t_all = time.perf_counter()
    tgt = load_causal_lm(target)
    tgt.model.requires_grad_(False)
    if init_files is not None:  # before any labelling: a head fits only the target it was made for
        c, ct = init_files.head.config, tgt.model.config
        if (c.hidden_size, c.intermediate_size) != (ct.hidden_size, ct.intermediate_size):
            raise ValueError(f"init_from {cfg.init_from!r}: the head (hidden {c.hidden_size}) was made for another "
                             f"target than {target!r} (hidden {ct.hidden_size})")

    if "label" in stages:
        train_s, held_s, info = prepare_streams(tgt.tokenizer, corpus, outp, stdlib=stdlib)
        files = info.pop("files")
        summary["corpus"] = info
        summary["labels"] = make_labels(cfg, outp, tgt, train_s, held_s, progress, files=files)

    if "train" in stages or "export" in stages:
        tr_files, he_files = label_files(outp, "train"), label_files(outp, "heldout")
        if not tr_files or not he_files:
            raise ValueError(f"no label shards in {outp / 'labels'}: run the 'label' stage first")
        train, held = LabelSet.load(tr_files), LabelSet.load(he_files)
        V = tgt.model.config.vocab_size
        n_vocab = vocab_size if 0 < vocab_size < V else V
        eos = [tgt.tokenizer.eos_token_id] if tgt.tokenizer.eos_token_id is not None else []
        vmap_file = outp / "checkpoints" / "vocab_map.safetensors"  # fixed once training starts
        started = any((outp / "checkpoints" / n).is_file() for n in ("last.safetensors", "eagle-last.safetensors"))
        if vmap_file.is_file() and started:
            vmap = load_file(vmap_file)["vocab_map"].long()
        elif init_files is not None:  # fine-tuning keeps the head's own output rows
            vmap = init_files.vocab_map if init_files.vocab_map is not None else torch.arange(V)
            if int(vmap.max()) >= V:
                raise ValueError(f"init_from {cfg.init_from!r}: its vocab map has ids >= the target's vocabulary {V}")
            atomic_save({"vocab_map": vmap}, vmap_file)
        else:
            vmap = (choose_vocab_map(train, n_vocab, eos, sequence_weights(cfg, train)) if n_vocab < V
                    else torch.arange(V))
            atomic_save({"vocab_map": vmap}, vmap_file)
        summary["data"] = {"train_seqs": len(train), "train_tokens": int(train.weight.sum()),
                           "train_generated_tokens": int((train.weight * train.generated).sum()),
                           "heldout_tokens": int(held.weight.sum()), "vocab_map_size": len(vmap),
                           "vocab_map_heldout_argmax_coverage": coverage(held, vmap)}
        log(json.dumps(summary["data"]))
        t0 = time.perf_counter()
        if eagle:
            summary.update(_train_export_eagle(cfg, outp, tgt, tr_files, he_files, vmap,
                                               sequence_weights(cfg, train), stages, measure, progress, log,
                                               init=init_files.head if init_files is not None else None))
            summary["train"]["seconds_this_run"] = time.perf_counter() - t0
            summary["seconds"] = time.perf_counter() - t_all
            _atomic_json(summary, outp / "distill-summary.json")
            return summary
        student, result = train_student(cfg, outp, tgt, train, held, vmap, progress, log)
        summary["train"] = {**result, "seconds_this_run": time.perf_counter() - t0}
        if "export" in stages:
            summary["size_bytes"] = export_student(student, tgt, vmap if n_vocab < V else None, outp)
            if measure:
                draft = load_causal_lm(outp)
                summary["cost"] = measure_cost(tgt, draft)
                from .drafters import ModelDrafter

                summary["acceptance"] = measure_acceptance(tgt, ModelDrafter(draft))
    summary["seconds"] = time.perf_counter() - t_all
    _atomic_json(summary, outp / "distill-summary.json")
    return summary


def _init_head(spec: str):
    """The EAGLE head files to fine-tune from: a built-in name ("eagle") or a head directory."""
    from .drafters import eagle_head_dir
    from .eagle import load_eagle_head

    path = eagle_head_dir(spec)
    if path is None:
        raise ValueError(f"init_from {spec!r} is not an EAGLE head directory (no eagle_config.json)")
    return load_eagle_head(path)


def _train_export_eagle(cfg: DistillConfig, out: Path, tgt, tr_files: list[Path], he_files: list[Path],
                        vmap: torch.Tensor, sample_weight: torch.Tensor, stages: Sequence[str], measure: bool,
                        progress: bool, log, init=None) -> dict:
    """``--arch eagle``: target features for every label shard, then the EAGLE head (see
    :mod:`verispec.eagle_train`; from ``init``'s weights when given), exported as
    ``eagle_config.json`` + ``eagle.safetensors``."""
    from .eagle import features_match_logits, save_eagle_head
    from .eagle_train import FeatureSet, make_features, train_eagle

    if not features_match_logits(tgt.model):
        raise ValueError(f"target {cfg.target!r} does not compute its logits as lm_head(final hidden state); "
                         "--arch eagle cannot use it")
    with _progress(progress) as bar:
        task = bar.add_task("target features", total=len(tr_files) + len(he_files))
        ftr = make_features(tgt.model, tr_files, progress=bar, task=task)
        fhe = make_features(tgt.model, he_files, progress=bar, task=task)
        train, held = FeatureSet.load(ftr), FeatureSet.load(fhe)
        head, result = train_eagle(tgt.model, train, held, vmap, out, steps=cfg.steps, batch_size=cfg.batch_size,
                                   lr=cfg.lr, depth=cfg.depth, noise=cfg.feature_noise, seed=cfg.seed,
                                   sample_weight=sample_weight, init_from=init,
                                   eval_every=cfg.eval_every, ckpt_every=cfg.ckpt_every,
                                   progress=bar if progress else None, log=log)
    summary: dict = {"train": result}
    if "export" in stages:
        V = tgt.model.config.vocab_size
        save_eagle_head(head, out, vocab_map=vmap if len(vmap) < V else None,
                        meta={"target": cfg.target, "distill": asdict(cfg)})
        summary["size_bytes"] = sum(f.stat().st_size for f in out.iterdir() if f.is_file())
        if measure:
            from .drafters import EagleDrafter
            from .eagle import load_eagle_head

            drafter = EagleDrafter(load_eagle_head(out), name=str(out))
            summary["cost"] = measure_cost(tgt, drafter)
            summary["acceptance"] = measure_acceptance(tgt, drafter)
    return summary


def add_distill_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``verispec distill`` options."""
    d = DistillConfig()
    parser.add_argument("--target", default=d.target, help="target model: built-in name, HF dir or .gguf")
    parser.add_argument("--out", required=True, help="output directory (resumable; loadable by load_causal_lm)")
    parser.add_argument("--corpus", action="append", default=[], metavar="PATH",
                        help="extra text files or folders (repeatable); the Python stdlib is always used "
                             "unless --no-stdlib")
    parser.add_argument("--no-stdlib", action="store_true", help="do not use the stdlib sources as corpus")
    parser.add_argument("--arch", default=d.arch,
                        help="llama-l<layers>-h<hidden>[-i<intermediate>] for an independent draft model, or "
                             "'eagle' for a head over the target's features (default %(default)s)")
    parser.add_argument("--depth", type=int, default=d.depth,
                        help="eagle: unrolled draft steps trained per position (default %(default)s)")
    parser.add_argument("--vocab-size", type=int, default=d.vocab_size,
                        help="draft output vocabulary (vocab map rows; 0 = full) (default %(default)s)")
    parser.add_argument("--steps", type=int, default=d.steps, help="training steps (default %(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--label-tokens", type=int, default=d.label_tokens,
                        help="teacher-forced corpus tokens to label (default %(default)s)")
    parser.add_argument("--self-distill-prompts", type=int, default=d.self_distill_prompts,
                        help="prompts the target continues itself (default %(default)s)")
    parser.add_argument("--def-prompts", type=int, default=d.def_prompts,
                        help="extra target continuations of short prompts ending at a Python def header "
                             "(code-completion style) (default %(default)s)")
    parser.add_argument("--chat-prompts", type=int, default=d.chat_prompts,
                        help="target answers to chat prompts built offline from the corpus (code completion, "
                             "explanation, edits, documentation questions; default %(default)s)")
    parser.add_argument("--heldout-chat-prompts", type=int, default=d.heldout_chat_prompts,
                        help="the same from the held-out files, for evaluation (default %(default)s)")
    parser.add_argument("--chat-weight", type=float, default=d.chat_weight,
                        help="sampling weight of chat sequences in training batches (default %(default)s)")
    parser.add_argument("--def-oversample", type=float, default=d.def_oversample,
                        help="sampling weight of those continuations in training batches (default %(default)s)")
    parser.add_argument("--init-from", default="", metavar="DIR",
                        help="eagle: fine-tune this head (a directory, or 'eagle' for the built-in one) instead "
                             "of starting fresh; keeps its vocab map")
    parser.add_argument("--batch-size", type=int, default=d.batch_size)
    parser.add_argument("--lr", type=float, default=d.lr)
    parser.add_argument("--label-seconds", type=float, default=0.0,
                        help="stop labelling after this many seconds (train on what exists; 0 = no limit)")
    parser.add_argument("--stages", default="label,train,export", help="comma-separated subset of label,train,export")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (1 is best on a busy 2-core box)")
    parser.add_argument("--no-measure", action="store_true", help="skip measuring the draft/target step cost c")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def run_from_args(args: argparse.Namespace) -> int:
    """Run ``distill`` from parsed ``add_distill_arguments`` options and print the summary."""
    from rich.console import Console

    s = distill(args.target, list(args.corpus), args.out, arch=args.arch, vocab_size=args.vocab_size,
                steps=args.steps, seed=args.seed, label_tokens=args.label_tokens,
                self_distill_prompts=args.self_distill_prompts, progress=not args.quiet,
                stdlib=not args.no_stdlib, stages=[s for s in args.stages.split(",") if s],
                measure=not args.no_measure, threads=args.threads, batch_size=args.batch_size, lr=args.lr,
                time_budget_s=args.label_seconds, def_prompts=args.def_prompts,
                def_oversample=args.def_oversample, depth=args.depth, chat_prompts=args.chat_prompts,
                heldout_chat_prompts=args.heldout_chat_prompts, chat_weight=args.chat_weight,
                init_from=args.init_from)
    console = Console()
    ev = s.get("train", {}).get("eval", {})
    if ev and "agree" in ev:  # EAGLE head: agreement of each unrolled draft step
        console.print(f"held-out KL {ev['kl']:.3f}, top-1 agreement with the target by draft step: "
                      + ", ".join(f"{a:.3f}" for a in ev["agree"]))
    elif ev:
        console.print(f"held-out KL {ev.get('kl_all', float('nan')):.3f}, top-1 agreement "
                      f"{ev.get('agree_all', float('nan')):.3f} (human text {ev.get('agree_human', float('nan')):.3f}, "
                      f"target's own output {ev.get('agree_generated', float('nan')):.3f})")
    if "cost" in s:
        c = s["cost"]
        console.print(f"draft step {c['draft_step_s'] * 1e3:.2f} ms, target step {c['target_step_s'] * 1e3:.1f} ms, "
                      f"c = {c['c']:.3f}")
    for name, a in s.get("acceptance", {}).items():
        console.print(f"{name} prompts, greedy, k=4: alpha {a['alpha']:.3f} (accepted / drafted "
                      f"{a['draft_acceptance']:.3f}), tau {a['tau']:.2f}")
    if "size_bytes" in s:
        console.print(f"wrote {args.out} ({s['size_bytes'] / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":  # the same as `verispec distill` (one-line errors, exit codes)
    import sys

    from .cli import main

    sys.exit(main(["distill", *sys.argv[1:]]))
