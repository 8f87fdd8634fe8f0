"""An EAGLE-style draft head: a decoder layer (or a few) that reads the target's own features.

An independent small draft model has to re-derive from the tokens alone what the target has
already computed. The EAGLE idea (Li et al., 2024) is to draft from the target's *features*:
the target's final hidden state ``f_i`` at position i (its logits are ``lm_head(f_i)``) plus
the token ``x_{i+1}`` that was actually chosen there predict the next feature ``f_{i+1}``, and
the target's own head turns the predicted feature into a draft distribution.

Here one input pair per position i is ``(f_{i-1}, x_i)`` (``f_{-1} = 0``)::

    e_i  = embed(x_i)                         # the target's input embedding, shared  [B, T, H]
    u_i  = fc([e_i ; f_{i-1}])                # 2H -> H                              [B, T, H]
    f^_i = norm(layers(u_i | u_<i))           # Llama decoder layer(s) + RMSNorm      [B, T, H]
    q_i  = softmax(head[vocab_map] @ f^_i)    # the target's head rows               [B, T, V_map]

so ``q_i`` drafts ``x_{i+1}``. At draft time the real features stop at the last verified
position; further steps feed the head's own ``f^`` back in. A head may also read the target's
lower layers (``feature_taps``, as EAGLE-3 reads low and middle layers): the real features are
then ``f_i`` plus a learned map of those layers' states at i (:class:`TapFusion`). Nothing here affects exactness:
the verifier only sees the q each draft token was sampled from.

The head owns ``fc``, the layer(s) and the norm (about 4.5M parameters for SmolLM2-135M with one
layer, 3.5M more per further layer, shipped as fp16 safetensors); the embedding and the output
rows are the target's, bound at load time, so the draft directory holds no copy of them. The
directory is not a transformers model: HF assisted generation cannot run it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import LlamaConfig, LlamaModel, PreTrainedModel
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from ..kv import tapped_states
from ..models import CausalLM, ModelLoadError, cpu_matrix_units
from ..models.kernels import (cache_evictor, fp16_linear, int8_linear, invariant_attention, invariant_linear,
                             kernel_choice, measured_choice, pack_weight,
                             packed_linear)

__all__ = ["EAGLE_FORMAT", "EagleHead", "EagleDraftModel", "EagleFiles", "TapFusion", "eagle_config",
           "target_features", "target_taps", "check_taps", "widen_taps", "deepen", "features_match_logits", "save_eagle_head", "load_eagle_head", "bind_eagle", "is_eagle_dir",
           "capability_draft_weights"]

EAGLE_FORMAT = "verispec-eagle-v1"
CONFIG_NAME = "eagle_config.json"
WEIGHTS_NAME = "eagle.safetensors"
VOCAB_MAP_NAME = "vocab_map.safetensors"
DRAFT_WEIGHTS = ("auto", "fp16", "int8", "fp32", "measured")  # what a bound head's draft steps read (see bind_eagle)
# CPU flags under which int8 draft weights are the default: the CPUs where int8 was timed fastest
# (torch's int8 kernel, the fallback where the compiled one cannot be built, reads bfloat16 inputs).
INT8_FLAGS = ("avx512_bf16", "amx_bf16")
FP16_FLAGS = ("avx2", "avx512f")  # fbgemm's float16 weights need AVX2 (F16C) at least


def eagle_config(target_config, taps: Sequence[int] = (), layers: int = 1) -> LlamaConfig:
    """The head's Llama config: the target's widths, heads and RoPE, no vocabulary, ``layers``
    decoder layers (EAGLE's head has one). ``taps``: the target's decoder layers whose outputs the
    head also reads (:class:`TapFusion`; stored as ``feature_taps``, empty for a head that reads
    the final features only)."""
    c = target_config
    if isinstance(layers, bool) or not isinstance(layers, int) or not 1 <= layers <= 8:
        raise ValueError(f"layers must be an integer in 1..8 (decoder layers of the head), got {layers!r}")
    return LlamaConfig(
        feature_taps=list(check_taps(taps, getattr(c, "num_hidden_layers", 0))),
        hidden_size=c.hidden_size,
        intermediate_size=c.intermediate_size,
        num_attention_heads=c.num_attention_heads,
        num_key_value_heads=getattr(c, "num_key_value_heads", c.num_attention_heads),
        head_dim=getattr(c, "head_dim", c.hidden_size // c.num_attention_heads),
        num_hidden_layers=layers,
        vocab_size=1,  # the head has no embedding of its own (it uses the target's)
        pad_token_id=None, bos_token_id=None, eos_token_id=None,
        rms_norm_eps=getattr(c, "rms_norm_eps", 1e-5),
        rope_parameters=getattr(c, "rope_parameters", None),
        max_position_embeddings=getattr(c, "max_position_embeddings", 8192),
        attention_bias=getattr(c, "attention_bias", False),
        mlp_bias=getattr(c, "mlp_bias", False),
        hidden_act=getattr(c, "hidden_act", "silu"),
    )


def check_taps(taps: Sequence[int], n_layers: int, what: str = "taps") -> tuple[int, ...]:
    """``taps`` as a tuple if they are distinct decoder layers before the last of a target with
    ``n_layers`` (the last layer's output, normed, is the features themselves), else ValueError."""
    taps = tuple(int(t) for t in taps)
    if any(not 1 <= t < n_layers for t in taps) or len(set(taps)) != len(taps):
        raise ValueError(f"{what} must be distinct decoder layers in 1..{n_layers - 1} of the target (the last "
                         f"layer's output is the features), got {list(taps)}")
    return taps


class TapFusion(nn.Module):
    """What a head reads from the target's lower layers (EAGLE-3 reads low, middle and high
    layers), added to the final feature the target's head reads::

        f'_i = f_i + W [rms(h^a_i) * g_a ; rms(h^b_i) * g_b ; ...]     # [B, T, H]

    ``h^l_i``: the residual stream after decoder layer l (HF's ``hidden_states[l]``), one per tap.
    W starts at zero, so a head trained without taps, given this, drafts exactly as before and
    training only adds what the taps tell it. Only real features pass through it: a draft step
    after the first feeds the head's own prediction, as without taps.
    """

    def __init__(self, hidden_size: int, n_taps: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.gain = nn.Parameter(torch.ones(n_taps, hidden_size))  # [n, H] one RMSNorm weight per tap
        self.proj = nn.Linear(n_taps * hidden_size, hidden_size, bias=False)
        nn.init.zeros_(self.proj.weight)

    def forward(self, features: torch.Tensor, taps: torch.Tensor,
                proj: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
        """``features [..., H]``, ``taps [..., n, H]`` -> fused features ``[..., H]``. ``proj``: W
        as another matmul of the same weight (a drafter's copy in its draft weights, reading
        ``[rows, n * H]``); default ``self.proj``."""
        x = taps.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.gain.float()
        return features + (proj or self.proj)(x.flatten(-2).to(self.proj.weight.dtype)).to(features.dtype)


def widen_taps(state: dict[str, torch.Tensor], old: Sequence[int], new: Sequence[int]) -> dict[str, torch.Tensor]:
    """A head's ``state`` dict that reads the target's layers ``old``, laid out for a head that
    reads ``new`` (a superset, any order): each old layer's gain row and block of the fusion's
    columns move to that layer's place, a new layer gets gain 1 and zero columns. So the widened
    head fuses exactly what the old one did, whatever the new layers hold, and training starts
    from its drafts (as a head without taps given taps starts, :class:`TapFusion`)."""
    old, new = tuple(old), tuple(new)
    if not set(old) <= set(new):
        raise ValueError(f"taps {list(new)}: the head reads layers {list(old)}, which are not all among them")
    state = dict(state)
    if not old:
        return state  # a head without taps: the new fusion starts at zero already
    gain, proj = state["taps.gain"], state["taps.proj.weight"]  # [n_old, H], [H, n_old * H]
    H = gain.shape[1]
    wide_gain, wide_proj = gain.new_ones(len(new), H), proj.new_zeros(H, len(new) * H)
    for i, layer in enumerate(old):
        j = new.index(layer)
        wide_gain[j] = gain[i]
        wide_proj[:, j * H:(j + 1) * H] = proj[:, i * H:(i + 1) * H]
    state["taps.gain"], state["taps.proj.weight"] = wide_gain, wide_proj
    return state


def deepen(state: dict[str, torch.Tensor], old: int, new: int) -> dict[str, torch.Tensor]:
    """A head's ``state`` dict with ``old`` decoder layers, laid out for a head with ``new`` >= old:
    each added layer starts as a copy of the last one with its two outputs into the residual
    stream (``o_proj``, ``down_proj``) at zero, so it adds nothing and the deepened head drafts
    exactly what the old one did; training then grows what the extra layer adds (as the tap
    fusion starts at zero, :class:`TapFusion`)."""
    if not 1 <= old <= new:
        raise ValueError(f"layers {new}: the head has {old} decoder layers, and a head cannot lose layers")
    state = dict(state)
    last = f"body.layers.{old - 1}."
    for i in range(old, new):
        for k in [k for k in state if k.startswith(last)]:
            v = state[k].clone()
            if k.endswith(("self_attn.o_proj.weight", "mlp.down_proj.weight", "self_attn.o_proj.bias",
                           "mlp.down_proj.bias")):
                v.zero_()
            state[f"body.layers.{i}." + k[len(last):]] = v
    return state


class EagleHead(nn.Module):
    """The trainable part: ``fc`` (2H -> H), Llama decoder layer(s) and a final RMSNorm, and
    for a config with ``feature_taps`` a :class:`TapFusion` (``taps``) over those layers.

    ``forward`` maps input embeddings ``[B, T, H]`` and previous features ``[B, T, H]`` to
    predicted features ``[B, T, H]`` (HF attention mask / positions / cache passed through).
    Real features go through :meth:`fuse` first.
    """

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        H = config.hidden_size
        self.config = config
        self.fc = nn.Linear(2 * H, H, bias=True)
        self.body = LlamaModel(config)
        self.body.embed_tokens.requires_grad_(False)  # unused [1, H] stub (not saved)
        nn.init.zeros_(self.body.embed_tokens.weight)
        n_taps = len(self.feature_taps)
        self.taps = TapFusion(H, n_taps, getattr(config, "rms_norm_eps", 1e-5)) if n_taps else None

    @property
    def feature_taps(self) -> tuple[int, ...]:
        """The target's decoder layers this head reads beside its final features (may be empty)."""
        return tuple(getattr(self.config, "feature_taps", None) or ())

    def fuse(self, features: torch.Tensor, taps: torch.Tensor | None,
             proj: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
        """The real features the head reads: ``features [..., H]`` with ``taps [..., n, H]`` fused
        in (:class:`TapFusion`, its projection ``proj`` when given), or ``features`` as they are for
        a head without taps."""
        if self.taps is None:
            return features
        if taps is None or taps.shape[-2] != len(self.feature_taps):
            got = None if taps is None else taps.shape[-2]
            raise ValueError(f"this EAGLE head reads the target's layers {list(self.feature_taps)}: "
                             f"it needs their states beside the features (got {got} taps)")
        return self.taps(features, taps, proj)

    def forward(self, embeds: torch.Tensor, features: torch.Tensor, *, attention_mask=None,
                position_ids=None, cache=None, use_cache: bool = False) -> torch.Tensor:
        u = self.fc(torch.cat([embeds, features], dim=-1))  # [B, T, H]
        out = self.body(inputs_embeds=u, attention_mask=attention_mask, position_ids=position_ids,
                        cache=cache, use_cache=use_cache)
        return out.last_hidden_state  # [B, T, H] after the head's RMSNorm

    def init_from_target(self, target_model: PreTrainedModel) -> None:
        """Start near "f^_i = f_{i-1}": fc passes the feature through (undoing the target's final
        norm weight), the output norm re-applies it. Training then learns the step forward."""
        H = self.config.hidden_size
        w_t = target_model.base_model.norm.weight.detach().float()
        with torch.no_grad():
            self.fc.weight.zero_()
            nn.init.normal_(self.fc.weight[:, :H], std=0.02)
            inv = torch.where(w_t.abs() > 1e-3, 1.0 / w_t, torch.zeros_like(w_t))  # (weights may be negative)
            self.fc.weight[:, H:] = torch.diag(inv)
            self.fc.bias.zero_()
            self.body.norm.weight.copy_(w_t)


class EagleDraftModel(nn.Module):
    """An :class:`EagleHead` bound to a target's embedding and (vocab-mapped) output rows.

    Looks enough like a HF causal LM for :class:`verispec.kv.batch.KVRunner`: ``config``,
    ``device``, ``dtype`` and ``forward_hidden`` (logits over the mapped rows and the predicted
    features).
    """

    def __init__(self, head: EagleHead, embed: nn.Embedding, out_rows: torch.Tensor, *,
                 weights: str = "fp32", invariant: bool = False) -> None:
        super().__init__()
        self.head = head
        self.embed = embed  # shared with the target, not copied
        self.register_buffer("out_rows", out_rows, persistent=False)  # [V_map, H]
        self._step = (_FastStep(head, out_rows, weights=weights, invariant=invariant)
                      if _FastStep.supports(head) else None)
        self.weights = self._step.weights if self._step is not None else "fp32"  # what draft steps read
        self.fp16 = self.weights == "fp16"

    @property
    def config(self) -> LlamaConfig:
        return self.head.config

    @property
    def device(self) -> torch.device:
        return self.out_rows.device

    @property
    def dtype(self) -> torch.dtype:
        return self.out_rows.dtype

    def forward_hidden(self, input_ids: torch.Tensor, *, features: torch.Tensor, logits_to_keep: int = 0,
                       **kw) -> tuple[torch.Tensor, torch.Tensor]:
        """``input_ids [B, T]``, ``features [B, T, H]`` (f_{i-1} beside x_i) -> logits ``[B, T', V_map]``
        and predicted features ``[B, T, H]``.

        Runs :class:`_FastStep` when given a cache and positions (drafting), else
        :meth:`reference_forward_hidden`."""
        if self._step is not None and kw.get("cache") is not None and kw.get("position_ids") is not None:
            return self._step(self.embed(input_ids), features.to(self.dtype), logits_to_keep=logits_to_keep,
                              attention_mask=kw.get("attention_mask"), position_ids=kw["position_ids"],
                              cache=kw["cache"])
        return self.reference_forward_hidden(input_ids, features=features, logits_to_keep=logits_to_keep, **kw)

    def fuse(self, features: torch.Tensor, taps: torch.Tensor | None) -> torch.Tensor:
        """The real features the head reads (:meth:`EagleHead.fuse`): ``features [n, H]`` and
        ``taps [n, t, H]`` -> ``[n, H]``, the projection through the draft weights
        (:meth:`_FastStep.fuse`) where drafting has them."""
        if self._step is None or taps is None or taps.shape[-2] != len(self.head.feature_taps):
            return self.head.fuse(features, taps)  # (its errors, or the reference)
        return self._step.fuse(features, taps)

    def reference_forward_hidden(self, input_ids: torch.Tensor, *, features: torch.Tensor, logits_to_keep: int = 0,
                                 **kw) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`forward_hidden` through the HF modules and plain matmuls (what the fast path is
        tested against)."""
        f_hat = self.head(self.embed(input_ids), features.to(self.dtype), **kw)
        keep = f_hat if logits_to_keep == 0 else f_hat[:, -logits_to_keep:]
        return nn.functional.linear(keep, self.out_rows), f_hat


class _FastStep:
    """:meth:`EagleHead.forward` plus the output rows as straight tensor code, for drafting.

    Same math and the same HF cache object as the reference
    (``EagleDraftModel.reference_forward_hidden``, which the tests compare it with), without the
    per-call work of the HF model classes (output records, mask building, module hooks), which
    is a large share of a one-token draft step for a model this small (profiled with cProfile).
    The matmuls are the CPU kernels of :mod:`verispec.models.kernels` only for a head whose
    weights and output rows all lie on the CPU: there, for float32, every matmul of up to 32
    rows goes through a oneDNN-packed copy of its weight, or with ``weights="fp16"`` every matmul
    through a float16 copy (:func:`verispec.models.kernels.fp16_linear`; float32 in, out and
    accumulation), with ``weights="int8"`` through an int8 copy with a scale per output row
    (:func:`verispec.models.kernels.int8_linear`: the compiled panel8 kernel, float32 inputs). Other dtypes use
    ``F.linear``, and so does every matmul on any other device.
    With ``invariant`` (a target loaded with ``kernel_choice="invariant"``) a row's draft is the
    same bits whatever else is in the batch: float32 matmuls run the batch-invariant panel kernel
    and attention the ``attend`` kernel (:func:`verispec.models.kernels.invariant_kernels`); the
    int8 and float16 kernels compute each row on its own already (tested).
    The copies are made at construction: bind again after changing the head.
    """

    @staticmethod
    def supports(head: EagleHead) -> bool:
        """A head of Llama decoder layers (the only kind :func:`eagle_config` makes)."""
        return len(head.body.layers) >= 1 and getattr(head.config, "model_type", None) == "llama"

    @staticmethod
    def weights(head: EagleHead, out_rows: torch.Tensor) -> dict[str, tuple[torch.Tensor, torch.Tensor | None]]:
        """The step's matmuls in the order it runs them: name -> (weight ``[out, in]``, bias).
        A head with taps first fuses the target's features (``fuse``, :meth:`fuse`); layer 0's
        are ``q`` .. ``down``, a later layer i's ``q{i}`` .. ``down{i}``."""
        mods = {"fuse": head.taps.proj} if head.taps is not None else {}
        mods |= {"fc": head.fc}
        for i, layer in enumerate(head.body.layers):
            attn, mlp, n = layer.self_attn, layer.mlp, str(i or "")
            mods |= {"q" + n: attn.q_proj, "k" + n: attn.k_proj, "v" + n: attn.v_proj, "o" + n: attn.o_proj,
                     "gate" + n: mlp.gate_proj, "up" + n: mlp.up_proj, "down" + n: mlp.down_proj}
        return {n: (m.weight, m.bias) for n, m in mods.items()} | {"out": (out_rows, None)}

    def __init__(self, head: EagleHead, out_rows: torch.Tensor, *, weights: str = "fp32",
                 invariant: bool = False) -> None:
        self.head, self.layers = head, list(head.body.layers)
        kind, weights = weights, self.weights(head, out_rows)
        self.cpu = all(t.device.type == "cpu" for w, b in weights.values() for t in (w, b) if t is not None)
        make = {"fp16": fp16_linear, "int8": int8_linear}.get(kind) if self.cpu else None
        small = {n: make(w, b) for n, (w, b) in weights.items()} if make is not None else {}
        self.weights = kind if small and all(f is not None for f in small.values()) else "fp32"
        self.invariant = invariant and self.cpu
        if self.weights != "fp32":
            self.linear = small
        elif self.invariant:
            self.linear = {n: invariant_linear(w.detach(), b) for n, (w, b) in weights.items()}
        else:
            self.linear = {n: _linear_fn(w, b, cpu_kernels=self.cpu) for n, (w, b) in weights.items()}
        self.head_dim = self.layers[0].self_attn.head_dim

    def fuse(self, features: torch.Tensor, taps: torch.Tensor) -> torch.Tensor:
        """:meth:`EagleHead.fuse` with the fusion's projection read from the draft weights:
        ``features [n, H]``, ``taps [n, t, H]`` -> ``[n, H]``. It runs on the real features of
        every pass, right after the target's pass has pushed its weights out of the caches, so it
        reads the same kind of copy as the step's matmuls (its float32 weight is 4 MB for three
        taps of SmolLM2-135M, its int8 copy 1 MB)."""
        return self.head.fuse(features, taps, proj=self.linear.get("fuse"))

    def __call__(self, embeds: torch.Tensor, features: torch.Tensor, *, logits_to_keep: int,
                 attention_mask: torch.Tensor | None, position_ids: torch.Tensor, cache
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """``embeds``, ``features [B, T, H]`` -> logits ``[B, T', V_map]``, predicted features ``[B, T, H]``."""
        lin = self.linear
        B, T, H = embeds.shape
        u = lin["fc"](torch.cat([embeds, features], dim=-1).reshape(B * T, 2 * H))  # [B*T, H]
        cos, sin = self.head.body.rotary_emb(u, position_ids)
        for i, layer in enumerate(self.layers):
            u = self._layer(i, layer, u, B, T, cos, sin, attention_mask, cache)
        f_hat = self.head.body.norm(u).view(B, T, H)  # [B, T, H]
        keep = f_hat if logits_to_keep == 0 else f_hat[:, -logits_to_keep:]
        logits = lin["out"](keep.reshape(-1, H))  # [B*T', V_map]
        return logits.view(B, keep.shape[1], -1), f_hat

    def _layer(self, i: int, layer, u: torch.Tensor, B: int, T: int, cos: torch.Tensor, sin: torch.Tensor,
               attention_mask: torch.Tensor | None, cache) -> torch.Tensor:
        """Decoder layer ``i`` on the residual stream ``u [B*T, H]`` (its keys and values into
        the cache's layer i) -> ``[B*T, H]``."""
        lin, D, n, attn = self.linear, self.head_dim, str(i or ""), layer.self_attn
        x = layer.input_layernorm(u)
        q = lin["q" + n](x).view(B, T, -1, D).transpose(1, 2)  # [B, Hq, T, D]
        k = lin["k" + n](x).view(B, T, -1, D).transpose(1, 2)  # [B, Hkv, T, D]
        v = lin["v" + n](x).view(B, T, -1, D).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        k, v = cache.update(k, v, i)  # [B, Hkv, S, D], S = cached + T
        mask = attention_mask  # additive [B, 1, T, S] from KVRunner when rows have holes
        if self.invariant:  # (no mask and T > 1: causal, the new queries being the last T of S columns)
            a = invariant_attention(attn, q, k, v, mask, scaling=attn.scaling)[0]  # [B, T, Hq, D]
        else:
            if mask is None and T > 1:  # causal, the new queries being the last T of S columns
                S = k.shape[2]
                mask = torch.ones(T, S, dtype=torch.bool, device=q.device).tril(S - T)
            a = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=attn.scaling,
                                                           enable_gqa=True).transpose(1, 2)  # [B, T, Hq, D]
        u = u + lin["o" + n](a.reshape(B * T, -1))
        x = layer.post_attention_layernorm(u)
        return u + lin["down" + n](layer.mlp.act_fn(lin["gate" + n](x)) * lin["up" + n](x))


def _linear_fn(weight: torch.Tensor, bias: torch.Tensor | None, *, cpu_kernels: bool):
    """``x [N, in] -> [N, out]``: with ``cpu_kernels`` through a oneDNN-packed copy of the weight
    for up to 32 rows (faster for the few rows of a draft step: BENCHMARKS.md, "Pass costs"),
    else (or where the weight cannot be packed) ``F.linear``."""
    packed = pack_weight(weight) if cpu_kernels else None
    weight = weight.detach()
    bias = None if bias is None else bias.detach()

    def linear(x: torch.Tensor) -> torch.Tensor:
        if packed is not None and x.shape[0] <= 32:
            return packed_linear(x, packed, bias)
        return nn.functional.linear(x, weight, bias)
    return linear


# ----------------------------------------------------------------------------------------------
# the target side


def target_features(model: PreTrainedModel, input_ids: torch.Tensor, **kw) -> torch.Tensor:
    """The target's final hidden states ``[B, T, H]`` (what its LM head reads) for ``input_ids [B, T]``."""
    return model.base_model(input_ids=input_ids, **kw).last_hidden_state


def target_taps(model: PreTrainedModel, input_ids: torch.Tensor, taps: Sequence[int],
                **kw) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's final hidden states ``[B, T, H]`` and its residual stream after each decoder
    layer in ``taps`` ``[B, T, n, H]`` (what a :class:`TapFusion` reads), in one pass."""
    out = model.base_model(input_ids=input_ids, output_hidden_states=True, **kw)
    return out.last_hidden_state, tapped_states(out.hidden_states, taps)


@torch.inference_mode()
def features_match_logits(model: PreTrainedModel) -> bool:
    """Whether ``lm_head(target_features(x)) == model(x).logits`` (false for models that scale or
    soft-cap their logits, whose features an EAGLE head cannot use as they are)."""
    head = model.get_output_embeddings()
    if head is None:
        return False
    ids = torch.arange(1, 9, device=model.device)[None] % max(1, model.config.vocab_size)
    ref = model(input_ids=ids).logits
    got = head(target_features(model, ids))
    return got.shape == ref.shape and bool(torch.allclose(got, ref, rtol=1e-4, atol=1e-4))


# ----------------------------------------------------------------------------------------------
# files


@dataclass
class EagleFiles:
    """A loaded head directory: the head (no target bound yet), its vocab map and its config metadata."""

    head: EagleHead
    vocab_map: torch.Tensor | None
    meta: dict


def is_eagle_dir(path: str | os.PathLike) -> bool:
    """True if ``path`` is a directory written by :func:`save_eagle_head`."""
    try:
        return (Path(path) / CONFIG_NAME).is_file()
    except (OSError, ValueError):  # e.g. a name too long to be a path
        return False


def save_eagle_head(head: EagleHead, path: str | os.PathLike, *, vocab_map: torch.Tensor | None,
                    meta: dict | None = None, dtype: torch.dtype = torch.float16) -> None:
    """Write ``eagle_config.json`` + ``eagle.safetensors`` (+ ``vocab_map.safetensors``) into ``path``."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to(dtype).contiguous() for k, v in head.state_dict().items()
             if not k.startswith("body.embed_tokens")}
    save_file(state, str(path / WEIGHTS_NAME), metadata={"format": EAGLE_FORMAT})
    if vocab_map is not None:
        save_file({"vocab_map": vocab_map.to(torch.int64).contiguous()}, str(path / VOCAB_MAP_NAME))
    cfg = {"format": EAGLE_FORMAT, "config": head.config.to_dict(), **(meta or {})}
    (path / CONFIG_NAME).write_text(json.dumps(cfg, indent=2, default=str) + "\n")


def load_eagle_head(path: str | os.PathLike, *, dtype: torch.dtype = torch.float32) -> EagleFiles:
    """Read a directory written by :func:`save_eagle_head` (weights from safetensors only)."""
    path = Path(path)
    try:
        meta = json.loads((path / CONFIG_NAME).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ModelLoadError(f"{str(path)!r}: cannot read {CONFIG_NAME}: {e}") from None
    if meta.get("format") != EAGLE_FORMAT:
        raise ModelLoadError(f"{str(path)!r}: {CONFIG_NAME} has format {meta.get('format')!r}, "
                             f"expected {EAGLE_FORMAT!r}")
    config = LlamaConfig.from_dict(meta["config"])
    head = EagleHead(config)
    try:
        state = load_file(str(path / WEIGHTS_NAME))
    except Exception as e:  # noqa: BLE001 - safetensors raises several types
        raise ModelLoadError(f"{str(path)!r}: cannot read {WEIGHTS_NAME}: {e}") from None
    try:
        missing, unexpected = head.load_state_dict(state, strict=False)
    except RuntimeError as e:  # shape mismatches
        raise ModelLoadError(f"{str(path)!r}: {WEIGHTS_NAME} does not match its config: "
                             f"{str(e).splitlines()[-1].strip()}") from None
    missing = [k for k in missing if not k.startswith("body.embed_tokens")]
    if missing or unexpected:
        raise ModelLoadError(f"{str(path)!r}: {WEIGHTS_NAME} does not match its config "
                             f"(missing {missing[:3]}, unexpected {unexpected[:3]})")
    head.to(dtype).eval().requires_grad_(False)
    vmap = None
    if (path / VOCAB_MAP_NAME).is_file():
        vmap = load_file(str(path / VOCAB_MAP_NAME))["vocab_map"].to(torch.int64)
    return EagleFiles(head, vmap, meta)


def bind_eagle(files: EagleFiles, target: CausalLM, *, weights: str = "auto") -> EagleDraftModel:
    """Attach a loaded head to ``target``'s embedding and output rows (checks the shapes).

    ``weights`` (what each draft step reads): ``"fp32"``, ``"fp16"`` (float16 copies of the
    head's weights and output rows, half the memory traffic; a CPU kernel: float32 CPU targets
    with fbgemm only), ``"int8"`` (int8 copies with a scale per row, a quarter of the traffic;
    float32 CPU targets, :func:`verispec.models.kernels.int8_linear`), ``"auto"``
    (the default: a rule on the CPU's capabilities, :func:`capability_draft_weights`, no timing)
    or ``"measured"`` (on a float32 CPU target, whichever of those makes a one-row draft step's
    matmuls fastest right after the caches were flushed, timed once per machine and head shape
    and read from :func:`verispec.models.kernels_file`). With ``$VERISPEC_KERNEL_CHOICE=fixed``,
    ``"auto"`` is fp16 where fbgemm runs it. The draft weights decide the bits of q, so a seeded
    sampled "exact" request's text depends on them (never its distribution: the verifier sees
    the q each draft was sampled from): the default therefore never depends on a timing, and a
    machine gives the same text for a seed in every process. The head moves to the target's device and dtype; off the
    CPU its draft steps use no CPU kernel (see ``_FastStep``). What was picked:
    ``verispec.models.kernel_report(draft)["eagle"]``.
    """
    if weights not in DRAFT_WEIGHTS:
        raise ValueError(f"weights must be one of {DRAFT_WEIGHTS}, got {weights!r}")
    model = target.model
    H = model.config.hidden_size
    if files.head.config.hidden_size != H:
        raise ValueError(f"EAGLE head has hidden size {files.head.config.hidden_size}, the target "
                         f"{target.name!r} has {H}")
    out = model.get_output_embeddings().weight.detach()  # [V_t, H]
    V = out.shape[0]
    if files.vocab_map is not None:
        if int(files.vocab_map.max()) >= V or int(files.vocab_map.min()) < 0:
            raise ValueError(f"EAGLE vocab_map has ids outside the target's head [0, {V})")
        out = out[files.vocab_map]
    head = files.head.to(device=out.device, dtype=out.dtype)  # (drafting: _FastStep, with its own weight copies)
    out = out.contiguous()
    kind, choice, rule, info = weights, None, None, {}
    if weights == "auto":
        choice = kernel_choice()
        if choice == "fixed":
            kind, rule = ("fp16" if _runs(head, out, "fp16") else "fp32"), "fixed"
        else:
            kind, rule = capability_draft_weights(head, out), "capability"
    elif weights == "measured":
        choice, rule = "measured", "measured"
        kind, info = _measured_draft_weights(head, out)
    invariant = (getattr(model, "_verispec_kernels", None) or {}).get("choice") == "invariant"
    draft = EagleDraftModel(head, model.get_input_embeddings(), out, weights=kind, invariant=invariant)
    if weights in ("fp16", "int8") and draft.weights != weights:
        need = "fbgemm" if weights == "fp16" else "the panel8 kernel or torch._weight_int8pack_mm"
        raise ValueError(f"weights={weights!r} needs a float32 CPU target and a torch build with {need} "
                         f"(target {target.name!r}: {out.dtype} on {out.device.type})")
    draft._verispec_kernels = {"choice": choice, "eagle": {"weights": draft.weights, "asked": weights,
                                                           "choice": choice, "rule": rule, **info}}
    return draft


def _float32_cpu(head: EagleHead, out_rows: torch.Tensor) -> bool:
    """A head the CPU kernels can serve: float32 weights and output rows on the CPU."""
    if not _FastStep.supports(head) or out_rows.device.type != "cpu" or out_rows.dtype != torch.float32:
        return False
    return all(t.device.type == "cpu" and t.dtype == torch.float32
               for w, b in _FastStep.weights(head, out_rows).values() for t in (w, b) if t is not None)


def _runs(head: EagleHead, out_rows: torch.Tensor, kind: str) -> bool:
    """Whether this torch build runs ``kind`` ("fp16", "int8") draft weights for every matmul of
    the head (the kernels' own probes: a build without the op, or a shape it misreads, fails)."""
    if not _float32_cpu(head, out_rows):
        return False
    make = {"fp16": fp16_linear, "int8": int8_linear}[kind]
    return all(make(w, b) is not None for w, b in _FastStep.weights(head, out_rows).values())


def capability_draft_weights(head: EagleHead, out_rows: torch.Tensor, flags: str | None = None) -> str:
    """The default draft weights (``bind_eagle(weights="auto")``): a rule on the CPU's flags
    (``flags``, default :func:`verispec.models.cpu_matrix_units`: the matrix-unit flags of
    /proc/cpuinfo's ``flags`` line) and the kernels this torch build
    has, never a timing:

    1. a head that is not float32 on the CPU: ``"fp32"`` (no CPU kernel applies);
    2. ``"int8"`` where an int8 kernel runs every matmul and the CPU has bfloat16 units
       (:data:`INT8_FLAGS`: avx512_bf16 or AMX's amx_bf16, the CPUs where int8 was timed
       fastest; torch's kernel, the fallback, reads its inputs as bfloat16). A quarter of
       float32's bytes, and a draft step reads every weight for one row, bound by memory traffic;
    3. else ``"fp16"`` where fbgemm runs every matmul and the CPU has AVX2 or AVX-512;
    4. else ``"fp32"``.

    The CPUs this ran on: the AMD EPYC with AVX-512 and avx512_bf16 (no AMX) and the Intel
    Xeons with AVX-512, avx512_bf16 and AMX both get int8 by rule 2, as timing chose there
    (BENCHMARKS.md: an EAGLE step's c 0.057 int8 against 0.101 float32 on the EPYC; 1.09 ms
    int8, 2.00 fp16, 1.87 fp32 for the output rows on a Xeon); an AVX2-only EPYC gets fp16 by
    rule 3 (the "fixed" choice tuned there)."""
    if not _float32_cpu(head, out_rows):
        return "fp32"
    have = set((cpu_matrix_units() if flags is None else flags).split())
    if any(f in have for f in INT8_FLAGS) and _runs(head, out_rows, "int8"):
        return "int8"
    if any(f in have for f in FP16_FLAGS) and _runs(head, out_rows, "fp16"):
        return "fp16"
    return "fp32"


def _measured_draft_weights(head: EagleHead, out_rows: torch.Tensor) -> tuple[str, dict]:
    """Which draft weights (``"fp32"``, oneDNN-packed; ``"fp16"``; ``"int8"``) make a one-row
    draft step's matmuls (a tapped head's ``fuse``, ``fc`` .. ``down`` and the output rows, inputs
    ``[1, in]``) fastest on
    this machine, each timed right after the CPU's caches were flushed (as in decoding, after a
    target pass): timed once per machine and shapes, then read from
    :func:`verispec.models.kernels_file`. Only the kinds this build and these shapes can run are
    timed; "fp32" without timing where no other can (not a float32 CPU head). Returns
    ``(kind, info)``, info as :func:`verispec.models.kernels.measured_choice` gives it."""
    if not _FastStep.supports(head) or out_rows.device.type != "cpu" or out_rows.dtype != torch.float32:
        return "fp32", {}
    weights = _FastStep.weights(head, out_rows)
    if any(t.device.type != "cpu" or t.dtype != torch.float32 for w, b in weights.values() for t in (w, b)
           if t is not None):
        return "fp32", {}
    makers = {"fp16": fp16_linear, "int8": int8_linear}
    kinds = ("fp32",) + tuple(k for k, make in makers.items()
                              if all(make(torch.zeros(1, w.shape[1])) is not None for w, _ in weights.values()))
    if len(kinds) == 1:
        return "fp32", {}

    def make_calls() -> dict:
        lins = {"fp32": {n: _linear_fn(w, b, cpu_kernels=True) for n, (w, b) in weights.items()}}
        for k in kinds[1:]:
            lins[k] = {n: makers[k](w, b) for n, (w, b) in weights.items()}
        gen = torch.Generator().manual_seed(0)
        xs = {n: torch.randn(1, w.shape[1], generator=gen) for n, (w, _) in weights.items()}

        def step(lin: dict) -> None:
            for n, x in xs.items():
                lin[n](x)
        return {k: (lambda lin=lin: step(lin)) for k, lin in lins.items()}
    key = "eagle step 1 row, caches flushed " + " ".join(f"{n} {w.shape[1]}x{w.shape[0]}"
                                                           for n, (w, _) in weights.items())
    return measured_choice(key, kinds, make_calls, before=cache_evictor())
