"""CPU kernels for loaded models: packed and float16 linears, the output head, GQA attention.

On a CPU a decode step is bound by reading the weights, and the generic paths that HF and
``F.linear`` take are tuned for other shapes or other devices. The kernels here replace them, in
place and with the same weights, for the shapes speculative decoding runs (a few rows per pass):

* :func:`fast_lm_head`: the output head as ``(W @ x.T).T`` (MKL's better path for a few rows);
* :func:`fast_small_linears`: every ``nn.Linear`` gets a oneDNN-packed copy of its weight
  (:func:`pack_weight`, :func:`packed_linear`), used for the few-row inputs of a verify pass;
* :func:`gqa_attention`: HF's SDPA attention without its per-group K/V copies;
* :func:`~verispec.models.lean.lean_layers`: Llama decoder layers without HF's per-call
  Python wrappers (the same operations, bit-identical);
* :func:`fp16_linear`: a float16 fbgemm copy of a weight (the EAGLE head's draft steps);
* ``rowdot`` (:mod:`.rowdot`): a compiled float32 kernel for 1-16 rows, built on first use where
  a C++ compiler and ninja exist, and batch-invariant (a row's output does not depend on how
  many rows the call has).

All of them are CPU-specific (oneDNN, fbgemm, MKL's behaviour, torch's CPU SDPA kernel).
:func:`apply_cpu_kernels` is what loading calls: it installs the chosen kernels only when the
model lies on the CPU and leaves the plain HF modules on any other device; each kernel also
checks the device of what it is given. Measured costs are in BENCHMARKS.md ("Pass costs",
``python -m verispec.bench.pass_costs``).

Which linear kernel runs for how many rows is chosen by measurement on the machine at hand
(:func:`measured_linears`), not fixed: which one is faster depends on the CPU (AVX2 or
AVX-512, cache sizes), the torch build and the thread count. At load, for each distinct linear
shape of the model and for the output head, every candidate (plain ``F.linear``, oneDNN-packed,
for the head ``(W @ x.T).T``, and for float32 weights ``rowdot`` where it builds) is timed for
1..16 rows, and each row count gets the fastest. The choices are kept in a JSON file
(:func:`kernels_file`) keyed by CPU model, torch version, thread count, shape and candidates,
so later loads on the same machine time nothing (and a new candidate is timed on first use).
``VERISPEC_KERNEL_CHOICE=fixed`` (or ``kernel_choice="fixed"``) installs instead the fixed
choices tuned on one AMD EPYC (:func:`fast_lm_head` + :func:`fast_small_linears`), for A/B
comparisons. :func:`kernel_report` says what a model got.
"""

from __future__ import annotations

import math
import os
import statistics
import time
import types
import warnings
from collections.abc import Callable, Hashable
from pathlib import Path

import torch
from torch import nn

from .attend import invariant_attention, load_attend
from .lean import lean_layers
from .panel import PanelKernel, load_panel
from .paths import cache_dir, machine_key, read_json, write_json
from .rowdot import ROWDOT_VERSION, load_rowdot

__all__ = [
    "KERNELS",
    "faster_matmul_dtype",
    "matmul_dtype",
    "apply_cpu_kernels",
    "model_device",
    "fast_lm_head",
    "fast_small_linears",
    "gqa_attention",
    "invariant_kernels",
    "invariant_linear",
    "invariant_attention",
    "InvariantKernelsUnavailable",
    "pack_weight",
    "packed_linear",
    "fp16_linear",
    "int8_linear",
    "KERNEL_CHOICES",
    "kernel_choice",
    "kernels_file",
    "measured_linears",
    "measured_choice",
    "cache_evictor",
    "kernel_report",
]

# what apply_cpu_kernels installs, in order
KERNELS = ("fast_lm_head", "fast_small_linears", "gqa_attention", "invariant_attention", "lean_layers")
KERNEL_CHOICES = ("invariant", "measured", "fixed")  # how kernels are chosen (see kernel_choice)
EVICT_BYTES = 256 << 20  # what cache_evictor writes: more than the L3 of the CPUs this runs on


# ----------------------------------------------------------------------------------------------
# choosing kernels by device


