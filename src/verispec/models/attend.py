"""``attend``: batch-invariant attention on the CPU, a compiled kernel and its plain reference.

Why: a speculative verify pass runs K+1 queries per row where target-only decoding runs one, and
a row shares its passes with other rows whose KV caches hold holes (left padding, rolled-back
drafts) at other columns. torch's attention kernels split the keys into blocks and the queries
into tiles whose sizes depend on those shapes, so the same query over the same keys can come out
different in the last bits of a float: enough to flip a near-tie between two tokens, so greedy
speculative text could differ from target-only text. Here every output is computed from its own
row's data in a fixed order:

    score_s = (q . k_s) * scale  (+ the additive mask)          for every key s the query sees
    m       = max_s score_s
    out     = sum_s exp(score_s - m) v_s / sum_s exp(score_s - m)

with each dot product summed in vector lanes over the head dimension and then a fixed pairwise
sum of the lanes, and both sums over the keys taken one key at a time in column order, skipping
masked keys. A hole column only ever adds nothing, so the result does not depend on where the
row's keys sit in the cache, how many queries the pass has, or what the other rows hold. The
kernel is compiled with ``-ffp-contract=off`` so that no multiply-add is fused in one place and
not in another.

Layout as HF's attention functions: query ``[B, Hq, T, D]``, key/value ``[B, Hkv, L, D]``
(``Hq`` a multiple of ``Hkv``: grouped-query attention shares each KV head among ``Hq / Hkv``
query heads), an optional mask ``[B or 1, 1 or Hq, T, L]`` (bool: True = may attend; float:
added to the score, entries at or below ``-FLT_MAX / 2`` or ``-inf`` mask the key) -> output
``[B, T, Hq, D]``. Without a mask and with ``causal``, query t sees keys ``0 .. L - T + t``. A
query that sees no key gets zeros. float32 only; other dtypes are computed in float32 and cast
back by :func:`invariant_attention`.

Built on first use like :mod:`.rowdot` (:mod:`.extension`); :func:`load_attend` returns None
(warning once why) where it cannot be built.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .extension import LANES_SOURCE, LazyKernel, build_extension

__all__ = ["ATTEND_SOURCE", "load_attend", "attend_reference", "invariant_attention"]

ATTEND_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <optional>
#include <vector>

#include <immintrin.h>

#if defined(__AVX512F__)
#define VW 16  // floats per vector
#else
#define VW 8
#endif
#define QB 4   // queries of one head computed together (they share the loads of keys and values)
#define KB 4   // keys whose dot products are computed side by side (each in its own accumulator)

""" + LANES_SOURCE + r"""
typedef int vi __attribute__((vector_size(VW * 4)));

static inline vf load(const float* p) { vf v; std::memcpy(&v, p, sizeof v); return v; }

// a * b + c with one rounding, written out (the kernel is built with -ffp-contract=off, so no
// other multiply-add is fused behind our back).
static inline vf fma(vf a, vf b, vf c) {
#if VW == 16
  return (vf)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
#elif defined(__FMA__)
  return (vf)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
#else
  return a * b + c;
#endif
}

// exp(x) for x <= 0 in every lane (Cephes' expf: x = n ln2 + r, a degree-6 polynomial in r,
// times 2^n); 0 below -87. The same operations for every element, wherever it sits.
static inline vf vexp(vf x) {
  const vf lo = (vf){} + -87.0f;
  const vi under = x < lo;
  x = under ? lo : x;
  const vf magic = (vf){} + 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const vf t = x * 1.44269504088896341f + magic;
  const vf n = t - magic;
  const vi ni = (vi)t - (vi)magic;
  vf r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  vf p = (vf){} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const vf scale = (vf)((ni + 127) << 23);
  const vf res = p * scale;
  return under ? (vf){} : res;
}

torch::Tensor attend(torch::Tensor q, torch::Tensor k, torch::Tensor v, std::optional<torch::Tensor> mask,
                     double scale, bool causal) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "attend: q [B, Hq, T, D], k and v [B, Hkv, L, D]");
  TORCH_CHECK(q.scalar_type() == at::kFloat && k.scalar_type() == at::kFloat && v.scalar_type() == at::kFloat,
              "attend: float32 only");
  TORCH_CHECK(q.device().is_cpu() && k.device().is_cpu() && v.device().is_cpu(), "attend: CPU tensors only");
  const int64_t B = q.size(0), Hq = q.size(1), T = q.size(2), D = q.size(3);
  const int64_t Hkv = k.size(1), L = k.size(2);
  TORCH_CHECK(k.size(0) == B && v.size(0) == B && v.size(1) == Hkv && v.size(2) == L && k.size(3) == D
              && v.size(3) == D && Hkv > 0 && Hq % Hkv == 0, "attend: shapes do not match");
  if (q.stride(3) != 1) q = q.contiguous();
  if (k.stride(3) != 1) k = k.contiguous();
  if (v.stride(3) != 1) v = v.contiguous();
  const float* mf = nullptr;
  const bool* mb = nullptr;
  int64_t ms0 = 0, ms1 = 0, ms2 = 0, ms3 = 0;
  torch::Tensor m;
  if (mask.has_value() && mask->defined()) {
    m = *mask;
    TORCH_CHECK(m.dim() == 4 && (m.size(0) == B || m.size(0) == 1) && (m.size(1) == Hq || m.size(1) == 1)
                && m.size(2) == T && m.size(3) == L, "attend: mask [B or 1, Hq or 1, T, L]");
    TORCH_CHECK(m.scalar_type() == at::kFloat || m.scalar_type() == at::kBool, "attend: float32 or bool mask");
    ms0 = m.size(0) == 1 ? 0 : m.stride(0);
    ms1 = m.size(1) == 1 ? 0 : m.stride(1);
    ms2 = m.stride(2);
    ms3 = m.stride(3);
    if (m.scalar_type() == at::kFloat) mf = m.data_ptr<float>(); else mb = m.data_ptr<bool>();
  }
  auto out = torch::empty({B, T, Hq, D}, q.options());
  const float* qp = q.data_ptr<float>();
  const float* kp = k.data_ptr<float>();
  const float* vp = v.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t G = Hq / Hkv, DV = D / VW;
  const int64_t ks2 = k.stride(2), vs2 = v.stride(2);
  const float fscale = (float)scale;
  const float masked = -FLT_MAX / 2;
  const bool has_mask = mf != nullptr || mb != nullptr;
  at::parallel_for(0, B * Hq, 1, [&](int64_t i0, int64_t i1) {
    const int64_t cap = (L + VW - 1) / VW * VW;
    std::vector<int64_t> col(L);       // the keys some query of the group sees, in column order
    std::vector<float> sc(QB * cap);   // per query: its scores on those keys, then its weights
    std::vector<float> add(QB * L);    // per query: the additive mask on them
    std::vector<char> live(QB * L);    // per query: whether it sees them
    std::vector<vf> acc(QB * (DV > 0 ? DV : 1));
    for (int64_t item = i0; item < i1; ++item) {
      const int64_t b = item / Hq, h = item % Hq, hk = h / G;
      const float* kb = kp + b * k.stride(0) + hk * k.stride(1);
      const float* vb = vp + b * v.stride(0) + hk * v.stride(1);
      for (int64_t t0 = 0; t0 < T; t0 += QB) {
        const int nq = (int)std::min<int64_t>(QB, T - t0);
        const float* qt[QB];
        int64_t end[QB];
        int64_t end_max = 0;
        for (int j = 0; j < nq; ++j) {
          qt[j] = qp + b * q.stride(0) + h * q.stride(1) + (t0 + j) * q.stride(2);
          end[j] = (!has_mask && causal) ? std::min(L, L - T + t0 + j + 1) : L;
          end_max = std::max(end_max, end[j]);
        }
        // the keys each query sees: without a mask the first end[j] columns; with one, its entries
        int64_t n = end_max;
        int64_t seen[QB] = {0};
        if (!has_mask) {
          for (int j = 0; j < nq; ++j) seen[j] = end[j];
        } else {
          n = 0;
          for (int64_t s = 0; s < end_max; ++s) {
            bool any = false;
            for (int j = 0; j < nq; ++j) {
              const int64_t at = b * ms0 + h * ms1 + (t0 + j) * ms2 + s * ms3;
              float m = 0.f;
              bool ok;
              if (mb) ok = mb[at];
              else { m = mf[at]; ok = !(m <= masked); }
              live[j * L + n] = ok;
              add[j * L + n] = m;
              seen[j] += ok;
              any = any || ok;
            }
            if (any) col[n++] = s;
          }
        }
        // scores: (q . k) * scale + mask, a block of nq queries x KB keys at a time; each pair's dot
        // product is fused multiply-adds over the lanes of d in order, then hsum, then D's tail
        for (int64_t i = 0; i < n; i += KB) {
          const int nk = (int)std::min<int64_t>(KB, n - i);
          const float* ks[KB];
          for (int j = 0; j < nk; ++j) ks[j] = kb + (has_mask ? col[i + j] : i + j) * ks2;
          vf a[QB][KB];
          for (int jq = 0; jq < QB; ++jq)
            for (int j = 0; j < KB; ++j) a[jq][j] = (vf){};
          for (int64_t c = 0; c < DV; ++c) {
            vf kv[KB];
            for (int j = 0; j < nk; ++j) kv[j] = load(ks[j] + c * VW);
            for (int jq = 0; jq < nq; ++jq) {
              const vf qv = load(qt[jq] + c * VW);
              for (int j = 0; j < nk; ++j) a[jq][j] = fma(qv, kv[j], a[jq][j]);
            }
          }
          for (int jq = 0; jq < nq; ++jq)
            for (int j = 0; j < nk; ++j) {
              float x = hsum(a[jq][j]);
              for (int64_t d = DV * VW; d < D; ++d) x = std::fma(qt[jq][d], ks[j][d], x);
              sc[jq * cap + i + j] = has_mask ? x * fscale + add[jq * L + i + j] : x * fscale;
            }
        }
        // weights exp(score - max) over the query's own keys (0 on the others), VW at a time
        const int64_t padded = (n + VW - 1) / VW * VW;
        for (int jq = 0; jq < nq; ++jq) {
          float* e = &sc[jq * cap];
          if (has_mask) {
            const char* ok = &live[jq * L];
            for (int64_t i = 0; i < n; ++i) e[i] = ok[i] ? e[i] : -INFINITY;
          } else {
            for (int64_t i = end[jq]; i < n; ++i) e[i] = -INFINITY;
          }
          for (int64_t i = n; i < padded; ++i) e[i] = -INFINITY;
          vf mv = (vf){} + -INFINITY;
          for (int64_t i = 0; i < n; i += VW) { const vf x = load(e + i); mv = x > mv ? x : mv; }
          float mx = -INFINITY;
          for (int l = 0; l < VW; ++l) mx = mv[l] > mx ? mv[l] : mx;
          for (int64_t i = 0; i < n; i += VW) {
            const vf w = vexp(load(e + i) - mx);
            std::memcpy(e + i, &w, sizeof w);
          }
        }
        // the weighted sum of the values and the sum of the weights, one key at a time in column
        // order (a key the query does not see adds an exact 0)
        for (int64_t c = 0; c < QB * DV; ++c) acc[c] = (vf){};
        float sum[QB] = {0}, tail[QB][VW] = {{0}};
        for (int64_t i = 0; i < n; ++i) {
          const float* vs = vb + (has_mask ? col[i] : i) * vs2;
          for (int64_t c = 0; c < DV; ++c) {
            const vf vv = load(vs + c * VW);
            for (int jq = 0; jq < nq; ++jq) acc[jq * DV + c] = fma((vf){} + sc[jq * cap + i], vv, acc[jq * DV + c]);
          }
          for (int jq = 0; jq < nq; ++jq) {
            const float e = sc[jq * cap + i];
            sum[jq] = sum[jq] + e;
            for (int64_t d = DV * VW; d < D; ++d) tail[jq][d - DV * VW] = std::fma(e, vs[d], tail[jq][d - DV * VW]);
          }
        }
        for (int jq = 0; jq < nq; ++jq) {
          float* o = op + ((b * T + t0 + jq) * Hq + h) * D;
          if (seen[jq] == 0) { for (int64_t d = 0; d < D; ++d) o[d] = 0.f; continue; }
          const vf sv = (vf){} + sum[jq];
          for (int64_t c = 0; c < DV; ++c) { const vf r = acc[jq * DV + c] / sv; std::memcpy(o + c * VW, &r, sizeof r); }
          for (int64_t d = DV * VW; d < D; ++d) o[d] = tail[jq][d - DV * VW] / sum[jq];
        }
      }
    }
  });
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("attend", &attend, "batch-invariant attention: q [B,Hq,T,D], k/v [B,Hkv,L,D] -> [B,T,Hq,D]",
        py::arg("q"), py::arg("k"), py::arg("v"), py::arg("mask") = py::none(), py::arg("scale") = 1.0,
        py::arg("causal") = false);
}
"""


