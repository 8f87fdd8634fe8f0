"""Batch-invariant kernels (``kernel_choice="invariant"``): a row's logits are the same bits
whatever the width of its pass and whatever else is in its batch (:func:`invariant_kernels`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ..attend import invariant_attention, load_attend
from ..panel import PanelKernel, load_panel
from .attention import GQA_ATTENTION
from .plan import HEAD_MAX_ROWS, MAX_ROWS, PANEL, eligible, set_plan

__all__ = ["INVARIANT_ATTENTION", "InvariantKernelsUnavailable", "invariant_kernels", "invariant_linear"]


INVARIANT_ATTENTION = "verispec_invariant"


class InvariantKernelsUnavailable(RuntimeError):
    """The batch-invariant kernels cannot run here (no compiled kernels, or a model they do not
    cover)."""



def invariant_kernels(model: nn.Module, *, attention: bool = True) -> tuple[str, ...]:
    """Make a float32 CPU model's passes batch-invariant (in place): for a row and position, the
    logits and hidden states are bitwise the same whatever the number of tokens in the pass, the
    number and content of the other rows, and the hole columns of the KV cache.

    Every float32 ``nn.Linear`` (the output head included) runs the ``panel`` kernel
    (:mod:`..panel`) for every row count, from a copy of its weight packed in column panels: each
    output sums ``x[k] * W[n, k]`` over k in order, whatever the rows. Attention runs the
    ``attend`` kernel (:mod:`..attend`): each query's keys are taken one at a time in column order,
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
    linears = [m for m in model.modules() if eligible(m)]
    if any(m.weight.dtype != torch.float32 for m in linears):
        raise InvariantKernelsUnavailable("batch-invariant kernels run float32 models only")
    impl = getattr(getattr(model, "config", None), "_attn_implementation", None)
    if attention and (impl not in ("sdpa", "eager", GQA_ATTENTION, INVARIANT_ATTENTION)
                      or not hasattr(model, "set_attn_implementation")):
        raise InvariantKernelsUnavailable(f"batch-invariant attention replaces 'sdpa' or 'eager' attention, not {impl!r}")
    get_head = getattr(model, "get_output_embeddings", None)
    head_mod = get_head() if callable(get_head) else None
    for mod in linears:
        set_plan(mod, (PANEL,) * (HEAD_MAX_ROWS if mod is head_mod else MAX_ROWS), PANEL,
                 {PANEL: _panel_call(mod, panel)})
    done = []
    if any(m is head_mod for m in linears):
        done.append("fast_lm_head")
    if any(m is not head_mod for m in linears):
        done.append("fast_small_linears")
    if attention:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

        AttentionInterface.register(INVARIANT_ATTENTION, invariant_attention)
        AttentionMaskInterface.register(INVARIANT_ATTENTION, sdpa_mask)
        model.set_attn_implementation(INVARIANT_ATTENTION)
        done.append("invariant_attention")
    model._verispec_kernels = {"choice": "invariant"}
    return tuple(done)


def invariant_linear(weight: torch.Tensor, bias: torch.Tensor | None = None) -> Callable[[torch.Tensor], torch.Tensor]:
    """``x [M, in] -> x @ W.T + b [M, out]`` by the batch-invariant panel kernel (:mod:`..panel`),
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