def model_device(model: nn.Module) -> torch.device:
    """The device a model runs on: HF's ``model.device``, else its first parameter's (CPU if none)."""
    dev = getattr(model, "device", None)
    if isinstance(dev, torch.device):
        return dev
    p = next(model.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


def apply_cpu_kernels(model: nn.Module, *, head: bool = True, linears: bool = True,
                      attention: bool = True, choice: str | None = None) -> tuple[str, ...]:
    """Install the chosen CPU kernels on ``model`` (in place) if it lies on the CPU.

    ``choice`` (default :func:`kernel_choice`: ``$VERISPEC_KERNEL_CHOICE``, else ``"invariant"``):

    * ``"invariant"``: :func:`invariant_kernels`, then :func:`~verispec.models.lean.lean_layers`:
      a row's logits are the same bits whatever the width of its pass and whatever else is in
      its batch. Asked for explicitly it installs all of them or raises
      :class:`InvariantKernelsUnavailable`; as the default it gives way to ``"measured"`` for a
      model it does not cover (not float32: a bfloat16 data run) or when ``head``, ``linears`` or
      ``attention`` is turned off, and, warning once, where its compiled kernels cannot be built.
    * ``"measured"``: ``head`` (a faster output head, :func:`fast_lm_head`'s ``(W @ x.T).T``) and
      ``linears`` (oneDNN-packed weights, rowdot) only for the row counts where they measured
      faster on this machine (:func:`measured_linears`); ``attention``: :func:`gqa_attention`,
      then ``lean_layers`` (bit-identical to HF's).
    * ``"fixed"``: :func:`fast_lm_head` and :func:`fast_small_linears` as tuned on one AMD EPYC.

    A model on any other device (CUDA, MPS, meta, ...) keeps its plain HF modules. Returns the
    names of the kernels that changed the model (a measured choice that keeps every linear plain
    installs neither ``"fast_lm_head"`` nor ``"fast_small_linears"``).
    """
    if model_device(model).type != "cpu":
        return ()
    explicit = choice is not None or bool(os.environ.get("VERISPEC_KERNEL_CHOICE"))
    choice = kernel_choice(choice)
    done: list[str] = []
    if choice == "invariant":
        floats = {p.dtype for p in model.parameters() if p.dtype.is_floating_point}
        if explicit or (head and linears and attention and floats <= {torch.float32}):
            try:
                done.extend(invariant_kernels(model, attention=attention))
            except InvariantKernelsUnavailable as e:
                if explicit:
                    raise
                _warn_once(f"verispec: batch-invariant kernels unavailable ({e}); using the measured ones")
            else:
                if attention and lean_layers(model):
                    done.append("lean_layers")
                return tuple(done)
        choice = "measured"
    if choice == "fixed":
        if head and fast_lm_head(model):
            done.append("fast_lm_head")
        if linears and fast_small_linears(model):
            done.append("fast_small_linears")
        if done:
            model._verispec_kernels = {"choice": "fixed"}
    elif head or linears:
        done.extend(measured_linears(model, head=head, linears=linears))
    if attention and gqa_attention(model):
        done.append("gqa_attention")
    if attention and lean_layers(model):
        done.append("lean_layers")
    return tuple(done)


_WARNED: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def kernel_choice(choice: str | None = None) -> str:
    """``choice``, else ``$VERISPEC_KERNEL_CHOICE``, else ``"invariant"``; one of :data:`KERNEL_CHOICES`.

    ``"invariant"``: batch-invariant kernels (:func:`invariant_kernels`): a row's logits do not
    depend on how many tokens or rows share its pass (compiled kernels; no timing);
    ``"measured"``: linear kernels chosen per row count by timing them on this machine;
    ``"fixed"``: the choices tuned on one AMD EPYC (packed weights for 2-16 rows, the head packed
    for 1-32 rows), kept for A/B comparisons. (The EAGLE head's draft weights follow a rule on
    the CPU's flags under every choice: ``verispec.drafters.eagle_head.capability_draft_weights``.)"""
    choice = choice if choice is not None else (os.environ.get("VERISPEC_KERNEL_CHOICE") or "invariant")
    if choice not in KERNEL_CHOICES:
        raise ValueError(f"kernel choice must be one of {KERNEL_CHOICES}, got {choice!r}")
    return choice


# ----------------------------------------------------------------------------------------------
# batch-invariant kernels

_INVARIANT_ATTENTION = "verispec_invariant"


class InvariantKernelsUnavailable(RuntimeError):
    """The batch-invariant kernels cannot run here (no compiled kernels, or a model they do not
    cover)."""


def invariant_kernels(model: nn.Module, *, attention: bool = True) -> tuple[str, ...]:
    """Make a float32 CPU model's passes batch-invariant (in place): for a row and position, the
    logits and hidden states are bitwise the same whatever the number of tokens in the pass, the
    number and content of the other rows, and the hole columns of the KV cache.

    Every float32 ``nn.Linear`` (the output head included) runs the ``panel`` kernel
    (:mod:`.panel`) for every row count, from a copy of its weight packed in column panels: each
    output sums ``x[k] * W[n, k]`` over k in order, whatever the rows. Attention runs the
    ``attend`` kernel (:mod:`.attend`): each query's keys are taken one at a time in column order,
    holes skipped. The rest of a Llama layer is row-wise already (RMSNorm reduces each row on its
    own, activations and rotary embeddings are elementwise), which the tests check bit for bit.
    Returns the kernels installed (``"fast_lm_head"``, ``"fast_small_linears"``,
    ``"invariant_attention"``). Raises :class:`InvariantKernelsUnavailable`, the model unchanged,
    where the compiled kernels cannot be built or the model is not float32 or uses another
    attention. Costs one more copy of the linear weights in memory (the panels).
    """
    panel = load_panel()
    if panel is None or (attention and load_attend() is None):
        raise InvariantKernelsUnavailable("batch-invariant kernels need verispec's compiled CPU kernels (a C++ "
                                          "compiler and ninja, x86-64, VERISPEC_NO_EXTENSIONS unset)")
    linears = [m for m in model.modules() if _eligible(m)]
    if any(m.weight.dtype != torch.float32 for m in linears):
        raise InvariantKernelsUnavailable("batch-invariant kernels run float32 models only")
    impl = getattr(getattr(model, "config", None), "_attn_implementation", None)
    if attention and (impl not in ("sdpa", "eager", _GQA_ATTENTION, _INVARIANT_ATTENTION)
                      or not hasattr(model, "set_attn_implementation")):
        raise InvariantKernelsUnavailable(f"batch-invariant attention replaces 'sdpa' or 'eager' attention, not {impl!r}")
    get_head = getattr(model, "get_output_embeddings", None)
    head_mod = get_head() if callable(get_head) else None
    for mod in linears:
        call = _panel_call(mod, panel)
        mod.kernel_rows = (PANEL,) * (HEAD_MAX_ROWS if mod is head_mod else MAX_ROWS)
        mod.kernel_beyond = PANEL
        mod.kernel_calls = (call,) * len(mod.kernel_rows)
        mod.kernel_beyond_call = call
        mod.forward = types.MethodType(_planned_forward, mod)  # type: ignore[method-assign]
    done = []
    if any(m is head_mod for m in linears):
        done.append("fast_lm_head")
    if any(m is not head_mod for m in linears):
        done.append("fast_small_linears")
    if attention:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

        AttentionInterface.register(_INVARIANT_ATTENTION, invariant_attention)
        AttentionMaskInterface.register(_INVARIANT_ATTENTION, sdpa_mask)
        model.set_attn_implementation(_INVARIANT_ATTENTION)
        done.append("invariant_attention")
    model._verispec_kernels = {"choice": "invariant"}
    return tuple(done)


def invariant_linear(weight: torch.Tensor, bias: torch.Tensor | None = None) -> Callable[[torch.Tensor], torch.Tensor]:
    """``x [M, in] -> x @ W.T + b [M, out]`` by the batch-invariant panel kernel (:mod:`.panel`),
    for float32 CPU weights (a drafter's steps under ``kernel_choice="invariant"``). Raises
    :class:`InvariantKernelsUnavailable` where the kernel cannot be built or the weight is not
    float32 on the CPU."""
    panel = load_panel()
    if panel is None or weight.dtype != torch.float32 or weight.device.type != "cpu":
        raise InvariantKernelsUnavailable("the batch-invariant linear needs the compiled panel kernel and a "
                                          "float32 CPU weight")
    packed = panel.pack(weight)
    n = weight.shape[0]
    b = None if bias is None else bias.detach()

    def linear(x: torch.Tensor) -> torch.Tensor:
        return panel.linear(x, packed, n, b)
    return linear


def _panel_call(mod: nn.Linear, panel: PanelKernel) -> Callable[[torch.Tensor], torch.Tensor]:
    """``x [..., in] -> [..., out]`` by the panel kernel on a packed copy of ``mod``'s weight
    (``F.linear`` where autograd would need a gradient: the kernel has no backward)."""
    packed = panel.pack(mod.weight)
    mod.panel_weight = packed
    w, n, b = mod.weight, mod.out_features, mod.bias

    def call(x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() and (w.requires_grad or x.requires_grad):
            return nn.functional.linear(x, w, b)
        out = panel.linear(x.reshape(-1, x.shape[-1]), packed, n, b)
        return out.reshape(*x.shape[:-1], n)
    return call


# ----------------------------------------------------------------------------------------------
# attention without K/V copies

_GQA_ATTENTION = "verispec_sdpa"


def _sdpa_gqa_forward(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                      is_causal: bool | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """HF's SDPA attention, except a masked multi-token pass on the CPU: there HF copies K and V
    once per query group (``repeat_kv``: [B, 3, 3, S, 64] per layer for SmolLM2) because its
    GPU kernels need that; torch's CPU kernel shares the KV heads itself (``enable_gqa``).
    query ``[B, Hq, T, D]``, key/value ``[B, Hkv, S, D]`` -> ``[B, T, Hq, D]``."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if (attention_mask is None or getattr(module, "num_key_value_groups", 1) == 1 or query.device.type != "cpu"
            or query.shape[2] == 1 or dropout or kwargs.get("position_bias") is not None
            or kwargs.get("softcap") is not None or kwargs.get("output_attentions")):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    out = nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, scale=scaling,
                                                     enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None


def gqa_attention(model: nn.Module) -> bool:
    """Switch a CPU model that runs HF's ``"sdpa"`` attention to :func:`_sdpa_gqa_forward` (same
    masks, same kernel, bit-identical outputs). Multi-token masked passes (a verify pass) skip
    HF's K/V copies; one-token passes run HF's code unchanged. Returns whether it switched;
    other models, attention types and devices are left alone."""
    config = getattr(model, "config", None)
    if (config is None or getattr(config, "_attn_implementation", None) != "sdpa"
            or not hasattr(model, "set_attn_implementation") or next(model.parameters()).device.type != "cpu"):
        return False
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    except ImportError:  # an older transformers without the attention registries
        return False
    AttentionInterface.register(_GQA_ATTENTION, _sdpa_gqa_forward)
    AttentionMaskInterface.register(_GQA_ATTENTION, sdpa_mask)  # build masks exactly as for "sdpa"
    model.set_attn_implementation(_GQA_ATTENTION)
    return model.config._attn_implementation == _GQA_ATTENTION


# ----------------------------------------------------------------------------------------------
# fast output head


def _fast_linear_forward(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """``F.linear`` computed as ``(W @ x.T).T``, which MKL runs faster for a few rows on a CPU."""
    flat = x.reshape(-1, x.shape[-1])
    out = torch.mm(self.weight, flat.t()).t().contiguous()
    if self.bias is not None:
        out = out + self.bias
    return out.reshape(*x.shape[:-1], self.weight.shape[0])


def fast_lm_head(model: nn.Module) -> bool:
    """Swap the model's output head forward to ``(W @ x.T).T`` (in place; idempotent). Returns
    whether it swapped it now.

    Same weights and same results up to float rounding (max abs difference ~1e-6 in fp32);
    outputs stay contiguous. Heads that are not an ``nn.Linear``, or not on the CPU, are left
    alone.
    """
    get_head = getattr(model, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    if (isinstance(head, nn.Linear) and type(head).forward is nn.Linear.forward and "forward" not in vars(head)
            and head.weight.device.type == "cpu"):
        head.forward = types.MethodType(_fast_linear_forward, head)  # type: ignore[method-assign]
        return True
    return False


# ----------------------------------------------------------------------------------------------
# packed and float16 linears


def pack_weight(weight: torch.Tensor, pack_rows: int = 8) -> torch.Tensor | None:
    """A oneDNN-packed copy of a float32 CPU ``[out, in]`` weight for :func:`packed_linear`, or
    None where unsupported (another dtype or device, or a torch build without these ops)."""
    if weight.dtype != torch.float32 or weight.device.type != "cpu" or not torch.backends.mkldnn.is_available():
        return None
    try:
        return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), pack_rows)
    except (AttributeError, RuntimeError):
        return None


def packed_linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x [N, in] @ W.T (+ bias)`` -> ``[N, out]`` with W packed by :func:`pack_weight` (float32)."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


def fp16_linear(weight: torch.Tensor, bias: torch.Tensor | None = None
                ) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """``x [N, in] -> x @ W.T + b [N, out]`` (float32 in and out, float32 accumulation) with
    ``W`` stored as float16 in fbgemm's packed layout, or None where unsupported (not a float32
    CPU weight, or a torch build without fbgemm).

    Half the bytes of float32 for one rounding of the weights to float16 (~5e-4 relative).
    For drafting, where a step reads every weight for a row or two and is bound by memory
    traffic, so halving the bytes read makes the EAGLE head's step cheaper than with
    :func:`pack_weight` (measured in BENCHMARKS.md: float16 against float32 draft weights).
    torch flags these fbgemm ops deprecated (still in the pinned 2.13); the warning is silenced
    here, and a build without them gets None.
    """
    if (weight.dtype != torch.float32 or weight.device.type != "cpu"
            or bias is not None and bias.dtype != torch.float32):
        return None
    if "fbgemm" not in torch.backends.quantized.supported_engines or not hasattr(torch, "fbgemm_linear_fp16_weight"):
        return None
    b = torch.zeros(weight.shape[0]) if bias is None else bias.detach().contiguous()
    try:
        with warnings.catch_warnings():  # torch warns once per process that the ops are deprecated
            warnings.simplefilter("ignore", UserWarning)
            packed = torch.fbgemm_pack_gemm_matrix_fp16(weight.detach().contiguous())
            torch.fbgemm_linear_fp16_weight(torch.zeros(1, weight.shape[1]), packed, b)
    except (AttributeError, RuntimeError):
        return None

    def linear(x: torch.Tensor) -> torch.Tensor:
        return torch.fbgemm_linear_fp16_weight(x, packed, b)
    return linear


def int8_linear(weight: torch.Tensor, bias: torch.Tensor | None = None
                ) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """``x [N, in] -> x @ W.T + b [N, out]`` (float32 in and out) with ``W`` stored as int8, one
    float scale per output row (symmetric, ``W ~ scale * round(W / scale)``), and the input
    rounded to bfloat16 for torch's weight-only int8 CPU kernel; None where unsupported (not a
    float32 CPU weight, or a torch build without ``_weight_int8pack_mm``).

    A quarter of the bytes of float32, for drafting only: a draft step reads every weight for
    a row or two, bound by memory traffic. The rounding (~4e-3 relative) changes which tokens a
    draft proposes, never the output distribution (the verifier sees the q it sampled from).
    """
    if (weight.dtype != torch.float32 or weight.device.type != "cpu" or weight.shape[1] % 32
            or bias is not None and bias.dtype != torch.float32) or not hasattr(torch, "_weight_int8pack_mm"):
        return None  # (the kernel reads the input in blocks: other widths crash it or give garbage)
    w = weight.detach()
    scale = (w.abs().amax(1) / 127).clamp_min(torch.finfo(torch.float32).tiny)  # [out]
    q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8).contiguous()  # [out, in]
    scale = scale.to(torch.bfloat16)
    b = None if bias is None else bias.detach().contiguous()
    probe = torch.linspace(-1, 1, w.shape[1])[None].to(torch.bfloat16)  # [1, in]
    try:
        got = torch._weight_int8pack_mm(probe, q, scale).to(torch.float32)
    except (AttributeError, RuntimeError, NotImplementedError):
        return None
    want = probe.to(torch.float32) @ (q.to(torch.float32) * scale.to(torch.float32)[:, None]).T
    if not torch.allclose(got, want, rtol=2e-2, atol=2e-2 * float(want.abs().max())):  # a kernel that misreads
        return None

    def linear(x: torch.Tensor) -> torch.Tensor:
        y = torch._weight_int8pack_mm(x.to(torch.bfloat16), q, scale).to(torch.float32)
        return y if b is None else y + b
    return linear


def _small_linear_forward(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """The layer's own forward, except ``min_rows..max_rows`` float32 rows go through the
    oneDNN-packed weight."""
    rows = x.numel() // x.shape[-1]
    if not self.min_rows <= rows <= self.max_rows or x.dtype != torch.float32 or self.weight.dtype != torch.float32:
        return self.unpacked_forward(x)
    out = packed_linear(x.reshape(rows, x.shape[-1]), self.packed_weight, self.bias)
    return out.reshape(*x.shape[:-1], out.shape[-1])


def fast_small_linears(model: nn.Module, max_rows: int = 16, pack_rows: int = 8, head_max_rows: int = 32) -> int:
    """Give each ``nn.Linear`` a oneDNN-packed copy of its weight, used for inputs of
    2..``max_rows`` rows, and for the output head 1..``head_max_rows`` rows (in place; returns
    how many layers were changed).

    Why: on a CPU a decode step is bound by reading the weights, so a K+1-token verify pass
    should cost about one token's step. ``F.linear`` (MKL GEMM, nothing reused between calls)
    makes a few-row pass cost clearly more than a one-row step; with the weight packed once for
    oneDNN it comes close (BENCHMARKS.md). One row keeps ``F.linear`` in the decoder layers (as
    fast there). The output head (49152 x 576 for SmolLM2) is packed for one row too, where the
    packed matmul beats the unpacked one (``python -m verispec.bench.pass_costs``).
    Only float32 CPU weights, and only where this torch build has the oneDNN ops; results
    equal ``F.linear`` to float32 rounding (max abs difference ~1e-4 on layer outputs).
    Costs one more copy of the weights in memory.
    """
    if not torch.backends.mkldnn.is_available():
        return 0
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    changed = 0
    for mod in model.modules():
        own_forward = mod.__dict__.get("forward")  # fast_lm_head's swap on the head is fine
        if (not isinstance(mod, nn.Linear) or type(mod).forward is not nn.Linear.forward
                or (own_forward is not None and getattr(own_forward, "__func__", None) is not _fast_linear_forward)
                or mod.weight.dtype != torch.float32 or mod.weight.device.type != "cpu"):
            continue
        packed = pack_weight(mod.weight, pack_rows)
        if packed is None:  # a torch build without these oneDNN ops
            return changed
        mod.packed_weight = packed
        mod.min_rows, mod.max_rows = (1, head_max_rows) if mod is head else (2, max_rows)
        mod.unpacked_forward = mod.forward
        mod.forward = types.MethodType(_small_linear_forward, mod)  # type: ignore[method-assign]
        changed += 1
    return changed


# ----------------------------------------------------------------------------------------------
# choosing linear kernels by measurement

MEASURE_ROWS = (1, 2, 3, 4, 5, 6, 8, 9, 12, 16)  # row counts timed; the others up to 16 are interpolated
MAX_ROWS = 16  # a linear given more rows (a prefill) runs F.linear, or the head its faster unpacked path
HEAD_MAX_ROWS = 32  # the output head: 17..32 rows take the choice measured at 16 rows
PACKED, PLAIN, MM_T = "packed", "plain", "mm_t"  # packed_linear, F.linear, (W @ x.T).T
ROWDOT = "rowdot"  # the compiled few-row kernel of :mod:`.rowdot` (float32, where it builds)
PANEL = "panel"  # the batch-invariant kernel of :mod:`.panel` (only with kernel_choice "invariant")
_REPEATS = 3  # timed calls per (shape, kernel, rows) after a warm-up; the median is kept
_LONG_CALL_S = 2e-3  # calls this long keep their warm-up sample and may be pruned
_PRUNE = 1.5  # a long call this many times slower than its fastest rival is timed only once
_FILE_FORMAT = 2  # 2: every module of a shape timed (1 timed up to 4, which stayed in cache)


def kernels_file() -> Path:
    """Where measured kernel choices are kept: ``$VERISPEC_KERNELS``, else ``cpu-kernels.json`` in
    verispec's cache directory. Delete it to measure again."""
    env = os.environ.get("VERISPEC_KERNELS")
    return Path(env).expanduser() if env else cache_dir() / "cpu-kernels.json"


