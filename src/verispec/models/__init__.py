"""Models: loading causal LMs (HF directories, GGUF files, built-in names) and their CPU kernels.

* ``loading``: :func:`load_causal_lm`, the single entry point, and :class:`CausalLM`;
* ``hf``: HF model directories, tokenizers and vocab maps (safetensors only), ``ModelLoadError``;
* ``gguf``: GGUF files, dequantised;
* ``builtin``: the built-in models (``BUILTIN_MODELS``) and their atomic cache;
* ``paths``: where verispec's cache lies (``cache_dir``), what a measurement holds for
  (``cpu_name``, ``machine_key``), and atomic JSON cache files (``read_json``, ``write_json``);
* ``lean``: Llama decoder layers without HF's per-call wrappers (:func:`lean_layers`);
* ``mixed``: a bfloat16 body with a float32 output head for bulk data generation (:func:`float32_head`);
* ``kernels``: the CPU kernels (packed and float16 linears, the fast output head, GQA attention),
  :func:`apply_cpu_kernels`, which installs them only on CPU models (choosing the linear kernels
  by timing them on the machine, cached in :func:`kernels_file`), and :func:`kernel_report`.

Every name other modules use is importable from ``verispec.models`` itself.
"""

from __future__ import annotations

from .builtin import _CACHE_MARKER, BUILTIN_MODELS, DRAFT_DIR, _smollm2_gguf
from .hf import VOCAB_MAP_FILE, ModelLoadError, _quiet
from .kernels import (
    KERNEL_CHOICES,
    KERNELS,
    fast_linear_forward,
    apply_cpu_kernels,
    fast_lm_head,
    faster_matmul_dtype,
    matmul_dtype,
    fast_small_linears,
    fp16_linear,
    int8_linear,
    gqa_attention,
    kernel_choice,
    kernel_report,
    kernels_file,
    measured_choice,
    measured_linears,
    model_device,
    pack_weight,
    packed_linear,
)
from .lean import lean_layers
from .mixed import Float32Head, float32_head
from .loading import CausalLM, _slice_head, load_causal_lm
from .paths import cache_dir, cpu_matrix_units, cpu_name, machine_key, read_json, write_json

# Private names above are the ones other modules and tests use today (distill: _quiet; tests:
# _slice_head, _smollm2_gguf, _CACHE_MARKER). Monkeypatch a loader's
# globals in the submodule that defines them (e.g. ``verispec.models.builtin``), not here.

__all__ = [
    "cpu_matrix_units",
    "cpu_name",
    "faster_matmul_dtype",
    "matmul_dtype",
    "machine_key",
    "read_json",
    "write_json",
    "BUILTIN_MODELS",
    "CausalLM",
    "ModelLoadError",
    "cache_dir",
    "fast_small_linears",
    "gqa_attention",
    "lean_layers",
    "Float32Head",
    "float32_head",
    "pack_weight",
    "packed_linear",
    "fp16_linear",
    "int8_linear",
    "fast_lm_head",
    "load_causal_lm",
    "KERNELS",
    "apply_cpu_kernels",
    "model_device",
    "KERNEL_CHOICES",
    "kernel_choice",
    "kernel_report",
    "kernels_file",
    "measured_choice",
    "measured_linears",
]
