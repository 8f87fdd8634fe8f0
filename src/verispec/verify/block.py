"""Block verification of a chain (Sun, Mendlovic, Leviathan, Aharoni, Beirami, Ro, Suresh; ICLR 2025).

Token-by-token verification stops at the first draft it rejects. Block verification looks at the
prefixes of the draft jointly and keeps the longest prefix it can afford, which is never fewer
tokens in expectation (the paper proves it optimal among verifiers that read the same
conditionals). For one row, drafts X_1..X_n drawn from Q_1..Q_n, target laws P_1..P_{n+1} (all
read as p / sum(p), q / sum(q), as the chain verifier reads them); in this module's slots,
X_i = ``d[:, i-1]``, P_i = ``p[:, i-1]``, Q_i = ``q[:, i-1]``:

* weights: w_0 = 1, w_i = min(1, w_{i-1} P_i(X_i) / Q_i(X_i)) (:func:`_block_weights`);
* stop probabilities: for i < n, Z_i = sum_x max(0, w_i P_{i+1}(x) - Q_{i+1}(x)) and
  h_i = Z_i / (Z_i + 1 - w_i), with h_i = 0 where Z_i + 1 - w_i = 0 (w_i = 1 and P_{i+1} = Q_{i+1}:
  stopping there would have to draw from a residual with no mass); h_0 = 1; h_n = w_n;
* tau = the largest i in 0..n with eta_i < h_i (eta_i uniform; tau = 0 if none);
* emit X_1..X_tau, then a bonus token from P_{n+1} if tau = n, else a token from the residual
  max(0, w_tau P_{tau+1} - Q_{tau+1}) normalised (P_{tau+1} itself where it has no mass, which
  happens with probability 0 for exact rows, as in the chain).

The emitted law is the target's (the certificate, :mod:`verispec.certify.trees`, checks it by
enumeration). At temperature 0 it is no better than token by token (greedy rows take the greedy
path anyway); with point-mass drafts (q = one-hot) it is exact but worse than token by token, so
the engine should use it only with a real q.

Draws: eta_i = uniform(seed, position of slot 0, STREAM_BLOCK + i), and the emitted token's
inverse-CDF uniform is uniform(seed, position of slot tau, STREAM_EMIT). Unlike the chain's accept
uniforms, every eta_i is read whatever tau comes out (tau is the largest i that passes, so each
eta_j with j > tau was seen to fail), so the eta's are keyed by the pass's *first* position: the
next pass starts later and never meets them again. (For the same reason the drafter's draws at
positions past tau influenced this pass's outcome; a drafter keyed by absolute position would
reuse them in the next pass: docs/design.md section 9.)
"""

from __future__ import annotations

import torch

from ..rng import STREAM_BLOCK, STREAM_EMIT, Draws, inverse_cdf

__all__ = ["block_rule"]


def block_rule(
    p: torch.Tensor,  # [B, K+1, V]
    q: torch.Tensor | None,  # [B, K, V] or None (point masses)
    d: torch.Tensor,  # [B, K] (0 at undrafted slots)
    num_draft: torch.Tensor,  # [B]
    seeds: torch.Tensor,  # [B]
    positions: torch.Tensor,  # [B] absolute position of slot 0
    draws: Draws,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(tau [B], x [B])``: the number of drafts kept and the token emitted after them."""
    B, K1, V = p.shape
    K = K1 - 1
    rows = torch.arange(B, device=p.device)
    slots = torch.arange(K + 1, device=p.device)
    P = _normalised(p[:, :K].double())  # [B, K, V] P_1..P_K
    Q = (torch.zeros_like(P).scatter_(-1, d[..., None], 1.0) if q is None
         else _normalised(q.double()))  # [B, K, V] Q_1..Q_K
    ratio = P.gather(-1, d[..., None]).squeeze(-1) / Q.gather(-1, d[..., None]).squeeze(-1)  # [B, K]
    w = _block_weights(ratio)  # [B, K+1] w_0..w_K
    # Z_i for i = 0..K-1 from P_{i+1} = P[:, i] and Q_{i+1} = Q[:, i]
    Z = (w[:, :K, None] * P - Q).clamp_min_(0).sum(-1)  # [B, K]
    denom = Z + 1 - w[:, :K]
    h = torch.where(denom > 0, Z / torch.where(denom > 0, denom, 1.0), 0.0)  # [B, K] h_0..h_{K-1}
    h = torch.cat([h, torch.zeros_like(h[:, :1])], 1)  # [B, K+1]
    h[:, 0] = 1.0
    h[rows, num_draft] = w[rows, num_draft]  # h_n = w_n (n = 0: w_0 = 1)
    eta = _block_uniforms(draws, seeds, positions, K)  # [B, K+1]; eta_0 unused (h_0 = 1)
    passes = (slots <= num_draft[:, None]) & ((eta < h) | (slots == 0))  # [B, K+1]
    tau = (passes * slots).amax(-1)  # [B] the largest i that passes
    # The emitted token: bonus from P_{n+1} (tau = n), else the residual max(0, w_tau P_{tau+1} - Q_{tau+1}).
    bonus = tau == num_draft
    law = _normalised(p[rows, tau].double())  # [B, V] P_{tau+1} (the bonus slot when tau = n)
    if K > 0:
        stop = (~bonus).nonzero().squeeze(1)
        t = tau[stop]
        residual = (w[stop, t, None] * law[stop] - Q[stop, t.clamp(max=K - 1)]).clamp_min_(0)
        empty = residual.sum(-1) <= 0
        law[stop] = torch.where(empty[:, None], law[stop], residual)
    x = inverse_cdf(law, draws.uniform(seeds, positions + tau, STREAM_EMIT))
    return tau, x


def _normalised(x: torch.Tensor) -> torch.Tensor:
    """Rows ``x [..., V]`` divided by their sums (rows without mass stay as they are)."""
    s = x.sum(-1, keepdim=True)
    return x / torch.where(s > 0, s, 1.0)


def _block_weights(ratio: torch.Tensor) -> torch.Tensor:
    """``[B, K+1]`` w_0 = 1, w_i = min(1, w_{i-1} P_i(X_i) / Q_i(X_i)) from ``ratio [B, K]`` (slot i-1
    holds P_i(X_i) / Q_i(X_i))."""
    B, K = ratio.shape
    w = torch.ones(B, K + 1, dtype=torch.float64, device=ratio.device)
    for i in range(1, K + 1):
        w[:, i] = (w[:, i - 1] * ratio[:, i - 1]).clamp_max(1.0)
    return w


def _block_uniforms(draws: Draws, seeds: torch.Tensor, positions: torch.Tensor, K: int) -> torch.Tensor:
    """``[B, K+1]`` eta_0..eta_K: uniform(seed, position of slot 0, STREAM_BLOCK + i)."""
    B = seeds.shape[0]
    if K == 0:
        return torch.full((B, 1), 0.5, dtype=torch.float64, device=seeds.device)
    eta = [draws.uniform(seeds, positions, STREAM_BLOCK + i) for i in range(1, K + 1)]  # K x [B]
    return torch.stack([torch.full_like(eta[0], 0.5)] + eta, 1)