def _read_kernels() -> dict:
    """The stored entries (key -> entry); {} when there is no file or it cannot be read."""
    data = read_json(kernels_file())
    if not isinstance(data, dict) or data.get("format") != _FILE_FORMAT or not isinstance(data.get("entries"), dict):
        return {}
    return data["entries"]


def _write_kernels(entries: dict) -> None:
    """Add ``entries`` to the kernels file, atomically."""
    write_json(kernels_file(), {"format": _FILE_FORMAT, "entries": {**_read_kernels(), **entries}})


def _time_calls(calls: dict[Hashable, Callable[[], object]], repeats: int = _REPEATS,
                rivals: Callable[[Hashable], Hashable] | None = None,
                before: Callable[[], object] | None = None) -> dict[Hashable, float]:
    """Median wall time in seconds of each call, over rounds in which every call runs once in
    turn (every other round reversed), so that drift and cache state hit all alike.

    Round 0 is a warm-up (oneDNN builds a primitive per shape on first use); its sample is
    dropped unless the call took over :data:`_LONG_CALL_S`, where that setup is negligible.
    Then ``repeats`` rounds; with ``rivals`` (call -> what it competes with) a call that took
    over :data:`_LONG_CALL_S` and :data:`_PRUNE` times its fastest rival's time in round 0 is
    not run again (it cannot win; its round-0 time stands). ``before``, if given, runs untimed
    before every call (e.g. :func:`cache_evictor`, to time calls as they run after a target pass)."""
    keys = list(calls)
    first: dict[Hashable, float] = {}
    with torch.inference_mode():
        for k in keys:
            if before is not None:
                before()
            t0 = time.perf_counter()
            calls[k]()
            first[k] = time.perf_counter() - t0
        best: dict[Hashable, float] = {}
        if rivals is not None:
            for k in keys:
                best[rivals(k)] = min(best.get(rivals(k), math.inf), first[k])
        samples = {k: [first[k]] if first[k] > _LONG_CALL_S else [] for k in keys}
        live = [k for k in keys if rivals is None or first[k] <= _LONG_CALL_S or first[k] <= _PRUNE * best[rivals(k)]]
        for r in range(repeats):
            for k in (live if r % 2 == 0 else live[::-1]):
                if before is not None:
                    before()
                t0 = time.perf_counter()
                calls[k]()
                samples[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) if v else first[k] for k, v in samples.items()}


