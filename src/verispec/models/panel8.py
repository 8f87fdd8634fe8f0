"""``panel8``: a compiled CPU linear over int8 weights, ``y [M, N] = (x [M, K] @ Q [N, K].T) * s [N] (+ b)``,
with ``Q`` packed once into column panels of int8 and one float32 scale ``s`` per output column.

Why: the EAGLE head's draft step reads every weight for a row or two right after a target pass
has pushed them out of the caches, so it is bound by reading memory. torch's weight-only int8
kernel (``_weight_int8pack_mm``) read the head's 11.8 MB of output rows at about 10 GB/s on the
2-vCPU AMD EPYC (1.13 ms, caches flushed), where the float32 :mod:`.panel` kernel streams 28-37 GB/s
with its prefetch; this kernel is :mod:`.panel`'s loop over int8 panels (BENCHMARKS.md, "int8
draft weights streamed like the target's").

Layout and order as in :mod:`.panel`: ``P [ceil(N / NP), K, NP]`` int8, lane ``c`` of panel ``p``
holds ``Q[p * NP + c, k]``; each output column is one lane of a float32 vector accumulator that
takes ``x[m, k] * float(Q[n, k])`` for k = 0, 1, ..., K - 1 in order (fused multiply-adds written
out, ``-ffp-contract=off``), then is multiplied by its scale and adds the bias. That order
depends on nothing but K, so row ``i`` of an ``M``-row call equals the one-row call on that row
bit for bit, whatever M or the other rows. The input stays float32 (torch's kernel rounds it to
bfloat16). Each chunk of rows prefetches the weights ``AHEAD`` steps of k ahead, one cache line a step.

Built on first use like :mod:`.panel` (:mod:`.extension`); :func:`load_panel8` returns None
(warning once why) where it cannot be built.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .extension import LazyKernel, build_extension

__all__ = ["PANEL8_SOURCE", "Panel8Kernel", "load_panel8", "quantize_rows"]

PANEL8_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <algorithm>
#include <cstring>
#include <optional>

#if defined(__AVX512F__)
#define VW 16  // floats per vector
#else
#define VW 8
#endif
#define NV (64 / VW)  // vectors per panel: 64 int8 columns, one cache line per step of k
#define NP 64
#if VW == 16
#define MR 4          // rows of x per chunk: MR * NV = 16 accumulators of the 32 registers
#else
#define MR 1          // 8 accumulators and 8 weight vectors fill AVX2's 16 registers
#endif
#define AHEAD 32      // steps of k ahead whose weights are prefetched (2 KB)

typedef float vf __attribute__((vector_size(VW * 4)));

static inline vf widen(const int8_t* p) {  // VW int8 -> VW float32, exactly
#if VW == 16
  return (vf)_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)p)));
#else
  return (vf)_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)p)));
#endif
}

static inline vf fma(vf a, vf b, vf c) {
#if VW == 16
  return (vf)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
#elif defined(__FMA__)
  return (vf)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
#else
  return a * b + c;
#endif
}

// Q [N, K] int8 -> P [ceil(N / NP), K, NP]: panel p, row k holds Q[p * NP + c, k] in lane c (0 past N).
torch::Tensor pack(torch::Tensor q) {
  TORCH_CHECK(q.dim() == 2 && q.scalar_type() == at::kChar && q.device().is_cpu(), "panel8.pack: int8 CPU q [N, K]");
  q = q.contiguous();
  const int64_t N = q.size(0), K = q.size(1), np = (N + NP - 1) / NP;
  auto p = torch::zeros({np, K, NP}, q.options());
  const int8_t* qp = q.data_ptr<int8_t>();
  int8_t* pp = p.data_ptr<int8_t>();
  at::parallel_for(0, np, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t pi = p0; pi < p1; ++pi)
      for (int64_t c = 0; c < NP && pi * NP + c < N; ++c)
        for (int64_t k = 0; k < K; ++k) pp[(pi * K + k) * NP + c] = qp[(pi * NP + c) * K + k];
  });
  return p;
}

// y[r, n0 .. n0 + nc) for R rows of x against one panel: every output sums k = 0 .. K-1 in order,
// then takes its scale and bias.
template <int R>
static void chunk(const float* x, int64_t ldx, int64_t K, const int8_t* panel, int64_t n0, int64_t nc,
                  const float* s, const float* b, float* y, int64_t N, const int8_t* end) {
  vf acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NV; ++j) acc[r][j] = (vf){};
  const int64_t k_end = (end - panel) / NP;  // steps of k from this panel to ``end``
  for (int64_t k = 0; k < K; ++k) {
    if (k + AHEAD < k_end) __builtin_prefetch(panel + (k + AHEAD) * NP, 0, 2);
    vf wv[NV];
    for (int j = 0; j < NV; ++j) wv[j] = widen(panel + k * NP + j * VW);
    for (int r = 0; r < R; ++r) {
      const vf xb = (vf){} + x[r * ldx + k];
      for (int j = 0; j < NV; ++j) acc[r][j] = fma(xb, wv[j], acc[r][j]);
    }
  }
  for (int r = 0; r < R; ++r) {
    float out[NP];
    std::memcpy(out, acc[r], sizeof out);
    for (int64_t c = 0; c < nc; ++c) {
      const float v = out[c] * s[n0 + c];
      y[r * N + n0 + c] = b ? v + b[n0 + c] : v;
    }
  }
}

template <int R>
static inline void rest(int64_t left, const float* x, int64_t ldx, int64_t K, const int8_t* panel, int64_t n0,
                        int64_t nc, const float* s, const float* b, float* y, int64_t N, const int8_t* end) {
  if constexpr (R > 0) {
    if (left == R) chunk<R>(x, ldx, K, panel, n0, nc, s, b, y, N, end);
    else rest<R - 1>(left, x, ldx, K, panel, n0, nc, s, b, y, N, end);
  }
}

torch::Tensor linear(torch::Tensor x, torch::Tensor p, torch::Tensor scale, int64_t N,
                     std::optional<torch::Tensor> bias) {
  TORCH_CHECK(x.dim() == 2 && p.dim() == 3 && p.size(2) == NP && x.size(1) == p.size(1)
              && p.size(0) == (N + NP - 1) / NP, "panel8.linear: x [M, K] and a packed P [ceil(N/NP), K, NP]");
  TORCH_CHECK(x.scalar_type() == at::kFloat && p.scalar_type() == at::kChar, "panel8.linear: float32 x, int8 P");
  TORCH_CHECK(scale.scalar_type() == at::kFloat && scale.numel() == N, "panel8.linear: float32 scale [N]");
  TORCH_CHECK(x.device().is_cpu() && p.device().is_cpu() && scale.device().is_cpu(), "panel8.linear: CPU tensors only");
  if (x.stride(1) != 1) x = x.contiguous();
  const int64_t M = x.size(0), K = x.size(1), ldx = x.stride(0), np = p.size(0);
  torch::Tensor sc = scale.contiguous(), bc;
  const float* bp = nullptr;
  if (bias.has_value() && bias->defined()) {
    TORCH_CHECK(bias->scalar_type() == at::kFloat && bias->numel() == N, "panel8.linear: float32 bias [N]");
    bc = bias->contiguous();
    bp = bc.data_ptr<float>();
  }
  auto y = torch::empty({M, N}, x.options());
  if (M == 0 || N == 0) return y;
  const float* xp = x.data_ptr<float>();
  const int8_t* pp = p.data_ptr<int8_t>();
  const float* sp = sc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  at::parallel_for(0, np, 1, [&](int64_t p0, int64_t p1) {
    const int8_t* end = pp + p1 * K * NP;  // this thread's last panel ends here
    for (int64_t pi = p0; pi < p1; ++pi) {
      const int8_t* panel = pp + pi * K * NP;
      const int64_t n0 = pi * NP, nc = std::min<int64_t>(NP, N - n0);
      int64_t m = 0;
      for (; m + MR <= M; m += MR) chunk<MR>(xp + m * ldx, ldx, K, panel, n0, nc, sp, bp, yp + m * N, N, end);
      rest<MR - 1>(M - m, xp + m * ldx, ldx, K, panel, n0, nc, sp, bp, yp + m * N, N, end);
    }
  });
  return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("pack", &pack, "Q [N, K] int8 -> panels [ceil(N / NP), K, NP]", py::arg("q"));
  m.def("linear", &linear, "y [M, N] = (x @ Q.T) * scale (+ bias), Q packed by pack", py::arg("x"), py::arg("p"),
        py::arg("scale"), py::arg("n"), py::arg("bias") = py::none());
}
"""


