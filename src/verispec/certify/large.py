"""Large vocabularies: the code paths that only run from 2,048 tokens (the two-level inverse CDF)
and past one Gumbel block of 32 ids (the block-pruning search), which the small grid never reaches.

A full enumeration of sequences is out of reach there, so a ``large_v`` case checks, in float32
(the engine's dtype) and float64:

* the exact law of one draft-and-verify pass of the shipped :func:`verispec.verify` on tables whose
  mass sits on four tokens in far-apart chunks and blocks (the last in the final partial chunk)
  with 1e-7 to 3e-7 on every 8th other token, by the cell enumeration of :mod:`.cells` (every accept
  pattern, every emitted token's CDF cell, the target's Gumbel winner in each cell, driven through
  the shipped search), against the rule's one-pass law from the float64 reference primitives;
* pathwise, :func:`verispec.rng.inverse_cdf` against :func:`verispec.rng.inverse_cdf_reference`
  and the token whose cell it is, 1e-12 below and above every CDF cell boundary of target rows
  with mass on every token, and of residual rows. (1e-12 is past the rounding of any float64 sum
  of 2,085 terms, 2,085 ulp; exactly at a boundary the two searches may differ: their float64
  cumulative sums round differently, which moves cell ends by about an ulp.);
* pathwise, :func:`verispec.rng.gumbel_argmax` (the shipped search, real counter-based noise)
  against :func:`verispec.rng.gumbel_argmax_reference` on target rows and a row with a heavy token
  in every block (the search's whole-vector fallback) under many seeds, and on the same rows with the runner-up moved to within 1e-6
  (float32) / 1e-9 (float64) of a tie with the winner, on either side.
"""

from __future__ import annotations

import math

import torch

from .. import rng
from ..sampling import SamplingParams, logits_to_probs
from .cells import POS0, Setup, _one_pass
from .reference import residual_distribution, total_variation
from .symbolic import _one_iteration
from .tables import TableModel

__all__ = ["LARGE_V", "large_setup", "large_law_tv", "inverse_cdf_boundary_mismatches", "gumbel_tie_mismatches"]

#: The large vocabulary: past 8 chunks of 256 (the two-level inverse CDF), 66 Gumbel blocks with a
#: partial last one, and a partial last chunk.
LARGE_V = 2085


def large_setup(method: str, V: int, k: int, seed: int, dtype: torch.dtype) -> Setup:
    target = TableModel(V, seed, "large")
    draft = TableModel(V, seed + 1, "large_q", base=target)
    return Setup(target, draft, V, k, method=method, params=SamplingParams(temperature=1.0), dtype=dtype)


def large_law_tv(s: Setup, contexts=((),)) -> tuple[float, int]:
    """Worst TV between the shipped code's one-pass law and the rule's, over ``contexts``, and the
    probe mismatches."""
    laws, probes = _one_pass(s, list(contexts))
    worst = 0.0
    for ctx, law in zip(contexts, laws):
        if s.method == "gumbel":  # the certifier's gumbel drafter: the draft table's top token
            draft = lambda c: max(range(s.vocab), key=lambda x: (s.q_ref(c)[x], -x))  # noqa: E731
        else:
            draft = s.q_ref
        rule = _one_iteration(s.p_ref, draft, s.k, s.method, s.method == "gumbel", ctx)
        worst = max(worst, total_variation(law, rule))
    return worst, probes


def _rows(s: Setup, contexts) -> torch.Tensor:
    """``[m, V]`` the shipped transform's p (in ``s.dtype``) at ``contexts`` with every zero of the
    table raised to 2e-7, and the residual rows of the table's p and q (float64)."""
    logits = torch.log(torch.tensor([s.target(c) for c in contexts], dtype=torch.float64)).to(s.dtype)
    logits = torch.where(torch.isfinite(logits), logits, math.log(2e-7))  # mass on every token
    p = logits_to_probs(logits, SamplingParams(temperature=1.0))
    res = [residual_distribution(s.p_ref(c), s.q_ref(c)) for c in contexts]
    return p, torch.tensor(res, dtype=torch.float64)


BOUNDARY_GAP = 1e-12  # the pathwise inverse-CDF points sit this far (in u) from each cell boundary


