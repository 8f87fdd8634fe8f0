"""``panel``: a compiled batch-invariant CPU linear, ``y [M, N] = x [M, K] @ W [N, K].T (+ b)``,
with W packed once into column panels.

Why: the batch-invariant target pass (:func:`~.kernels.invariant_kernels`) runs one kernel for
every row count, from a one-token decode step to a prefill, so that kernel must be as fast as
the fastest one at each count. :mod:`.rowdot` sums each output as a dot product (vector lanes over
K, then a sum of the lanes), which costs a horizontal sum per output and falls behind oneDNN's
packed kernel from ~6 rows on. This kernel is shaped like oneDNN's instead: W is stored as panels
of ``NP`` output columns, ``P [ceil(N / NP), K, NP]``, and each output column is one lane of a
vector accumulator that takes ``x[m, k] * W[n, k]`` for k = 0, 1, ..., K - 1 in order (fused
multiply-adds written out; the build uses ``-ffp-contract=off`` so nothing else is fused), then
adds the bias. That order depends on nothing but K, so row ``i`` of an ``M``-row call equals the
one-row call on that row bit for bit, whatever M, the other rows, or how rows are chunked.

Blocking: ``MR`` rows of x at a time against one panel (``MR * NV`` accumulators, ``NV`` vectors
of ``VW`` floats per panel: 10 x 3 x 16 with AVX-512, 2 x 4 x 8 with AVX2), panels spread over
torch's intra-op threads; a panel (``K * NP`` floats) stays in L2 while every chunk of rows passes.
A chunk of two or more rows prefetches the weights 16 steps of k ahead, so that memory overlaps its
arithmetic. Neither the blocking nor the prefetch moves any arithmetic, so no bit of any output
changes with them; they are chosen by what a pass costs (BENCHMARKS.md, "Batch-invariant passes":
on a Xeon with AMX, 6 x 4 x 16 without the prefetch made an 8-token pass of SmolLM2-135M 1.63x a
one-token pass, 10 x 3 x 16 with it 1.24x: up to 10 rows in one chunk, and 48-column panels
that divide the decoder's widths, so both threads get as many).

Built on first use like :mod:`.rowdot` (:mod:`.extension`); :func:`load_panel` returns None
(warning once why) where it cannot be built. Float32 only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .extension import LazyKernel, build_extension

__all__ = ["PANEL_SOURCE", "PanelKernel", "load_panel"]

PANEL_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <algorithm>
#include <cstring>
#include <optional>

#if defined(__AVX512F__)
#define VW 16  // floats per vector
#define MR 10  // rows of x per chunk: MR * NV = 30 accumulators, 2 of the 32 registers left for operands
#define NV 3   // vectors per panel: 48 columns, a divisor of the decoder's 192, 576 and 1536
#else
#define VW 8
#define MR 2   // 16 registers
#define NV 4
#endif
#define NP (NV * VW)   // output columns per panel
#define AHEAD 16       // steps of k ahead whose weights are prefetched (3 KB with AVX-512)

typedef float vf __attribute__((vector_size(VW * 4)));

static inline vf load(const float* p) { vf v; std::memcpy(&v, p, sizeof v); return v; }

static inline vf fma(vf a, vf b, vf c) {
#if VW == 16
  return (vf)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
#elif defined(__FMA__)
  return (vf)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
#else
  return a * b + c;
#endif
}

int64_t panel_width() { return NP; }

// W [N, K] -> P [ceil(N / NP), K, NP]: panel p, row k holds W[p * NP + c, k] in lane c (0 past N).
torch::Tensor pack(torch::Tensor w) {
  TORCH_CHECK(w.dim() == 2 && w.scalar_type() == at::kFloat && w.device().is_cpu(), "panel.pack: float32 CPU w [N, K]");
  w = w.contiguous();
  const int64_t N = w.size(0), K = w.size(1), np = (N + NP - 1) / NP;
  auto p = torch::zeros({np, K, NP}, w.options());
  const float* wp = w.data_ptr<float>();
  float* pp = p.data_ptr<float>();
  at::parallel_for(0, np, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t pi = p0; pi < p1; ++pi)
      for (int64_t c = 0; c < NP && pi * NP + c < N; ++c)
        for (int64_t k = 0; k < K; ++k) pp[(pi * K + k) * NP + c] = wp[(pi * NP + c) * K + k];
  });
  return p;
}

// y[r, n0 .. n0 + nc) for R rows of x against one panel: every output sums k = 0 .. K-1 in order.
// With R >= 2 the weights AHEAD steps of k on are prefetched (past the panel's end: the next
// panel's, which lies right after it, up to ``end``). Without it the loads of a few-row chunk
// queue behind its multiply-adds and memory and arithmetic add up (a Xeon with AMX, 6-row chunks:
// the decoder's linears on 8 rows cost 1.8x one row, 1.3x with the prefetch); a one-row chunk
// streams fast enough by itself. The prefetch changes no arithmetic, so no bit of any output.
template <int R>
static void chunk(const float* x, int64_t ldx, int64_t K, const float* panel, int64_t n0, int64_t nc,
                  const float* b, float* y, int64_t N, const float* end) {
  vf acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NV; ++j) acc[r][j] = (vf){};
  const int64_t k_end = (end - panel) / NP;  // steps of k from this panel to ``end``
  for (int64_t k = 0; k < K; ++k) {
    vf wv[NV];
    const bool ahead = R >= 2 && k + AHEAD < k_end;
    for (int j = 0; j < NV; ++j) {
      wv[j] = load(panel + k * NP + j * VW);
      if (ahead) __builtin_prefetch(panel + (k + AHEAD) * NP + j * VW, 0, 2);
    }
    for (int r = 0; r < R; ++r) {
      const vf xb = (vf){} + x[r * ldx + k];
      for (int j = 0; j < NV; ++j) acc[r][j] = fma(xb, wv[j], acc[r][j]);
    }
  }
  for (int r = 0; r < R; ++r) {
    float out[NP];
    std::memcpy(out, acc[r], sizeof out);
    for (int64_t c = 0; c < nc; ++c) y[r * N + n0 + c] = b ? out[c] + b[n0 + c] : out[c];
  }
}

template <int R>
static inline void rest(int64_t left, const float* x, int64_t ldx, int64_t K, const float* panel, int64_t n0,
                        int64_t nc, const float* b, float* y, int64_t N, const float* end) {
  if constexpr (R > 0) {
    if (left == R) chunk<R>(x, ldx, K, panel, n0, nc, b, y, N, end);
    else rest<R - 1>(left, x, ldx, K, panel, n0, nc, b, y, N, end);
  }
}

torch::Tensor linear(torch::Tensor x, torch::Tensor p, int64_t N, std::optional<torch::Tensor> bias) {
  TORCH_CHECK(x.dim() == 2 && p.dim() == 3 && p.size(2) == NP && x.size(1) == p.size(1)
              && p.size(0) == (N + NP - 1) / NP, "panel.linear: x [M, K] and a packed P [ceil(N/NP), K, NP]");
  TORCH_CHECK(x.scalar_type() == at::kFloat && p.scalar_type() == at::kFloat, "panel.linear: float32 only");
  TORCH_CHECK(x.device().is_cpu() && p.device().is_cpu(), "panel.linear: CPU tensors only");
  if (x.stride(1) != 1) x = x.contiguous();
  const int64_t M = x.size(0), K = x.size(1), ldx = x.stride(0), np = p.size(0);
  torch::Tensor bc;
  const float* bp = nullptr;
  if (bias.has_value() && bias->defined()) {
    TORCH_CHECK(bias->scalar_type() == at::kFloat && bias->numel() == N, "panel.linear: float32 bias [N]");
    bc = bias->contiguous();
    bp = bc.data_ptr<float>();
  }
  auto y = torch::empty({M, N}, x.options());
  if (M == 0 || N == 0) return y;
  const float* xp = x.data_ptr<float>();
  const float* pp = p.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  at::parallel_for(0, np, 1, [&](int64_t p0, int64_t p1) {
    const float* end = pp + p1 * K * NP;  // this thread's last panel ends here
    for (int64_t pi = p0; pi < p1; ++pi) {
      const float* panel = pp + pi * K * NP;
      const int64_t n0 = pi * NP, nc = std::min<int64_t>(NP, N - n0);
      int64_t m = 0;
      for (; m + MR <= M; m += MR) chunk<MR>(xp + m * ldx, ldx, K, panel, n0, nc, bp, yp + m * N, N, end);
      rest<MR - 1>(M - m, xp + m * ldx, ldx, K, panel, n0, nc, bp, yp + m * N, N, end);
    }
  });
  return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("panel_width", &panel_width, "output columns per panel");
  m.def("pack", &pack, "W [N, K] -> panels [ceil(N / NP), K, NP]", py::arg("w"));
  m.def("linear", &linear, "y [M, N] = x [M, K] @ W.T (+ bias), W packed by pack", py::arg("x"), py::arg("p"),
        py::arg("n"), py::arg("bias") = py::none());
}
"""



