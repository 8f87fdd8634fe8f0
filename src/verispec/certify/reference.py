"""The plain float64 reference: the rule of docs/design.md section 2 written one scalar at a time.

Nothing here imports :mod:`verispec.verify` or :mod:`verispec.sampling`: this is the independent
statement of the contract that the shipped, vectorised code is certified against.

* rule primitives: :func:`accept_probability`, :func:`residual_distribution`, :func:`gumbel_choice`;
* :func:`gumbel_max_law`: the law of the Gumbel-max choice by numerical integration (computed, not
  assumed equal to p);
* :func:`reference_probs`: the sampling transform (temperature, top-k, top-p, min-p) on one row;
* :func:`reference_verify`: a per-row, per-slot loop with the same counter-based draws as
  :func:`verispec.verify` (tests compare the two token for token; the verify benchmark uses it
  as its naive baseline).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np
import torch

from ..rng import COUNTER, STREAM_ACCEPT, STREAM_BLOCK, STREAM_EMIT, accept_stream, gumbel_noise, inverse_cdf_reference, sample, uniform

__all__ = ["accept_probability", "residual_distribution", "gumbel_choice", "gumbel_max_law", "gumbel_max_laws", "reference_probs",
           "reference_verify", "reference_verify_tree", "reference_verify_block", "total_variation", "Dist"]

Dist = tuple[float, ...]


def accept_probability(p_d: float, q_d: float) -> float:
    """min(1, p(d) / q(d)) for a draft token d sampled from q (q(d) > 0)."""
    return min(1.0, p_d / q_d)


def residual_distribution(p: Sequence[float], q: Sequence[float]) -> list[float]:
    """Normalised max(0, p - q); normalised p itself when the residual has no mass (p <= q)."""
    r = [max(0.0, pi - qi) for pi, qi in zip(p, q)]
    mass = math.fsum(r)
    if mass <= 0.0:
        r, mass = list(p), math.fsum(p)
    return [ri / mass for ri in r]


def gumbel_choice(p: Sequence[float], noise: Sequence[float]) -> int:
    """argmax(log p + G), lowest index on ties; tokens with p = 0 are never chosen."""
    scores = [math.log(pi) + g if pi > 0 else -math.inf for pi, g in zip(p, noise)]
    return max(range(len(scores)), key=lambda i: (scores[i], -i))


@functools.lru_cache(maxsize=100_000)
def gumbel_max_law(p: Dist) -> Dist:
    """P(argmax(log p + G) = x) for i.i.d. standard Gumbel G, by numerical integration.

    See :func:`gumbel_max_laws`; equals p(x) (the Gumbel-max trick), computed, not assumed.
    """
    return tuple(float(x) for x in gumbel_max_laws(np.array([p], dtype=np.float64))[0])


def gumbel_max_laws(p: np.ndarray) -> np.ndarray:
    """``[n, V]`` Gumbel-max laws of the rows of ``p [n, V]`` by Gauss-Legendre quadrature.

    P(x) = integral over g of the density of G_x at g, e^{-g} exp(-e^{-g}), times P(G_z < g + log p_x
    - log p_z) = exp(-e^{-g} p_z / p_x) for every other token z: the integrand
    e^{-g} exp(-e^{-g} c_x) with c_x = sum_z p_z / p_x. It is smooth on the scale of 1 in g, so
    20-point Gauss-Legendre on half-unit pieces of [-6, 60] reaches float64 accuracy; outside that
    range the integral is below 1e-25.
    """
    p = np.asarray(p, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        c = np.where(p > 0, p.sum(-1, keepdims=True) / p, np.inf)  # [n, V]
    g, w = _GL_NODES
    e = np.exp(-g)  # [m]
    out = np.empty_like(p)
    step = max(1, (1 << 21) // (p.shape[-1] * len(g)))  # [rows, V, m] temporaries stay small
    for i in range(0, p.shape[0], step):
        f = e * np.exp(-e * c[i : i + step, :, None])
        out[i : i + step] = f @ w
    return np.where(p > 0, out, 0.0)


def _gauss_legendre_pieces(lo: float, hi: float, width: float, order: int) -> tuple[np.ndarray, np.ndarray]:
    x, w = np.polynomial.legendre.leggauss(order)
    starts = np.arange(lo, hi, width)
    nodes = (starts[:, None] + (x[None] + 1) * width / 2).ravel()
    weights = np.tile(w * width / 2, len(starts))
    return nodes, weights


_GL_NODES = _gauss_legendre_pieces(-6.0, 60.0, 0.5, 20)


def reference_probs(dist: Sequence[float], temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                    min_p: float = 0.0) -> Dist:
    """The sampling transform of one row whose logits are ``log(dist)`` (0 -> -inf).

    temperature 0: one-hot on the largest logit, ties to the lowest id. Otherwise, in order:
    logits / temperature -> keep the top_k largest (ties at the k-th all kept) -> keep the
    smallest most-likely prefix whose mass reaches top_p (stable order: lower id first among
    equals) -> drop tokens below min_p times the largest probability -> renormalise.
    """
    V = len(dist)
    logits = [math.log(x) if x > 0 else -math.inf for x in dist]
    if temperature == 0:
        top = max(logits)
        return tuple(1.0 if i == logits.index(top) else 0.0 for i in range(V))
    z = [lg / temperature for lg in logits]
    if 0 < top_k < V:
        kth = sorted(z, reverse=True)[top_k - 1]
        z = [x if x >= kth else -math.inf for x in z]
    w = _softmax(z)
    if top_p < 1.0:
        order = sorted(range(V), key=lambda i: (-z[i], i))
        keep, before = set(), 0.0
        for i in order:
            if before < top_p:
                keep.add(i)
            before += w[i]
        w = _softmax([x if i in keep else -math.inf for i, x in enumerate(z)])
    if min_p > 0.0:
        cut = min_p * max(w)
        w = [x if x >= cut else 0.0 for x in w]
        s = math.fsum(w)
        w = [x / s for x in w]
    return tuple(w)


def _softmax(z: Sequence[float]) -> list[float]:
    m = max(z)
    e = [math.exp(x - m) if x > -math.inf else 0.0 for x in z]
    s = math.fsum(e)
    return [x / s for x in e]


def total_variation(a: dict, b: dict) -> float:
    """Total variation distance between two distributions given as {outcome: prob}."""
    return 0.5 * math.fsum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b))


def reference_verify(
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor | None,
    draft_tokens: torch.Tensor,
    *,
    num_draft: torch.Tensor,
    seeds: torch.Tensor,
    positions: torch.Tensor,
    method: str = "exact",
) -> list[list[int]]:
    """Plain float64 loop version of :func:`verispec.verify`; returns the emitted tokens per row.

    Uses the same counter-based draws (seed, absolute position, stream), so for float64 inputs
    it emits exactly the tokens the vectorised verifier emits. Rows are read as distributions
    ``p / sum(p)`` and ``q / sum(q)`` (accept test and residual alike), as the verifier reads them.
    """
    out: list[list[int]] = []
    for b in range(target_probs.shape[0]):
        seed = seeds[b : b + 1]
        n, pos0 = int(num_draft[b]), int(positions[b])
        emitted: list[int] = []
        for i in range(n + 1):
            pos = torch.tensor([pos0 + i])
            p = target_probs[b, i].double()
            if method == "gumbel":
                t = gumbel_choice(p.tolist(), gumbel_noise(seed, pos, p.numel())[0].tolist())
                emitted.append(t)
                if i < n and int(draft_tokens[b, i]) == t:
                    continue
                break
            if i == n:  # all drafts accepted: bonus token from p
                emitted.append(int(sample(p[None], seed, pos, STREAM_EMIT)[0]))
                break
            d = int(draft_tokens[b, i])
            q = _one_hot(d, p.numel()) if draft_probs is None else draft_probs[b, i].double()
            p, q = p / math.fsum(p.tolist()), q / math.fsum(q.tolist())  # rows are read as p / sum(p)
            u = float(uniform(seed, pos, STREAM_ACCEPT))
            if u < accept_probability(float(p[d]), float(q[d])):
                emitted.append(d)
                continue
            residual = torch.tensor(residual_distribution(p.tolist(), q.tolist()), dtype=torch.float64)
            emitted.append(int(sample(residual[None], seed, pos, STREAM_EMIT)[0]))
            break
        out.append(emitted)
    return out


def _one_hot(d: int, V: int) -> torch.Tensor:
    q = torch.zeros(V, dtype=torch.float64)
    q[d] = 1.0
    return q


def reference_verify_tree(
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor | None,
    draft_tokens: torch.Tensor,
    parents: torch.Tensor,
    *,
    num_draft: torch.Tensor,
    seeds: torch.Tensor,
    positions: torch.Tensor,
    child_draw: str = "iid",
    method: str = "exact",
    draws=None,
) -> list[list[int]]:
    """Plain loop version of :func:`verispec.verify.verify_tree` (docs/design.md section 9): one row,
    one node, one sibling at a time, with the same draws; returns the emitted tokens per row.

    At a node with target law p the children are tried in index order against ``law`` (p at first):
    child c (drawn from ``q``) passes if u < law(c) / q(c); a rejection replaces law by
    norm(max(0, law - q)) (:func:`residual_distribution`, which keeps law where that has no mass)
    and, for children drawn without replacement, q by q without c, renormalised. Point masses
    (``draft_probs=None`` or "top_k") have q = one-hot(c). If no child passes, the token is drawn
    from law. Greedy rows (one-hot p at every slot) follow the child equal to argmax p; "gumbel"
    follows the child equal to argmax(log p + G(seed, position)).
    """
    draws = COUNTER if draws is None else draws
    point = draft_probs is None or child_draw == "top_k"
    out: list[list[int]] = []
    for b in range(target_probs.shape[0]):
        n, seed, pos0 = int(num_draft[b]), seeds[b : b + 1], int(positions[b])
        V = target_probs.shape[-1]
        children: dict[int, list[int]] = {}
        for i in range(n):
            children.setdefault(int(parents[b, i]), []).append(i)
        rows = [target_probs[b, s].double().tolist() for s in range(n + 1)]
        greedy = method != "gumbel" and all(sum(x > 0 for x in r) == 1 and max(r) == 1.0 for r in rows)
        node, depth, emitted = -1, 0, []
        while True:
            pos = torch.tensor([pos0 + depth])
            raw = target_probs[b, node + 1].double()
            p = [x / math.fsum(raw.tolist()) for x in raw.tolist()]
            kids = children.get(node, [])
            if method == "gumbel" or greedy:
                t = (gumbel_choice(raw.tolist(), gumbel_noise(seed, pos, V)[0].tolist()) if method == "gumbel"
                     else max(range(V), key=lambda x: (p[x], -x)))
                nxt = next((c for c in kids if int(draft_tokens[b, c]) == t), None)
            else:
                law, nxt = p, None
                q = None
                if not point and kids:
                    qrow = draft_probs[b, kids[0]].double().tolist()
                    q = [x / math.fsum(qrow) for x in qrow]
                for r, c in enumerate(kids):
                    d = int(draft_tokens[b, c])
                    qc = _one_hot(d, V).tolist() if q is None else q
                    u = float(draws.uniform(seed, pos, accept_stream(r))[0])
                    if u < law[d] / qc[d]:
                        nxt = c
                        break
                    law = residual_distribution(law, qc)
                    if child_draw == "without_replacement" and q is not None:
                        q = [0.0 if x == d else qx for x, qx in enumerate(q)]
                        total = math.fsum(q)
                        q = [x / total for x in q] if total > 0 else q
                if nxt is None:
                    t = int(inverse_cdf_reference(torch.tensor(law, dtype=torch.float64),
                                                  draws.uniform(seed, pos, STREAM_EMIT)[0]))
            if nxt is None:
                emitted.append(t)
                break
            emitted.append(int(draft_tokens[b, nxt]))
            node, depth = nxt, depth + 1
        out.append(emitted)
    return out


def block_weights(P: list[list[float]], Q: list[list[float]], x: Sequence[int]) -> tuple[list[float], list[float]]:
    """Block verification's weights on one chain of drafts ``x`` (``P[i]``, ``Q[i]``: the target's and
    the drafter's law at slot i, as lists): w_0 = 1, w_i = min(1, w_{i-1} P_i(X_i) / Q_i(X_i)), and
    h_0 = 1, h_i = Z_i / (Z_i + 1 - w_i) with Z_i = sum_x max(0, w_i P_{i+1}(x) - Q_{i+1}(x)) (0 where
    the denominator is 0), h_n = w_n."""
    n, V = len(x), len(P[0])
    w = [1.0]
    for i in range(n):
        w.append(min(1.0, w[-1] * P[i][x[i]] / Q[i][x[i]]))
    h = [1.0]
    for i in range(1, n):
        Z = math.fsum(max(0.0, w[i] * P[i][y] - Q[i][y]) for y in range(V))
        h.append(Z / (Z + 1 - w[i]) if Z + 1 - w[i] > 0 else 0.0)
    if n:
        h.append(w[n])
    return w, h


def reference_verify_block(
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor | None,
    draft_tokens: torch.Tensor,
    *,
    num_draft: torch.Tensor,
    seeds: torch.Tensor,
    positions: torch.Tensor,
    draws=None,
) -> list[list[int]]:
    """Plain loop version of block verification (:mod:`verispec.verify.block`), with the same draws:
    w_0 = 1, w_i = min(1, w_{i-1} P_i(X_i) / Q_i(X_i)); h_i = Z_i / (Z_i + 1 - w_i) with
    Z_i = sum_x max(0, w_i P_{i+1}(x) - Q_{i+1}(x)) (0 where the denominator is 0), h_0 = 1, h_n = w_n;
    tau = the largest i with eta_i < h_i; emit X_1..X_tau and a token from P_{n+1} (tau = n) or from
    norm(max(0, w_tau P_{tau+1} - Q_{tau+1})) (P_{tau+1} where that has no mass)."""
    draws = COUNTER if draws is None else draws
    out: list[list[int]] = []
    for b in range(target_probs.shape[0]):
        n, seed, pos0 = int(num_draft[b]), seeds[b : b + 1], int(positions[b])
        V = target_probs.shape[-1]
        x = [int(draft_tokens[b, i]) for i in range(n)]
        P = [_normalised_list(target_probs[b, i].double().tolist()) for i in range(n + 1)]  # P_1..P_{n+1}
        Q = [(_one_hot(x[i], V).tolist() if draft_probs is None else _normalised_list(draft_probs[b, i].double().tolist()))
             for i in range(n)]  # Q_1..Q_n
        w, h = block_weights(P, Q, x)
        tau = max(i for i in range(n + 1)
                  if i == 0 or float(draws.uniform(seed, torch.tensor([pos0]), STREAM_BLOCK + i)[0]) < h[i])
        if tau == n:
            law = P[n]
        else:
            law = [max(0.0, w[tau] * P[tau][y] - Q[tau][y]) for y in range(V)]
            if math.fsum(law) <= 0:
                law = P[tau]
        u = draws.uniform(seed, torch.tensor([pos0 + tau]), STREAM_EMIT)[0]
        out.append(x[:tau] + [int(inverse_cdf_reference(torch.tensor(law, dtype=torch.float64), u))])
    return out


def _normalised_list(row: list[float]) -> list[float]:
    total = math.fsum(row)
    return [v / total for v in row]
