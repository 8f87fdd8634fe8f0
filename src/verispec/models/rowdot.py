"""``rowdot``: a compiled CPU linear for a few rows, ``y [M, N] = x [M, K] @ W [N, K].T (+ b)``.

Why: a verify pass runs each linear on 2-16 rows and on a CPU is bound by reading the weights,
so it should cost about a one-row pass; MKL's sgemm is poorly tuned for such shapes on some CPUs
(on one Sapphire Rapids a 5-row pass of SmolLM2-135M cost 1.5x a one-row pass). This kernel reads
each weight row once per chunk of rows: blocks of ``NB`` = 4 weight rows, chunks of ``MR`` rows
of ``x`` (6 with AVX-512, else 2), ``MR * NB`` vector accumulators (GCC vector extensions, 16
floats wide with AVX-512, else 8), blocks of weight rows spread over torch's intra-op threads.
While a block computes, the weights of the block two ahead are prefetched into L2, so that
reading memory overlaps the arithmetic (without it a 5-row call cost the one-row call plus its
arithmetic; with it, ~1.1x the one-row call on a 2-core Xeon).

Batch-invariant: each output element is one dot product summed in a fixed order (vector lanes,
then a fixed pairwise sum of the lanes, then the scalar tail of ``K``, then the bias), whatever
the number of rows in the call, so row ``i`` of an ``M``-row call equals, bit for bit, the
one-row call on that row. (It differs from ``F.linear`` by float32 rounding.)

It is built on first use with torch's ``load_inline`` (a C++ compiler and ninja needed; ~20-30 s
once per machine, then loaded from verispec's cache directory). :func:`load_rowdot` returns None
(warning once why) where it cannot be built: no compiler or ninja, not x86-64, a compile error,
or ``$VERISPEC_NO_EXTENSIONS=1``. Float32 only; ``kernels.measured_linears`` times it against
torch's kernels and uses it only where it is faster.
"""

from __future__ import annotations

import hashlib
import threading
import warnings
from collections.abc import Callable

import torch

from .extension import LANES_SOURCE, build_extension, build_name, extensions_disabled

__all__ = ["ROWDOT_SOURCE", "ROWDOT_VERSION", "load_rowdot"]

ROWDOT_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <algorithm>
#include <optional>

#if defined(__AVX512F__)
#define VW 16  // floats per vector
#define MR 6   // rows of x per chunk: MR * NB accumulators + NB weight vectors + 1 fit in 32 registers
#else
#define VW 8
#define MR 2   // 16 registers
#endif
#define NB 4   // weight rows per block
#define AHEAD 2  // blocks ahead whose weights are prefetched into L2 while this block computes

""" + LANES_SOURCE + r"""
// y[r, n0 + j] for r < R, j < nb: R rows of x against nb (<= NB) weight rows from n0.
// Each output depends only on its own row of x and weight row, so R does not change it.
// ``ahead`` (or null): the NB * K weights of a later block, prefetched into L2 one cache line per
// weight row and step of k, so that they arrive during this block's arithmetic: without it, with
// 5 rows of x the loads wait behind the multiply-adds and memory and arithmetic add up
// (a 5-row pass cost ~1.5x a one-row pass instead of ~1.1x).
template <int R>
static void block(const float* x, int64_t K, const float* w, int64_t n0, int nb, const float* b,
                  float* y, int64_t N, const float* ahead) {
  vf acc[R][NB];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NB; ++j) acc[r][j] = (vf){};
  int64_t k = 0;
  for (; k + VW <= K; k += VW) {
    vf wv[NB];
    for (int j = 0; j < NB; ++j) {
      if (j < nb) __builtin_memcpy(&wv[j], w + (n0 + j) * K + k, sizeof(vf));
      else wv[j] = (vf){};
      if (ahead) __builtin_prefetch(ahead + k * NB + j * VW, 0, 2);
    }
    for (int r = 0; r < R; ++r) {
      vf xv;
      __builtin_memcpy(&xv, x + r * K + k, sizeof(vf));
      for (int j = 0; j < NB; ++j) acc[r][j] += xv * wv[j];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < nb; ++j) {
      float s = hsum(acc[r][j]);
      for (int64_t kk = k; kk < K; ++kk) s += x[r * K + kk] * w[(n0 + j) * K + kk];  // tail of K
      if (b) s += b[n0 + j];
      y[r * N + n0 + j] = s;
    }
}