def measured_choice(key: str, names: tuple[str, ...],
                    make_calls: Callable[[], dict[str, Callable[[], object]]],
                    before: Callable[[], object] | None = None) -> tuple[str, dict]:
    """The fastest of the alternatives ``names`` (computing the same thing) on this machine:
    read from :func:`kernels_file` under ``key`` (plus the machine), else timed now (the calls
    ``make_calls()`` returns, one per name, built only then) and stored. Ties go to the first
    name. ``before`` runs untimed before each timed call (see :func:`_time_calls`). Returns
    ``(name, info)``, info holding ``"us"`` (median microseconds per alternative) and
    ``"cached"`` (whether it was read, not timed)."""
    full = f"{machine_key()} | {key}"
    entry = _read_kernels().get(full)
    if isinstance(entry, dict) and entry.get("pick") in names and isinstance(entry.get("us"), dict):
        return entry["pick"], {"us": entry["us"], "cached": True}
    calls = make_calls()
    times = _time_calls({name: calls[name] for name in names}, before=before)
    us = {name: round(times[name] * 1e6, 1) for name in names}
    pick = min(names, key=lambda name: times[name])
    _write_kernels({full: {"pick": pick, "us": us}})
    return pick, {"us": us, "cached": False}


MATMUL_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def faster_matmul_dtype(rows: int = 64, width: int = 576, inner: int = 1536) -> torch.dtype:
    """``torch.float32`` or ``torch.bfloat16``: whichever multiplies an MLP's matrices
    (``[rows, width] @ [width, inner]`` and back; by default SmolLM2-135M's, 64 rows) faster on
    this machine, timed once and then read from :func:`kernels_file`. bfloat16 has been several
    times faster on a Xeon with AMX tiles and on an AMD EPYC with avx512_bf16, and slower on a Xeon
    with avx512_bf16 but no AMX (all under one model name "Intel(R) Xeon(R) Processor" or "AMD
    EPYC"), so precision for speed is a measurement, not an assumption."""
    def make_calls() -> dict:
        g = torch.Generator().manual_seed(0)
        calls = {}
        for name, dtype in MATMUL_DTYPES.items():
            x = torch.randn(rows, width, generator=g).to(dtype)
            w1 = torch.randn(inner, width, generator=g).to(dtype)
            w2 = torch.randn(width, inner, generator=g).to(dtype)
            calls[name] = lambda x=x, w1=w1, w2=w2: nn.functional.linear(nn.functional.linear(x, w1), w2)
        return calls
    pick, _ = measured_choice(f"matmul dtype {rows}x{width}x{inner}", tuple(MATMUL_DTYPES), make_calls)
    return MATMUL_DTYPES[pick]