_MASKED = -torch.finfo(torch.float32).max / 2  # an additive mask entry at or below this masks the key


def attend_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
                     scale: float = 1.0, causal: bool = False) -> torch.Tensor:
    """The plain torch computation the kernel must match (in float64, so to float32 rounding):
    the same arguments and output ``[B, T, Hq, D]`` as the kernel (see the module docstring)."""
    B, Hq, T, D = q.shape
    L = k.shape[2]
    G = Hq // k.shape[1]
    kk = k.double().repeat_interleave(G, dim=1)  # [B, Hq, L, D]
    vv = v.double().repeat_interleave(G, dim=1)
    scores = q.double() @ kk.transpose(-1, -2) * scale  # [B, Hq, T, L]
    if mask is None:
        allowed = torch.ones(T, L, dtype=torch.bool)
        if causal:
            allowed = torch.arange(L)[None, :] <= (L - T + torch.arange(T))[:, None]
        allowed = allowed.expand(B, Hq, T, L)
    elif mask.dtype == torch.bool:
        allowed = mask.expand(B, Hq, T, L)
    else:
        allowed = (mask > _MASKED).expand(B, Hq, T, L)
        scores = scores + torch.where(allowed, mask.double(), 0.0)
    scores = scores.masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # a query that sees nothing: zeros
    return (weights @ vv).transpose(1, 2).to(q.dtype).contiguous()  # [B, T, Hq, D]