template <int R>
static inline void rest(int64_t left, const float* x, int64_t K, const float* w, int64_t n0, int nb,
                        const float* b, float* y, int64_t N, const float* ahead) {
  if constexpr (R > 0) {
    if (left == R) block<R>(x, K, w, n0, nb, b, y, N, ahead);
    else rest<R - 1>(left, x, K, w, n0, nb, b, y, N, ahead);
  }
}

torch::Tensor rowdot(torch::Tensor x, torch::Tensor w, std::optional<torch::Tensor> bias) {
  TORCH_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1), "rowdot: x [M, K] and w [N, K]");
  TORCH_CHECK(x.scalar_type() == at::kFloat && w.scalar_type() == at::kFloat, "rowdot: float32 only");
  TORCH_CHECK(x.device().is_cpu() && w.device().is_cpu(), "rowdot: CPU tensors only");
  x = x.contiguous();
  w = w.contiguous();
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  torch::Tensor bc;
  const float* bp = nullptr;
  if (bias.has_value() && bias->defined()) {
    TORCH_CHECK(bias->scalar_type() == at::kFloat && bias->numel() == N, "rowdot: float32 bias [N]");
    bc = bias->contiguous();
    bp = bc.data_ptr<float>();
  }
  auto y = torch::empty({M, N}, x.options());
  if (M == 0 || N == 0) return y;
  const float* xp = x.data_ptr<float>();
  const float* wp = w.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  at::parallel_for(0, (N + NB - 1) / NB, 16, [&](int64_t b0, int64_t b1) {
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t n0 = blk * NB;
      const int nb = (int)std::min<int64_t>(NB, N - n0);
      // the first chunk of rows prefetches; later chunks find this block in cache
      const float* ahead = n0 + (AHEAD + 1) * NB <= N ? wp + (n0 + AHEAD * NB) * K : nullptr;
      int64_t m = 0;
      for (; m + MR <= M; m += MR, ahead = nullptr) block<MR>(xp + m * K, K, wp, n0, nb, bp, yp + m * N, N, ahead);
      rest<MR - 1>(M - m, xp + m * K, K, wp, n0, nb, bp, yp + m * N, N, ahead);
    }
  });
  return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("rowdot", &rowdot, "y [M, N] = x [M, K] @ w [N, K].T (+ bias [N]), float32",
        py::arg("x"), py::arg("w"), py::arg("bias") = py::none());
}
"""

_lock = threading.Lock()
_loaded: Callable[..., torch.Tensor] | None = None
_failed: str | None = None  # why it could not be built (warned once)


#: A digest of the kernel's source: measured kernel plans that offered rowdot name it, so a
#: changed kernel is timed again rather than trusted on another kernel's timings.
ROWDOT_VERSION = hashlib.sha256(ROWDOT_SOURCE.encode()).hexdigest()[:8]


def _build_name() -> str:
    """An extension name unique to the source, torch, Python and CPU: a build for another CPU is
    never loaded (it could hold instructions this one lacks)."""
    return build_name("verispec_rowdot", ROWDOT_SOURCE)


def _build() -> Callable[..., torch.Tensor]:
    fn = build_extension("verispec_rowdot", ROWDOT_SOURCE).rowdot
    x, w, b = torch.randn(7, 37), torch.randn(5, 37), torch.randn(5)  # a full chunk of rows, tails in K and N
    if not torch.allclose(fn(x, w, b), torch.nn.functional.linear(x, w, b), atol=1e-4, rtol=1e-4):
        raise RuntimeError("the built kernel disagrees with F.linear")
    return fn


def load_rowdot() -> Callable[..., torch.Tensor] | None:
    """The compiled kernel ``rowdot(x, w, bias=None)``, or None where it is unavailable.

    ``x [M, K]`` (made contiguous if it is not), ``w [N, K]``, ``bias [N]`` or None, all float32
    on the CPU -> ``y [M, N] = x @ w.T + bias``. Built once per process (and once per machine:
    the build is kept in :func:`~.extension.extension_dir`); a failure to build warns once with
    the reason and returns None ever after. ``$VERISPEC_NO_EXTENSIONS=1`` returns None (no warning).
    """
    global _loaded, _failed
    if extensions_disabled():
        return None
    if _loaded is not None or _failed is not None:
        return _loaded
    with _lock:
        if _loaded is None and _failed is None:
            try:
                _loaded = _build()
            except Exception as e:  # no compiler or ninja, a compile error, an unwritable cache, ...
                lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
                _failed = f"{type(e).__name__}: {lines[-1] if lines else ''}"
                warnings.warn(f"verispec: the rowdot CPU kernel is not available ({_failed}); "
                              "torch's linears are used instead", RuntimeWarning, stacklevel=2)
    return _loaded