def quantize_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 with one scale per output row: ``weight [N, K]`` float32 ->
    ``(q [N, K] int8, scale [N] float32)``, ``weight ~ scale[:, None] * q``."""
    w = weight.detach().to(torch.float32)
    scale = (w.abs().amax(1) / 127).clamp_min(torch.finfo(torch.float32).tiny)  # [N]
    q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8).contiguous()  # [N, K]
    return q, scale


@dataclass(frozen=True)
class Panel8Kernel:
    """The compiled kernel: ``pack(q [N, K] int8) -> P`` once per weight, then
    ``linear(x [M, K], P, scale [N], N, bias=None) -> [M, N]`` (float32 in and out, CPU)."""

    module: object

    def pack(self, q: torch.Tensor) -> torch.Tensor:
        return self.module.pack(q)

    def linear(self, x: torch.Tensor, packed: torch.Tensor, scale: torch.Tensor, n: int,
               bias: torch.Tensor | None = None) -> torch.Tensor:
        return self.module.linear(x, packed, scale, n, bias)


def _build() -> Panel8Kernel:
    kernel = Panel8Kernel(build_extension("verispec_panel8", PANEL8_SOURCE, cflags=("-ffp-contract=off",)))
    g = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(7, 37, generator=g), torch.randn(70, 37, generator=g), torch.randn(70, generator=g)
    q, s = quantize_rows(w)
    got = kernel.linear(x, kernel.pack(q), s, 70, b)  # a full chunk of rows and a partial one, a partial panel
    want = torch.nn.functional.linear(x, q.to(torch.float32) * s[:, None], b)
    if not torch.allclose(got, want, atol=1e-4, rtol=1e-4):
        raise RuntimeError("the built kernel disagrees with F.linear on the dequantized weights")
    return kernel


_KERNEL: LazyKernel = LazyKernel("the int8 panel CPU kernel", lambda: _build())


def load_panel8() -> Panel8Kernel | None:
    """The compiled :class:`Panel8Kernel`, or None where it is unavailable (no compiler or ninja,
    not x86-64, ``$VERISPEC_NO_EXTENSIONS=1``); a failed build warns once with the reason."""
    return _KERNEL.get()
