"""CPU kernels for loaded models: packed and float16 linears, the output head, GQA attention.

On a CPU a decode step is bound by reading the weights, and the generic paths that HF and
``F.linear`` take are tuned for other shapes or other devices. The kernels here replace them, in
place and with the same weights, for the shapes speculative decoding runs (a few rows per pass).
One concern per module:

* :mod:`.install`: :func:`apply_cpu_kernels`, what loading calls: it installs the chosen kernels
  (:func:`kernel_choice`) only when the model lies on the CPU and leaves the plain HF modules on
  any other device; each kernel also checks the device of what it is given;
* :mod:`.invariant`: the batch-invariant kernels (the default): a row's logits are the same bits
  whatever the width of its pass and whatever else is in its batch (compiled ``panel`` linears
  and ``attend`` attention);
* :mod:`.measured`: linear kernels chosen per row count by timing them on this machine
  (:func:`measured_linears`), since which one is faster depends on the CPU, the torch build and
  the thread count; :mod:`.plan`: how a linear runs the kernel its plan names per row count;
* :mod:`.timing`: timing alternatives, the file that keeps the picks (:func:`kernels_file`), and
  :func:`cache_evictor`; :mod:`.precision`: the matmul dtype of bulk data runs;
* :mod:`.fixed`: the choices tuned on one AMD EPYC (``VERISPEC_KERNEL_CHOICE=fixed``), for A/B
  comparisons: :func:`fast_lm_head` and :func:`fast_small_linears`;
* :mod:`.packed`: oneDNN-packed weights; :mod:`.compact`: float16 and int8 weights (the EAGLE
  head's draft steps); :mod:`.attention`: HF's SDPA attention without its K/V copies;
* :mod:`.report`: :func:`kernel_report`, what a model got.

All of them are CPU-specific (oneDNN, fbgemm, MKL's behaviour, torch's CPU SDPA kernel).
Measured costs are in BENCHMARKS.md ("Pass costs", ``python -m verispec.bench.pass_costs``).
"""

from __future__ import annotations

from ..attend import invariant_attention
from .attention import gqa_attention
from .compact import fp16_linear, int8_linear
from .fixed import fast_linear_forward, fast_lm_head, fast_small_linears
from .install import KERNEL_CHOICES, KERNELS, apply_cpu_kernels, kernel_choice, model_device
from .invariant import InvariantKernelsUnavailable, invariant_kernels, invariant_linear
from .measured import measured_linears
from .packed import pack_weight, packed_linear
from .precision import faster_matmul_dtype, matmul_dtype
from .report import kernel_report
from .timing import cache_evictor, kernels_file, measured_choice

__all__ = [
    "KERNELS",
    "faster_matmul_dtype",
    "matmul_dtype",
    "apply_cpu_kernels",
    "model_device",
    "fast_linear_forward",
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