def _build() -> Callable[..., torch.Tensor]:
    fn = build_extension("verispec_attend", ATTEND_SOURCE, cflags=("-ffp-contract=off",)).attend
    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(2, 6, 3, 72, generator=g), torch.randn(2, 2, 9, 72, generator=g), torch.randn(2, 2, 9, 72, generator=g)
    if not torch.allclose(fn(q, k, v, None, 0.1, True), attend_reference(q, k, v, None, 0.1, True), atol=1e-5, rtol=1e-4):
        raise RuntimeError("the built kernel disagrees with its reference")
    return fn


_KERNEL: LazyKernel = LazyKernel("the batch-invariant attention kernel", lambda: _build())


def load_attend() -> Callable[..., torch.Tensor] | None:
    """The compiled kernel ``attend(q, k, v, mask=None, scale=1.0, causal=False)``, or None where
    it is unavailable (no compiler or ninja, not x86-64, ``$VERISPEC_NO_EXTENSIONS=1``); a failed
    build warns once with the reason."""
    return _KERNEL.get()


def invariant_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                        attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                        is_causal: bool | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """An HF attention function (``AttentionInterface``) computed by the :func:`load_attend`
    kernel: query ``[B, Hq, T, D]``, key/value ``[B, Hkv, L, D]`` -> ``([B, T, Hq, D], None)``.
    Causal like HF's SDPA path when no mask is given and ``T > 1``. Features it does not
    compute (dropout, soft-capping, sliding windows, attention sinks, returned weights) raise."""
    fn = load_attend()
    if fn is None:
        raise RuntimeError(f"batch-invariant attention needs its compiled kernel ({_KERNEL.failed or 'VERISPEC_NO_EXTENSIONS'})")
    unsupported = [name for name in ("softcap", "sliding_window", "s_aux", "position_bias") if kwargs.get(name) is not None]
    if dropout or unsupported or kwargs.get("output_attentions"):
        raise NotImplementedError(f"batch-invariant attention does not compute {unsupported or 'dropout'}")
    T = query.shape[2]
    causal = attention_mask is None and T > 1 and (is_causal if is_causal is not None else getattr(module, "is_causal", True))
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    f32 = torch.float32
    mask = attention_mask
    if mask is not None and mask.dtype not in (f32, torch.bool):
        mask = mask.to(f32)  # (-inf and finfo.min of a lower precision stay below the masking bound)
    out = fn(query.to(f32), key.to(f32), value.to(f32), mask, float(scale), bool(causal))
    return out.to(query.dtype), None
