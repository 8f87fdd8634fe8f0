"""A linear's plan: which kernel runs it for each row count, installed as its forward.

A planned ``nn.Linear`` holds ``kernel_rows`` (the kernel's name per row count 1..16, the head
1..32), ``kernel_beyond`` (for more rows) and the bound calls of each; :func:`planned_forward` picks
one per call. The batch-invariant choice plans the ``panel`` kernel everywhere
(:mod:`.invariant`), the measured one the fastest per row count (:mod:`.measured`).
"""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping

import torch
from torch import nn

__all__ = [
    "KERNELS",
    "MAX_ROWS",
    "HEAD_MAX_ROWS",
    "PACKED",
    "PLAIN",
    "MM_T",
    "ROWDOT",
    "PANEL",
    "eligible",
    "planned_forward",
    "set_plan",
]


KERNELS = ("fast_lm_head", "fast_small_linears", "gqa_attention", "invariant_attention", "lean_layers")  # in order
MAX_ROWS = 16  # a linear given more rows (a prefill) runs F.linear, or the head its faster unpacked path
HEAD_MAX_ROWS = 32  # the output head: 17..32 rows take the choice measured at 16 rows
PACKED, PLAIN, MM_T = "packed", "plain", "mm_t"  # packed_linear, F.linear, (W @ x.T).T
ROWDOT = "rowdot"  # the compiled few-row kernel of :mod:`..rowdot` (float32, where it builds)
PANEL = "panel"  # the batch-invariant kernel of :mod:`..panel` (only with kernel_choice "invariant")


def eligible(mod: nn.Module) -> bool:
    """A plain ``nn.Linear`` with a floating CPU weight and no forward of its own yet."""
    return (isinstance(mod, nn.Linear) and type(mod).forward is nn.Linear.forward and "forward" not in vars(mod)
            and mod.weight.device.type == "cpu" and mod.weight.dtype.is_floating_point)


def planned_forward(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """The layer's linear by the kernel its plan names for this many rows (``kernel_rows[rows-1]``,
    else ``kernel_beyond``), through the calls :func:`kernel_calls` bound at install: this runs
    ~200 times per target pass, so it does no attribute lookups of its own."""
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    calls = self.kernel_calls
    return (calls[rows - 1] if 0 < rows <= len(calls) else self.kernel_beyond_call)(x)


def set_plan(mod: nn.Linear, rows: tuple[str, ...], beyond: str,
             calls: Mapping[str, Callable[[torch.Tensor], torch.Tensor]]) -> None:
    """Make ``mod`` run, for n rows, the kernel ``rows[n - 1]`` (``beyond`` for more rows), each
    by its call in ``calls`` (kernel name -> ``x -> linear(x)``), through :func:`planned_forward`."""
    mod.kernel_rows = tuple(rows)
    mod.kernel_beyond = beyond
    mod.kernel_calls = tuple(calls[k] for k in mod.kernel_rows)
    mod.kernel_beyond_call = calls[beyond]
    mod.forward = types.MethodType(planned_forward, mod)  # type: ignore[method-assign]
