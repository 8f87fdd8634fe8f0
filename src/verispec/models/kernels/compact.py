"""Linears whose weights are stored in fewer bytes: float16 (fbgemm) and int8 (one scale per row:
the compiled panel8 kernel, else torch's).

For drafting: a draft step reads every weight for a row or two and is bound by memory traffic
(the EAGLE head's draft weights, :func:`verispec.drafters.eagle_head.bind_eagle`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch

from ..panel8 import load_panel8, quantize_rows

__all__ = ["fp16_linear", "int8_linear"]


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
    float scale per output row (symmetric, ``W ~ scale * round(W / scale)``,
    :func:`~verispec.models.panel8.quantize_rows`); None where unsupported (not a float32 CPU
    weight, or neither kernel below runs here).

    The compiled :mod:`~verispec.models.panel8` kernel where it builds (float32 input and
    accumulation, a row's output the same bits in any batch, and about twice the memory
    throughput of torch's kernel: BENCHMARKS.md), else torch's weight-only int8 kernel
    ``_weight_int8pack_mm`` (the input rounded to bfloat16; widths that are multiples of 32).

    A quarter of the bytes of float32, for drafting only: a draft step reads every weight for
    a row or two, bound by memory traffic. The rounding (~4e-3 relative) changes which tokens a
    draft proposes, never the output distribution (the verifier sees the q it sampled from).
    """
    if (weight.dtype != torch.float32 or weight.device.type != "cpu"
            or bias is not None and bias.dtype != torch.float32):
        return None
    q, scale = quantize_rows(weight)  # [out, in] int8, [out]
    b = None if bias is None else bias.detach().contiguous()
    panel = load_panel8()
    if panel is not None:
        packed, n = panel.pack(q), q.shape[0]

        def panel_linear(x: torch.Tensor) -> torch.Tensor:
            return panel.linear(x, packed, scale, n, b)
        return panel_linear
    return _torch_int8_linear(q, scale, b)


def _torch_int8_linear(q: torch.Tensor, scale: torch.Tensor, b: torch.Tensor | None
                       ) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """:func:`int8_linear` through torch's ``_weight_int8pack_mm`` (bfloat16 input and scales),
    or None where this build lacks it or misreads the shape (it reads the input in blocks of 32:
    other widths crash it or give garbage)."""
    if q.shape[1] % 32 or not hasattr(torch, "_weight_int8pack_mm"):
        return None
    scale = scale.to(torch.bfloat16)
    probe = torch.linspace(-1, 1, q.shape[1])[None].to(torch.bfloat16)  # [1, in]
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