def inverse_cdf_boundary_mismatches(rows: torch.Tensor, chunk: int = 1024) -> int:
    """Count (row, u) where the shipped inverse CDF disagrees with the plain one or with the token
    whose cell holds u, for u :data:`BOUNDARY_GAP` below and above every CDF boundary of each row of
    ``rows [m, V]`` (the cells from a compensated running sum, within an ulp or two of exact)."""
    bad = 0
    for row in rows:
        mass = row.double().tolist()
        total = math.fsum(mass)
        ends, hi, lo = [], 0.0, 0.0
        for x, px in enumerate(mass):  # compensated (Neumaier) prefix sums: within an ulp or two
            t = hi + px
            lo += (hi - t) + px if abs(hi) >= abs(px) else (px - t) + hi
            hi = t
            if px > 0:
                ends.append(((hi + lo) / total, x))
        b = torch.tensor([e for e, _ in ends[:-1]], dtype=torch.float64)  # boundaries between cells
        lo_tok = torch.tensor([x for _, x in ends[:-1]])  # the token below each boundary
        hi_tok = torch.tensor([x for _, x in ends[1:]])  # and the next token with mass
        u = torch.cat([b - BOUNDARY_GAP, b + BOUNDARY_GAP])
        want = torch.cat([lo_tok, hi_tok])
        for i in range(0, u.numel(), chunk):
            uu, ww = u[i : i + chunk], want[i : i + chunk]
            probs = row[None].expand(uu.numel(), -1)
            got = rng.inverse_cdf(probs, uu)
            bad += int(((got != rng.inverse_cdf_reference(probs, uu)) | (got != ww)).sum())
    return bad


def gumbel_tie_mismatches(p: torch.Tensor, n_seeds: int = 32) -> int:
    """Count rows where the shipped Gumbel search and the whole-vector reference disagree: rows
    ``p [m, V]`` under ``n_seeds`` seeds each, then each with its runner-up moved to just above
    and just below a tie with the winner (relative 1e-6 in float32, 1e-9 in float64)."""
    m, V = p.shape
    rows = p.repeat_interleave(n_seeds, 0)  # [m * S, V]
    seeds = torch.arange(rows.shape[0], dtype=torch.int64) * 7919 + 11
    pos = torch.full((rows.shape[0],), POS0, dtype=torch.int64)
    bad = int((rng.gumbel_argmax(rows, seeds, pos) != rng.gumbel_argmax_reference(rows, seeds, pos)).sum())
    score = torch.log(rows.double()) + rng.gumbel_noise(seeds, pos, V)  # [n, V]
    top2 = score.topk(2, -1)
    a, b = top2.indices[:, 0], top2.indices[:, 1]
    gap = top2.values[:, 0] - top2.values[:, 1]  # raise log p_b by the gap, +- eps: b just wins / loses
    eps = 1e-6 if rows.dtype != torch.float64 else 1e-9
    r = torch.arange(rows.shape[0])
    for sign in (1.0, -1.0):
        tied = rows.clone()
        tied[r, b] = (rows[r, b].double() * torch.exp(gap + sign * eps)).to(rows.dtype)
        got = rng.gumbel_argmax(tied, seeds, pos)
        bad += int((got != rng.gumbel_argmax_reference(tied, seeds, pos)).sum())
        bad += int((got != torch.where(torch.tensor(sign > 0), b, a)).sum())  # the intended winner
    return bad


def run_large(method: str, V: int, k: int, seed: int, dtype: torch.dtype) -> tuple[float, int, int]:
    """(worst one-pass TV, probe mismatches, pathwise mismatches) of one large-vocabulary case."""
    s = large_setup(method, V, k, seed, dtype)
    tv, probes = large_law_tv(s)
    p, residual = _rows(s, [(), (2, 3)])
    pathwise = inverse_cdf_boundary_mismatches(torch.cat([p.double(), residual]) if dtype == torch.float64 else p)
    if dtype != torch.float64:
        pathwise += inverse_cdf_boundary_mismatches(residual)
    # and a row with one heavy token in every block (1e-3 elsewhere): every block's bound stays high, so
    # most blocks stay in play and the search draws the whole vector instead (its fallback)
    gen = torch.Generator().manual_seed(seed)
    flat = torch.full((1, V), 1e-3, dtype=torch.float64)
    heavy = torch.arange(0, V, rng.GUMBEL_BLOCK) + torch.randint(0, rng.GUMBEL_BLOCK, (-(-V // rng.GUMBEL_BLOCK),),
                                                                 generator=gen)
    flat[0, heavy.clamp(max=V - 1)] = 1.0
    pathwise += gumbel_tie_mismatches(torch.cat([p, (flat / flat.sum()).to(dtype)]))
    return tv, probes, pathwise
