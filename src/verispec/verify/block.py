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
    # Rows are read as P = p / sum(p), Q = q / sum(q); one pass for the sums, then one per slot for Z.
    p_sum = _sums(p[:, :K])  # [B, K]
    q_sum = torch.ones_like(p_sum) if q is None else _sums(q)
    p_d = p[:, :K].gather(-1, d[..., None]).squeeze(-1).double() / p_sum  # [B, K] P_i(X_i)
    q_d = torch.ones_like(p_d) if q is None else q.gather(-1, d[..., None]).squeeze(-1).double() / q_sum
    w = _block_weights(p_d / q_d)  # [B, K+1] w_0..w_K
    # h_i = Z_i / (Z_i + 1 - w_i) for 0 < i < n, Z_i from P_{i+1} = P[:, i] and Q_{i+1} = Q[:, i]
    h = torch.zeros(B, K + 1, dtype=torch.float64, device=p.device)
    for i in range(1, K):
        r = (num_draft > i).nonzero().squeeze(1)  # rows with a slot i that is not their last
        if r.numel() == 0:
            break
        Z = _excess(p, q, d, r, i, w[r, i], p_sum[r, i], q_sum[r, i])  # [b]
        denom = Z + 1 - w[r, i]
        h[r, i] = torch.where(denom > 0, Z / torch.where(denom > 0, denom, 1.0), 0.0)
    h[:, 0] = 1.0
    h[rows, num_draft] = w[rows, num_draft]  # h_n = w_n (n = 0: w_0 = 1)
    eta = _block_uniforms(draws, seeds, positions, K)  # [B, K+1]; eta_0 unused (h_0 = 1)
    passes = (slots <= num_draft[:, None]) & ((eta < h) | (slots == 0))  # [B, K+1]
    tau = (passes * slots).amax(-1)  # [B] the largest i that passes
    # The emitted token: bonus from P_{n+1} (tau = n), else the residual max(0, w_tau P_{tau+1} - Q_{tau+1}).
    law = p[rows, tau].double()  # [B, V] P_{tau+1} (the bonus slot when tau = n), unnormalised
    law = law / _sums(law)[:, None]
    stop = (tau < num_draft).nonzero().squeeze(1)
    if stop.numel():
        t = tau[stop]
        q_t = (torch.zeros_like(law[stop]).scatter_(-1, d[stop, t][:, None], 1.0) if q is None
               else q[stop, t].double() / q_sum[stop, t][:, None])
        residual = (w[stop, t, None] * law[stop] - q_t).clamp_min_(0)
        empty = residual.sum(-1) <= 0
        law[stop] = torch.where(empty[:, None], law[stop], residual)
    x = inverse_cdf(law, draws.uniform(seeds, positions + tau, STREAM_EMIT))
    return tau, x


def _excess(p, q, d, r, i, w_i, p_sum_i, q_sum_i) -> torch.Tensor:
    """``[b]`` Z_i = sum_x max(0, w_i P_{i+1}(x) - Q_{i+1}(x)) for rows ``r`` (P_{i+1} = p[:, i] / sum)."""
    P = p[r, i].double() * (w_i / p_sum_i)[:, None]  # [b, V] w_i P_{i+1}
    if q is None:
        P.scatter_add_(-1, d[r, i][:, None], -torch.ones_like(w_i)[:, None])
    else:
        P.sub_(q[r, i].double() / q_sum_i[:, None])
    return P.clamp_min_(0).sum(-1)


def _sums(x: torch.Tensor) -> torch.Tensor:
    """Row totals ``x [..., V]`` in float64; 1 where a row has no mass (slots no rule reads)."""
    s = x.sum(-1, dtype=torch.float64)
    return torch.where(s > 0, s, 1.0)


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
