"""A low-precision body with a float32 output head: fast bulk generation that keeps the argmax.

On a CPU with bfloat16 matrix units (AMX), a bfloat16 copy of the target runs its matrix
products several times faster than float32, which is what bulk generation of training data
needs. Its logits, however, are bfloat16 too: 8 bits of mantissa, so two top logits near 20
tie whenever they are within 0.125, and greedy decoding then takes the lower id. Computing the
head in float32 from the bfloat16 hidden states removes those ties at a small cost (the head is
one matrix of the ~210 in a pass). :func:`float32_head` swaps the output head for
:class:`Float32Head`; the rest of the model is untouched.

This is an approximation of the float32 target, never the target itself: use it for data
(distillation answers), not where outputs must equal the float32 target's.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["Float32Head", "float32_head"]


class Float32Head(nn.Module):
    """``x [..., H]`` (any float dtype) -> logits ``[..., V]`` in float32, from a float32 copy of
    a head's ``weight [V, H]`` (and ``bias [V]``)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight.detach().to(torch.float32).clone(), requires_grad=False)
        self.bias = None if bias is None else nn.Parameter(bias.detach().to(torch.float32).clone(),
                                                           requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(x.to(torch.float32), self.weight, self.bias)


def float32_head(model: nn.Module) -> bool:
    """Give ``model`` (a HF causal LM in a low-precision dtype) a :class:`Float32Head`, in place.

    Returns False, changing nothing, when the model is already float32 or float64 or has no
    linear output head. A tied head (SmolLM2 ties it to the input embedding) is untied: the
    embedding keeps its dtype, the head gets its own float32 copy."""
    get, put = getattr(model, "get_output_embeddings", None), getattr(model, "set_output_embeddings", None)
    head = get() if callable(get) else None
    weight = getattr(head, "weight", None)
    if (not callable(put) or not isinstance(weight, torch.Tensor) or weight.ndim != 2
            or weight.dtype in (torch.float32, torch.float64) or not isinstance(head, nn.Linear)):
        return False
    put(Float32Head(weight, head.bias).to(weight.device))
    if getattr(model.config, "tie_word_embeddings", False):
        model.config.tie_word_embeddings = False  # a later tie_weights() must not re-tie them
    return True