@dataclass(frozen=True)
class PanelKernel:
    """The compiled kernel: ``pack(w [N, K]) -> P`` once per weight, then
    ``linear(x [M, K], P, N, bias=None) -> [M, N]`` (float32, CPU)."""

    module: object

    def pack(self, weight: torch.Tensor) -> torch.Tensor:
        return self.module.pack(weight.detach())

    def linear(self, x: torch.Tensor, packed: torch.Tensor, n: int, bias: torch.Tensor | None = None) -> torch.Tensor:
        return self.module.linear(x, packed, n, bias)


def _build() -> PanelKernel:
    kernel = PanelKernel(build_extension("verispec_panel", PANEL_SOURCE, cflags=("-ffp-contract=off",)))
    g = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(7, 37, generator=g), torch.randn(70, 37, generator=g), torch.randn(70, generator=g)
    got = kernel.linear(x, kernel.pack(w), 70, b)  # a full chunk of rows, a partial panel
    if not torch.allclose(got, torch.nn.functional.linear(x, w, b), atol=1e-4, rtol=1e-4):
        raise RuntimeError("the built kernel disagrees with F.linear")
    return kernel


_KERNEL: LazyKernel = LazyKernel("the panel CPU kernel", lambda: _build())


def load_panel() -> PanelKernel | None:
    """The compiled :class:`PanelKernel`, or None where it is unavailable (no compiler or ninja,
    not x86-64, ``$VERISPEC_NO_EXTENSIONS=1``); a failed build warns once with the reason."""
    return _KERNEL.get()