def matmul_dtype(name: str) -> torch.dtype:
    """``"float32"`` / ``"bfloat16"`` as a torch dtype; ``"auto"``: :func:`faster_matmul_dtype`."""
    if name == "auto":
        return faster_matmul_dtype()
    if name not in MATMUL_DTYPES:
        raise ValueError(f"precision must be one of {(*MATMUL_DTYPES, 'auto')}, got {name!r}")
    return MATMUL_DTYPES[name]


def cache_evictor(nbytes: int = EVICT_BYTES) -> Callable[[], None]:
    """A call that writes ``nbytes`` of memory, pushing what the CPU cached before out of its
    caches, as a target pass (~540 MB of weights for SmolLM2-135M) does between draft steps:
    timed back to back, a draft model's ~20 MB of weights would stay in a large L3 and look
    several times cheaper than in decoding. The buffer is made on the first call and lives as
    long as the returned call."""
    buf: list[torch.Tensor] = []

    def evict() -> None:
        if not buf:
            buf.append(torch.empty(nbytes // 4, dtype=torch.float32))
        buf[0].fill_(1.0)
    return evict


def _eligible(mod: nn.Module) -> bool:
    """A plain ``nn.Linear`` with a floating CPU weight and no forward of its own yet."""
    return (isinstance(mod, nn.Linear) and type(mod).forward is nn.Linear.forward and "forward" not in vars(mod)
            and mod.weight.device.type == "cpu" and mod.weight.dtype.is_floating_point)


def _shape_key(mod: nn.Linear, is_head: bool, methods: tuple[str, ...]) -> str:
    """``"linear 576x1536 float32 [plain,packed]"``: in x out features, bias, dtype, candidates
    (rowdot with its source's digest, :data:`ROWDOT_VERSION`)."""
    kind = "head" if is_head else "linear"
    bias = " bias" if mod.bias is not None else ""
    dtype = str(mod.weight.dtype).removeprefix("torch.")
    names = [f"{m} {ROWDOT_VERSION}" if m == ROWDOT else m for m in methods]
    return f"{kind} {mod.in_features}x{mod.out_features}{bias} {dtype} [{','.join(names)}]"


def _plan_from_times(times: dict[str, dict[int, float]], methods: tuple[str, ...], is_head: bool) -> dict:
    """Per row count 1..16 (the head: 1..32) the kernel with the least time, interpolating
    linearly between the measured row counts (:data:`MEASURE_ROWS`) and keeping the choice at
    16 rows for 17..32; ties go to the earlier method (``plain`` first). ``beyond``: what runs
    more rows, ``plain`` for a decoder linear, for the head the faster of ``plain`` and ``mm_t`` at 16
    rows (``packed`` and ``rowdot`` are timed for few rows only)."""
    def at(method: str, n: int) -> float:
        t = times[method]
        if n in t:
            return t[n]
        lo = max(r for r in t if r < n)
        hi = min(r for r in t if r > n)
        return t[lo] + (t[hi] - t[lo]) * (n - lo) / (hi - lo)

    rows = [min(methods, key=lambda m: at(m, n)) for n in range(1, MAX_ROWS + 1)]
    beyond = PLAIN
    if is_head:
        rows += [rows[-1]] * (HEAD_MAX_ROWS - MAX_ROWS)
        beyond = min((m for m in methods if m not in (PACKED, ROWDOT)), key=lambda m: at(m, MAX_ROWS))
    us = {m: {str(n): round(times[m][n] * 1e6, 1) for n in sorted(times[m])} for m in methods}
    return {"rows": rows, "beyond": beyond, "us": us}


def _valid_plan(entry: object, methods: tuple[str, ...], is_head: bool) -> bool:
    return (isinstance(entry, dict) and isinstance(entry.get("rows"), list)
            and len(entry["rows"]) == (HEAD_MAX_ROWS if is_head else MAX_ROWS)
            and all(m in methods for m in entry["rows"]) and entry.get("beyond") in methods)


def _planned_forward(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """The layer's linear by the kernel its plan names for this many rows (``kernel_rows[rows-1]``,
    else ``kernel_beyond``), through the calls :func:`_kernel_calls` bound at install: this runs
    ~200 times per target pass, so it does no attribute lookups of its own."""
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    calls = self.kernel_calls
    return (calls[rows - 1] if 0 < rows <= len(calls) else self.kernel_beyond_call)(x)


def _kernel_calls(mod: nn.Linear, rowdot_fn: Callable[..., torch.Tensor] | None,
                  packed_weight: torch.Tensor | None = None) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """``x [..., in] -> [..., out]`` per kernel name for ``mod`` (what is timed and what is
    installed): the packed kernel (on ``packed_weight``) and rowdot only for float32 inputs and
    weights (rowdot not where autograd would need its gradient: it has no backward), else
    ``F.linear``. They hold the module's Parameter objects, so in-place changes (``.to(dtype)``,
    loading a state dict) are seen."""
    w, b = mod.weight, mod.bias
    f32 = torch.float32
    linear = nn.functional.linear

    def plain(x: torch.Tensor) -> torch.Tensor:
        return linear(x, w, b)

    def packed(x: torch.Tensor) -> torch.Tensor:
        if x.dtype is not f32 or w.dtype is not f32:
            return linear(x, w, b)
        out = packed_linear(x.reshape(-1, x.shape[-1]), packed_weight, b)
        return out.reshape(*x.shape[:-1], out.shape[-1])

    def rowdot(x: torch.Tensor) -> torch.Tensor:
        if x.dtype is not f32 or w.dtype is not f32 or (w.requires_grad and torch.is_grad_enabled()):
            return linear(x, w, b)
        out = rowdot_fn(x.reshape(-1, x.shape[-1]), w, b)
        return out.reshape(*x.shape[:-1], out.shape[-1])

    def mm_t(x: torch.Tensor) -> torch.Tensor:
        return _fast_linear_forward(mod, x)
    return {PLAIN: plain, PACKED: packed, ROWDOT: rowdot, MM_T: mm_t}


def measured_linears(model: nn.Module, *, head: bool = True, linears: bool = True) -> tuple[str, ...]:
    """Give each ``nn.Linear`` of a CPU model, per row count, the kernel that is fastest on this
    machine for its shape (in place; idempotent). Returns which of ``"fast_lm_head"`` and
    ``"fast_small_linears"`` it installed anywhere.

    Candidates: ``plain`` (``F.linear``) always; with ``linears``, ``packed`` (a oneDNN-packed
    float32 weight, :func:`pack_weight`); for the output head with ``head``, ``mm_t``
    (``(W @ x.T).T``, :func:`fast_lm_head`); for float32 weights (decoder linears with
    ``linears``, the head with ``head`` or ``linears``), ``rowdot`` (the compiled kernel of
    :mod:`.rowdot`, where it builds: :func:`load_rowdot`). The modules are grouped by
    (in_features, out_features, bias, dtype); for each group not in :func:`kernels_file` for this
    machine, all of its modules are timed in turn with each candidate on inputs of
    ``[n, in_features]`` for n in :data:`MEASURE_ROWS` (all groups in turn, so that between two
    reads of a weight the model's other weights pass through the caches, as in a forward pass;
    median of 3), and the choice is stored. (Timing only a few modules per shape kept them in a
    large L3: on a 480 MB-L3 Xeon that chose MKL for one row, 5% slower in real passes.) Decoder linears run ``F.linear`` for
    more than 16 rows; the head keeps its 16-row choice up to 32 rows and beyond its faster of
    ``plain`` and ``mm_t``. A module whose plan is ``plain`` throughout is left untouched. Every
    kernel computes the same linear (to float32 rounding). What was picked: :func:`kernel_report`.
    """
    t0 = time.perf_counter()
    get_head = getattr(model, "get_output_embeddings", None)
    head_mod = get_head() if callable(get_head) else None
    can_pack = linears and torch.backends.mkldnn.is_available()
    rowdot_fn: Callable[..., torch.Tensor] | None = None
    if any(_eligible(m) and m.weight.dtype == torch.float32 and (linears or head and m is head_mod)
           for m in model.modules()):  # built (or loaded) only for a model that could use it
        rowdot_fn = load_rowdot()
    groups: dict[str, list[nn.Linear]] = {}
    group_methods: dict[str, tuple[str, ...]] = {}
    for mod in model.modules():
        if not _eligible(mod):
            continue
        is_head = mod is head_mod
        f32 = mod.weight.dtype == torch.float32
        methods = (PLAIN,) + ((PACKED,) if can_pack and f32 else ()) + ((MM_T,) if is_head and head else ()) \
            + ((ROWDOT,) if rowdot_fn is not None and f32 and (linears or is_head and head) else ())
        if len(methods) == 1:
            continue
        key = _shape_key(mod, is_head, methods)
        groups.setdefault(key, []).append(mod)
        group_methods[key] = methods
    if not groups:  # nothing to choose for (or chosen already: the report of that choice stays)
        return ()
    machine = machine_key()
    stored = _read_kernels()
    plans = {key: stored[f"{machine} | {key}"] for key in groups
             if _valid_plan(stored.get(f"{machine} | {key}"), group_methods[key], key.startswith("head"))}
    todo = [key for key in groups if key not in plans]
    packed: dict[int, torch.Tensor] = {}
    timing_s = 0.0
    for key in todo:  # pack the modules to be timed; a build whose ops fail drops the packed candidate
        if PACKED in group_methods[key]:
            for mod in groups[key]:
                p = pack_weight(mod.weight)
                if p is None:
                    group_methods[key] = tuple(m for m in group_methods[key] if m != PACKED)
                    break
                packed[id(mod)] = p
    todo = [key for key in todo if len(group_methods[key]) > 1]
    if todo:
        gen = torch.Generator().manual_seed(0)
        calls: dict[Hashable, Callable[[], object]] = {}
        for n in MEASURE_ROWS:  # interleaved: each group's call comes between the other groups' calls
            for method in (PLAIN, PACKED, MM_T, ROWDOT):
                for key in todo:
                    if method not in group_methods[key]:
                        continue
                    mods = groups[key]
                    x = torch.randn(n, mods[0].in_features, generator=gen).to(mods[0].weight.dtype)
                    fns = [_kernel_calls(mod, rowdot_fn, packed.get(id(mod)))[method] for mod in mods]

                    def sweep(fns: list = fns, x: torch.Tensor = x) -> None:
                        for f in fns:
                            f(x)
                    calls[(key, method, n)] = sweep
        t1 = time.perf_counter()
        times = _time_calls(calls, rivals=lambda k: (k[0], k[2]))  # rivals: other kernels, same shape and rows
        timing_s = time.perf_counter() - t1
        new = {}
        for key in todo:
            per = {m: {n: times[(key, m, n)] / len(groups[key]) for n in MEASURE_ROWS}
                   for m in group_methods[key]}
            plans[key] = _plan_from_times(per, group_methods[key], key.startswith("head"))
            new[f"{machine} | {key}"] = plans[key]
        _write_kernels(new)
    done: set[str] = set()
    for key, mods in groups.items():
        plan = plans[key]
        uses = set(plan["rows"]) | {plan["beyond"]}
        if uses == {PLAIN}:
            continue
        for mod in mods:
            if PACKED in uses:
                p = packed.get(id(mod))
                mod.packed_weight = p if p is not None else pack_weight(mod.weight)
                if mod.packed_weight is None:  # (not expected: the timed modules packed)
                    del mod.packed_weight
                    uses = uses - {PACKED}
                    plan = {**plan, "rows": [PLAIN if m == PACKED else m for m in plan["rows"]]}
            mod.kernel_rows = tuple(plan["rows"])
            mod.kernel_beyond = plan["beyond"]
            calls = _kernel_calls(mod, rowdot_fn, getattr(mod, "packed_weight", None))
            mod.kernel_calls = tuple(calls[k] for k in mod.kernel_rows)
            mod.kernel_beyond_call = calls[mod.kernel_beyond]
            mod.forward = types.MethodType(_planned_forward, mod)  # type: ignore[method-assign]
        is_head = key.startswith("head")
        done |= {"fast_small_linears"} if PACKED in uses or ROWDOT in uses and not is_head else set()
        done |= {"fast_lm_head"} if MM_T in uses or ROWDOT in uses and is_head else set()
    model._verispec_kernels = {"choice": "measured", "machine": machine, "measured": todo,
                               "seconds": round(time.perf_counter() - t0, 3), "timing_seconds": round(timing_s, 3)}
    return tuple(k for k in KERNELS if k in done)


def _rows_of(kinds: tuple[str, ...] | list[str], kind: str) -> list[int]:
    return [n for n, k in enumerate(kinds, start=1) if k == kind]


def kernel_report(model: object) -> dict:
    """What CPU kernels a model (an ``nn.Module``, a ``CausalLM`` or a bound EAGLE draft model)
    runs, for printing (``verispec bench``) or checking.

    Keys: ``choice`` (``"measured"``, ``"fixed"``, or None where no CPU kernel was chosen);
    ``machine`` (CPU model | torch | threads the choice holds for, measured only); ``measured`` (the
    shape keys timed at this load, [] when all came from :func:`kernels_file`), ``seconds`` (wall
    time of the measured choice at load, packing the weights included) and ``timing_seconds`` (the
    part spent timing kernels, 0 when read from the file); ``linears``: per decoder shape
    ``"<in>x<out>"``, ``{"modules": count, "packed_rows": [row counts 1..16 that use the packed
    kernel], "rowdot_rows": [those that use rowdot]}``; ``head``: ``{"shape", "rows": {kernel: [row
    counts 1..32]}, "beyond": kernel for more rows}`` or None; and for an EAGLE draft model
    ``eagle``: ``{"weights": "fp32", "fp16" or "int8", "choice", "us": median microseconds of a one-row
    draft step's linears per weight type (measured only), "cached"}``.
    """
    module = model if isinstance(model, nn.Module) else getattr(model, "model", None)
    if not isinstance(module, nn.Module):
        raise TypeError(f"kernel_report needs a model, got {type(model).__name__}")
    meta = dict(getattr(module, "_verispec_kernels", None) or {})
    get_head = getattr(module, "get_output_embeddings", None)
    head_mod = get_head() if callable(get_head) else None
    report: dict = {"choice": meta.get("choice"), "machine": meta.get("machine"),
                    "measured": meta.get("measured", []), "seconds": meta.get("seconds"),
                    "timing_seconds": meta.get("timing_seconds"),
                    "linears": {}, "head": None}
    for mod in module.modules():
        if not isinstance(mod, nn.Linear):
            continue
        shape = f"{mod.in_features}x{mod.out_features}"
        if hasattr(mod, "kernel_rows"):  # measured
            kinds = list(mod.kernel_rows)
            beyond = mod.kernel_beyond
        elif hasattr(mod, "packed_weight"):  # fast_small_linears (fixed)
            own = getattr(mod.unpacked_forward, "__func__", None)
            unpacked = MM_T if own is _fast_linear_forward else PLAIN
            kinds = [PACKED if mod.min_rows <= n <= mod.max_rows else unpacked
                     for n in range(1, (HEAD_MAX_ROWS if mod is head_mod else MAX_ROWS) + 1)]
            beyond = unpacked
            report["choice"] = report["choice"] or "fixed"
        elif getattr(vars(mod).get("forward"), "__func__", None) is _fast_linear_forward:  # fast_lm_head alone
            kinds, beyond = [MM_T] * (HEAD_MAX_ROWS if mod is head_mod else MAX_ROWS), MM_T
            report["choice"] = report["choice"] or "fixed"
        else:
            kinds, beyond = [PLAIN] * (HEAD_MAX_ROWS if mod is head_mod else MAX_ROWS), PLAIN
        if mod is head_mod:
            report["head"] = {"shape": shape, "rows": {k: _rows_of(kinds, k) for k in (PACKED, ROWDOT, PANEL, MM_T, PLAIN)
                                                       if k in kinds}, "beyond": beyond}
        else:
            entry = report["linears"].setdefault(shape, {"modules": 0, "packed_rows": _rows_of(kinds, PACKED),
                                                         "rowdot_rows": _rows_of(kinds, ROWDOT)})
            if PANEL in kinds:
                entry["panel_rows"] = _rows_of(kinds, PANEL)
            entry["modules"] += 1
            if entry["packed_rows"] != _rows_of(kinds, PACKED) or entry["rowdot_rows"] != _rows_of(kinds, ROWDOT):
                entry["mixed"] = True  # modules of one shape with different plans (e.g. bias or not)
    if "eagle" in meta:
        report["eagle"] = meta["eagle"]
    return report
