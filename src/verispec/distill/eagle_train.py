"""Training an EAGLE head (:mod:`verispec.drafters.eagle_head`) on the target's own features.

Data: the token sequences of ``verispec.distill``'s label shards (stdlib text and the target's
own continuations). The "features" stage runs the target over each shard once and stores its
final hidden states next to it (fp16 safetensors, atomic, resumable): that is everything the
head needs, since the teacher's distribution at position i is ``softmax(lm_head(f_i))``.

Loss, per position i and unrolled draft step s = 1..depth ("training-time test", as in
EAGLE-3): the head is run the way it drafts. Step 1 reads the real features; step s reads the
features it predicted itself at step s-1 one position earlier, and attends to the real pairs
up to i-s+1 and to its own chain of predicted pairs after them (a block mask over one KV cache,
so every step is one batched pass over all positions). Each step is scored by
``KL(p_target || q_head)`` over the vocab map plus a small smooth-L1 pull of the predicted
feature to the real one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import load_file
from transformers import DynamicCache

from ..drafters.eagle_head import EagleHead, deepen, eagle_config, target_features, widen_taps
from .training import atomic_save, cosine_lr, load_training_state, save_training_state

if TYPE_CHECKING:
    from .features_on_disk import FeaturesOnDisk

__all__ = ["FeatureSet", "feature_path", "make_features", "train_eagle", "evaluate_eagle", "held_out_batches",
           "ttt_mask"]


def feature_path(label_path: Path) -> Path:
    """Where the features of label shard ``labels/X.safetensors`` live: ``features/X.safetensors``."""
    return label_path.parent.parent / "features" / label_path.name


@torch.inference_mode()
def make_features(model, label_paths: Sequence[Path], *, batch: int = 4, progress=None, task=None) -> list[Path]:
    """Run the target over every label shard's ``input_ids`` and store its final hidden states.

    Skips shards whose feature file exists (resumable). Returns the feature paths.
    """
    out = []
    for lp in label_paths:
        fp = feature_path(lp)
        out.append(fp)
        if not fp.is_file():
            with safe_open(str(lp), "pt") as f:
                ids = f.get_tensor("input_ids")
                weight = f.get_tensor("weight")
                generated = f.get_tensor("generated")
            feats = [target_features(model, ids[i:i + batch].long()).to(torch.float16)
                     for i in range(0, len(ids), batch)]
            atomic_save({"input_ids": ids, "features": torch.cat(feats), "weight": weight,
                          "generated": generated}, fp)
        if progress is not None:
            progress.update(task, advance=1)
    return out


@dataclass
class FeatureSet:
    """Sequences with the target's features: ``input_ids [N, T]`` int32, ``features [N, T, H]``
    fp16, ``weight [N, T]`` (0 after an EOS), ``generated [N, T]`` (1 = target-generated), and
    where the shards hold them ``taps [N, T, n, H]`` fp16 (the residual stream after decoder
    layers ``tap_layers``; what a head with a :class:`~verispec.drafters.eagle_head.TapFusion` reads)."""

    input_ids: torch.Tensor
    features: torch.Tensor
    weight: torch.Tensor
    generated: torch.Tensor
    taps: torch.Tensor | None = None
    tap_layers: tuple[int, ...] = ()

    @classmethod
    def load(cls, paths: Sequence[Path], taps: bool = True) -> FeatureSet:
        """Concatenate shards; shorter sequences are right-padded with zeros (weight 0) to the
        longest. One shard at a time into tensors allocated once, so memory peaks at the result
        plus one shard (concatenating padded copies of every shard would hold about three times
        the result: ~24 GB for 2M answer tokens' features). ``taps``: also load the shards' taps
        when every shard has the same ones (else none are loaded)."""
        keys = ["input_ids", "features", "weight", "generated"]
        shapes, layers = [], set()
        for p in paths:
            with safe_open(str(p), "pt") as f:
                shapes.append(f.get_slice("input_ids").get_shape())
                layers.add(tuple(json.loads((f.metadata() or {}).get("taps", "[]"))))
        tap_layers = layers.pop() if taps and len(layers) == 1 else ()
        if tap_layers:
            keys.append("taps")
        N, T = sum(n for n, _ in shapes), max(t for _, t in shapes)
        out: dict[str, torch.Tensor] = {}
        row = 0
        for p in paths:
            d = load_file(str(p))
            n, t = d["input_ids"].shape
            for k in keys:
                if k not in out:
                    out[k] = d[k].new_zeros((N, T, *d[k].shape[2:]))
                out[k][row:row + n, :t] = d[k]
            row += n
            del d
        return cls(*(out[k] for k in keys[:4]), out.get("taps"), tap_layers)

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def subset(self, idx: torch.Tensor) -> FeatureSet:
        taps = None if self.taps is None else self.taps[idx]
        return FeatureSet(self.input_ids[idx], self.features[idx], self.weight[idx], self.generated[idx], taps,
                          self.tap_layers)

    def head_taps(self, head: EagleHead, end: int) -> torch.Tensor | None:
        """The taps ``[N, end, n, H]`` float32 ``head`` reads, in its order, from those these
        sequences hold (which may be more: heads reading fewer layers are compared on one set);
        None for a head without taps; raises if these sequences lack any of them."""
        if not head.feature_taps:
            return None
        if not set(head.feature_taps) <= set(self.tap_layers):
            raise ValueError(f"the head reads the target's layers {list(head.feature_taps)}; these features hold "
                             f"{list(self.tap_layers) or 'none'} (write them with `distill features --taps`)")
        pick = [self.tap_layers.index(layer) for layer in head.feature_taps]
        return self.taps[:, :end, pick].float()


def ttt_mask(T: int, step: int, dtype: torch.dtype = torch.float32, start: int = 0) -> torch.Tensor:
    """Additive attention mask for unrolled draft step ``step`` (1-based): ``[1, 1, T, T]`` for
    step 1, ``[1, 1, W, T + (step-1)*W]`` for later steps, which run only at positions
    ``start..T-1`` (W = T - start of them).

    Cache columns are blocks: block 1 holds the real pairs (all T positions), block m the pairs
    of step m (positions start..T-1). The step-s pair at position i sees real pairs j <= i-s+1,
    the step-m pair at position i-s+m for 2 <= m < s, and itself. Step 1 is the plain causal mask.
    """
    if step == 1:
        start = 0
    i = torch.arange(start, T)[:, None]
    j = torch.arange(T)[None, :]
    jw = torch.arange(start, T)[None, :]
    blocks = [j <= i - step + 1]
    blocks += [jw == i - step + m for m in range(2, step)]
    if step > 1:
        blocks.append(jw == i)
    allowed = torch.cat(blocks, dim=1)  # [W, T + (step-1)*W]
    W = T - start
    allowed[:, -W:] |= torch.eye(W, dtype=torch.bool)  # a query always sees itself (no empty rows)
    mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[None, None]


def unrolled_predictions(head: EagleHead, embed, feats: torch.Tensor, ids: torch.Tensor, depth: int,
                         noise: float = 0.0, generator: torch.Generator | None = None,
                         start: int = 0, taps: torch.Tensor | None = None) -> list[torch.Tensor]:
    """Predicted features ``[B, T, H]`` of draft steps 1..depth for every position (see module doc).

    Step s's output at position i predicts ``f_i`` from real features up to ``f_{i-s}``. Steps
    after the first run only from position ``start`` on (zeros before it), which is exact at
    positions >= ``start + depth`` and saves their cost over a prompt that is only context.
    ``taps [B, T, n, H]``: the target's lower layers, fused into the real features for a head
    that reads them (:meth:`EagleHead.fuse`).
    """
    B, T, H = feats.shape
    e = embed(ids)  # [B, T, H]
    real = head.fuse(feats, taps)  # [B, T, H] what the head reads of the target
    prev = torch.cat([real.new_zeros(B, 1, H), real[:, :-1]], dim=1)  # f_{i-1} beside x_i
    if noise > 0:
        prev = prev + noise * torch.randn(prev.shape, generator=generator)
    cache = DynamicCache(config=head.config)
    pos = torch.arange(T)[None].expand(B, T)
    outs = []
    for s in range(1, depth + 1):
        a = 0 if s == 1 else start
        f_hat = head(e[:, a:], prev[:, a:], attention_mask=ttt_mask(T, s, feats.dtype, a), position_ids=pos[:, a:],
                     cache=cache, use_cache=True)
        if a:
            f_hat = torch.cat([f_hat.new_zeros(B, a, H), f_hat], dim=1)
        outs.append(f_hat)
        prev = torch.cat([f_hat.new_zeros(B, 1, H), f_hat[:, :-1]], dim=1)  # own prediction, one later
    return outs


def held_out_batches(head: EagleHead, embed, held: FeatureSet, depth: int, batch: int = 4,
                     answers_only: bool = False):
    """Yield ``(features [B, T, H] float, weights [B, T], predictions of steps 1..depth [B, T, H])``
    over ``held`` in batches of ``batch`` sequences, each cut after its last scored position
    (``answers_only``: positions whose next token the target generated)."""
    for i in range(0, len(held), batch):
        b = held.subset(torch.arange(i, min(i + batch, len(held))))
        w = _position_weight(b, answers_only)
        end = _last_scored(w, None)
        f, ids, w = b.features[:, :end].float(), b.input_ids[:, :end].long(), w[:, :end]
        yield f, w, unrolled_predictions(head, embed, f, ids, depth, start=_first_scored(w, depth),
                                         taps=b.head_taps(head, end))


@torch.no_grad()
def evaluate_eagle(head: EagleHead, embed, out_full: torch.Tensor, vocab_map: torch.Tensor, held: FeatureSet,
                   depth: int, batch: int = 4, answers_only: bool = False) -> dict:
    """Held-out top-1 agreement of each unrolled step with the target (argmax over the full head;
    a target argmax outside the vocab map is a miss) and the step-1 KL over the map
    (``answers_only``: at positions whose next token the target generated)."""
    head.eval()
    hits = torch.zeros(depth)
    count = torch.zeros(depth)
    kl_sum, kl_n = 0.0, 0.0
    W = out_full[vocab_map]
    for f, w_all, outs in held_out_batches(head, embed, held, depth, batch, answers_only):
        pos = (w_all > 0).nonzero(as_tuple=True)  # only scored positions go through the heads
        want = (f[pos] @ out_full.T).argmax(-1)  # [N] the target's greedy token after each position
        for s, f_hat in enumerate(outs, 1):
            g = f_hat[pos]  # [N, H]
            got = vocab_map[(g @ W.T).argmax(-1)]
            w = w_all.clone()
            w[:, :s] = 0  # positions without s earlier real features
            w = w[pos]
            hits[s - 1] += float(((got == want).float() * w).sum())
            count[s - 1] += float(w.sum())
            if s == 1:
                lp_t = torch.log_softmax(f[pos] @ W.T, -1)
                lp_s = torch.log_softmax(g @ W.T, -1)
                kl = (lp_t.exp() * (lp_t - lp_s)).sum(-1)
                kl_sum += float((kl * w).sum())
                kl_n += float(w.sum())
    head.train()
    agree = (hits / count.clamp_min(1)).tolist()
    return {"kl": kl_sum / max(kl_n, 1.0), "agree": agree}


def _position_weight(b: FeatureSet, answers_only: bool, opening: tuple[int, float] = (0, 1.0)) -> torch.Tensor:
    """``[B, T]`` float weight of each position's label (its next token). ``opening = (n, x)``:
    the first ``n`` positions of every answer (each run of generated positions) weigh ``x`` times
    as much, where a head drafts worst and where the out-of-style split is scored."""
    w = b.weight.float()
    if answers_only:
        w = w * b.generated.float()
    n, x = opening
    if n and x != 1.0:
        index = answer_index(b.generated)
        w = torch.where((index >= 0) & (index < n), w * x, w)
    return w


def answer_index(generated: torch.Tensor) -> torch.Tensor:
    """``[B, T]`` int64: each generated position's place in its answer (its run of generated
    positions, 0 first), -1 elsewhere (prompt, a user turn)."""
    g = generated.long()
    count = g.cumsum(1)  # [B, T] generated positions up to here
    before = torch.where(g == 0, count, 0).cummax(1).values  # [B, T] the count when the run began
    return torch.where(g == 1, count - before - 1, -1)


def _last_scored(w: torch.Tensor, seq_len: int | None) -> int:
    """Columns a batch needs: up to its last scored position (attention is causal, so later
    columns change nothing before them), at most ``seq_len``."""
    scored = w.any(0).nonzero()
    end = int(scored.max()) + 1 if len(scored) else 1
    return min(end, seq_len) if seq_len is not None else end


def _first_scored(w: torch.Tensor, depth: int) -> int:
    """Where the later unrolled steps must start so that every scored position (weight > 0 in
    ``w [B, T]``) is exact: ``depth`` before the first one."""
    scored = w.any(0).nonzero()
    return max(0, int(scored.min()) - depth) if len(scored) else 0


def unrolled_loss(outs: Sequence[torch.Tensor], f: torch.Tensor, w: torch.Tensor, W: torch.Tensor,
                  reg_weight: float, top1_weight: float = 0.0) -> tuple[torch.Tensor, dict]:
    """Sum over draft steps s of KL(target || head) over the map rows ``W [V_map, H]`` plus
    ``reg_weight`` x smooth-L1(predicted, real feature) plus ``top1_weight`` x the head's
    cross-entropy at the target's argmax (the token greedy decoding keeps: greedy acceptance
    asks only that the head's argmax be it), each averaged with weights ``w [B, T]`` (step s
    skips the first s positions). ``outs``: step s's predicted features ``[B, T, H]``.

    Only positions of weight > 0 go through the output rows (the costly part); the result is
    the same as over all positions."""
    pos = (w > 0).nonzero(as_tuple=True)
    with torch.no_grad():
        lp_t = torch.log_softmax(f[pos] @ W.T, -1)  # [N, V_map] teacher over the map
        p_t = lp_t.exp()
        top1 = lp_t.argmax(-1, keepdim=True)  # [N, 1] the target's greedy token (map row)
    loss = f.new_zeros(())
    info = {}
    for s, f_hat in enumerate(outs, 1):
        ws = w.clone()
        ws[:, :s] = 0
        ws = ws[pos]  # [N]
        denom = ws.sum().clamp_min(1)
        g = f_hat[pos]  # [N, H]
        lp_s = torch.log_softmax(g @ W.T, -1)
        kl = ((p_t * (lp_t - lp_s)).sum(-1) * ws).sum() / denom
        reg = (F.smooth_l1_loss(g, f[pos], reduction="none").mean(-1) * ws).sum() / denom
        loss = loss + kl + reg_weight * reg
        if top1_weight:
            ce = (-lp_s.gather(-1, top1).squeeze(-1) * ws).sum() / denom
            loss = loss + top1_weight * ce
        info[f"kl{s}"] = float(kl.detach())
    return loss, info


def steps_within(budget_s: float, elapsed_s: float, done: int, step: int, steps: int) -> int:
    """The last step that ends within ``budget_s`` at the pace of the ``done`` steps this run took
    ``elapsed_s`` for (their evaluations included), at most ``steps`` and never before ``step``.
    Re-read every 20 steps, so a machine that slows down mid-run shortens the run again, and one
    whose first steps were slow (features read from disk before the page cache holds them) gets
    steps back once the pace recovers."""
    per_step = elapsed_s / max(done, 1)
    return min(steps, max(step, step + int((budget_s - elapsed_s) / per_step)))


def train_eagle(target_model, train: FeatureSet | FeaturesOnDisk, held: FeatureSet, vocab_map: torch.Tensor, out: Path, *,
                steps: int, batch_size: int = 4, lr: float = 3e-3, depth: int = 3, noise: float = 0.05,
                reg_weight: float = 0.1, top1_weight: float = 0.0, seed: int = 0, seq_len: int | None = None, eval_every: int = 200,
                ckpt_every: int = 100, sample_weight: torch.Tensor | None = None, init_from: EagleHead | None = None,
                answers_only: bool = False, opening: tuple[int, float] = (0, 1.0), held_eval: int = 0,
                time_budget_s: float = 0.0, autocast: torch.dtype | None = None, taps: Sequence[int] | None = None,
                layers: int | None = None, progress=None, log=print) -> tuple[EagleHead, dict]:
    """Train (or resume from ``out/checkpoints/eagle-last.safetensors``) an EAGLE head.

    ``train``: in memory or read batch by batch from its shards (:class:`FeaturesOnDisk`: the
    same batches, the same weights).

    ``sample_weight [N]``: relative probability of drawing each training sequence (default
    uniform). ``init_from``: start from these weights (fine-tuning) instead of the
    pass-through initialisation. ``answers_only``: score only positions whose next token the
    target generated (where a head drafts), the rest being context. ``opening = (n, x)``: the
    first n positions of every answer weigh x times as much in the loss (:func:`_position_weight`).
    ``held_eval``: evaluate on the first ``held_eval`` held-out sequences only (0 = all).
    ``time_budget_s`` > 0: every 20 steps, plan the steps that end within the budget at the pace
    so far, never more than ``steps`` (:func:`steps_within`; the learning-rate schedule then
    follows the new length; the result records it). ``autocast`` (e.g. ``torch.bfloat16``): the
    forward's matrix products in that dtype (``torch.autocast``; the weights, gradients, optimizer
    and the softmaxes stay float32), several times faster on CPUs with bfloat16 matrix units.
    ``taps``: the target's decoder layers the head reads beside its final features (a
    :class:`~verispec.drafters.eagle_head.TapFusion`; default: those of ``init_from``, else none);
    an ``init_from`` without them, or with some of them, starts with the fusion of the layers it
    lacks at zero (:func:`~verispec.drafters.eagle_head.widen_taps`), so training starts from
    exactly its drafts. The training and held-out sets must hold those taps.
    ``layers``: the head's decoder layers (default: those of ``init_from``, else 1); layers beyond
    ``init_from``'s start adding nothing (:func:`~verispec.drafters.eagle_head.deepen`), so again
    training starts from exactly its drafts. ``top1_weight``: see :func:`unrolled_loss`.
    """
    torch.manual_seed(seed)
    if taps is None:
        taps = init_from.feature_taps if init_from is not None else ()
    init_layers = len(init_from.body.layers) if init_from is not None else 1
    layers = init_layers if layers is None else layers
    head = EagleHead(eagle_config(target_model.config, taps, layers))
    head.init_from_target(target_model)
    if init_from is not None:
        try:
            state = widen_taps(init_from.state_dict(), init_from.feature_taps, taps)
        except ValueError as e:
            raise ValueError(f"taps {list(taps)}: init_from reads layers {list(init_from.feature_taps)}, "
                             "which must all be among them") from e
        state = deepen(state, init_layers, layers)  # refuses fewer layers than init_from's
        missing, unexpected = head.load_state_dict(state, strict=False)
        if unexpected or any(not k.startswith("taps.") for k in missing):
            raise ValueError(f"init_from does not match the head (missing {missing[:3]}, unexpected {unexpected[:3]})")
    head.train()
    embed = target_model.get_input_embeddings()
    out_full = target_model.get_output_embeddings().weight.detach()  # [V, H]
    W = out_full[vocab_map].contiguous()  # [V_map, H]
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    ckpt = out / "checkpoints" / "eagle-last.safetensors"
    step, history = 0, []
    if ckpt.is_file():
        step, history = load_training_state(ckpt, head, opt)
        log(f"resumed from {ckpt} at step {step}")
    g = torch.Generator().manual_seed(seed * 1_000_003 + 17)
    weights = torch.ones(len(train), dtype=torch.float64) if sample_weight is None else sample_weight.double()

    def draw() -> torch.Tensor:
        return torch.multinomial(weights, batch_size, replacement=True, generator=g)

    for _ in range(step):  # replay the batch stream so a resumed run sees the same batches
        draw()
    t0, first, asked, told = time.perf_counter(), step, steps, steps
    task = progress.add_task("training (EAGLE head)", total=steps, completed=step) if progress else None
    last = history[-1] if history else {}
    while step < steps:
        b = train.subset(draw())
        w = _position_weight(b, answers_only, opening)
        end = _last_scored(w, seq_len)
        f, ids, w = b.features[:, :end].float(), b.input_ids[:, :end].long(), w[:, :end]
        taps = b.head_taps(head, end)
        for group in opt.param_groups:
            group["lr"] = cosine_lr(step, steps, lr, floor=0.05)
        noise_gen = torch.Generator().manual_seed(seed * 1_000_003 + 7_919 * step + 1)  # per step: resumable
        with torch.autocast("cpu", dtype=autocast or torch.bfloat16, enabled=autocast is not None):
            outs = unrolled_predictions(head, embed, f, ids, depth, noise, noise_gen, start=_first_scored(w, depth),
                                        taps=taps)
            loss, info = unrolled_loss(outs, f, w, W, reg_weight, top1_weight)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        if time_budget_s and (step - first) % 20 == 0:
            elapsed = time.perf_counter() - t0
            fit = steps_within(time_budget_s, elapsed, step - first, step, asked)
            if fit != steps:
                steps = fit
                if abs(steps - told) > 0.02 * told:  # say so when the plan moved, not at every small step
                    told = steps
                    log(f"{elapsed / (step - first):.2f} s per step so far: {steps} steps fit the time budget")
                if task is not None:
                    progress.update(task, total=steps)
        if progress:
            progress.update(task, advance=1, description="training (EAGLE head) " +
                            " ".join(f"{k} {v:.2f}" for k, v in info.items()))
        if step % eval_every == 0 or step == steps:
            probe = held.subset(torch.arange(min(held_eval, len(held)))) if held_eval else held
            last = {"step": step, "seconds": time.perf_counter() - t0,
                    **evaluate_eagle(head, embed, out_full, vocab_map, probe, depth, answers_only=answers_only)}
            history.append(last)
            log(json.dumps(last))
        if step % ckpt_every == 0 or step == steps:
            save_training_state(ckpt, head, opt, step, history)
    return head, {"eval": last, "history": history, "steps": steps}
