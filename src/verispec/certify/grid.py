"""The certification grid: modes x edge cases x V x K, each compared with the target's own law.

A case passes when the law of what the shipped code emits (:func:`shipped_distribution`) is within
:data:`TV_TOLERANCE` of target-only sampling's law, no probe found the code's output changing
inside a cell, and (gumbel) the real verifier with the real counter-based noise emits exactly
what the independent reference Gumbel choice does, one-hot rows included.
"""

from __future__ import annotations

import functools
import itertools
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

import importlib

from ..rng import gumbel_noise
from ..sampling import SamplingParams
from . import large
from .cells import CertificationError, Setup, shipped_distribution
from .reference import gumbel_choice, total_variation
from .tables import Context, TableModel, target_distribution

verify_module = importlib.import_module("verispec.verify.chain")  # the chain rules (the package re-exports its functions)

__all__ = ["TV_TOLERANCE", "EDGES", "EXACT_ONLY", "FLOAT32_EDGES", "BFLOAT16_EDGES", "CertCase", "CertResult", "setup_for", "run_case", "default_grid",
           "certify_grid"]

#: Largest total variation between the emitted law and the target's law that counts as exact.
TV_TOLERANCE = 1e-12
EDGES = ("random", "p==q", "disjoint", "onehot_q", "onehot_p", "near_equal", "eos", "padded", "mixed", "ragged",
         "below", "greedy_ties", "top_p", "top_k", "large_v")
#: Float32 (the engine's dtype for p and q) runs these edges too; "large_v" runs both dtypes in one case.
FLOAT32_EDGES = ("random", "p==q", "onehot_q", "near_equal", "mixed", "ragged", "greedy_ties", "top_p", "top_k")
#: And bfloat16 these: rows that sum to 1 only within ~1e-3, which verify() must read as p / sum(p).
BFLOAT16_EDGES = ("random", "ragged", "top_k")
#: Edges that only the exact rule has: gumbel drafts are tokens, and its p is always transformed.
EXACT_ONLY = ("onehot_q", "below")


@dataclass(frozen=True)
class CertCase:
    """One certification case: a mode, an edge case (toy target/draft pair) and its sizes."""

    method: str
    edge: str
    vocab: int
    k: int
    n_tokens: int
    seed: int = 0
    dtype: str = "float64"  # of the logits, hence of p and q ("float32": the engine's)


@dataclass(frozen=True)
class CertResult:
    case: CertCase
    tv: float  # total variation between the shipped code's emitted law and the target's law
    probe_mismatches: int  # rows whose output changed inside one cell of the draws
    pathwise_mismatches: int | None  # gumbel: real verify + real noise vs the reference choice
    seconds: float
    error: str | None = None  # the certification could not run (e.g. the code is not cell-constant)

    @property
    def passed(self) -> bool:
        return (self.error is None and self.tv <= TV_TOLERANCE and not self.probe_mismatches
                and not self.pathwise_mismatches)


def setup_for(case: CertCase) -> Setup:
    """The models, transform and mode of a case."""
    V, s, e = case.vocab, case.seed, case.edge
    target = TableModel(V, s, "random", sharpness=2.0)
    draft = TableModel(V, s + 1, "random", sharpness=2.0)
    kw: dict = dict(params=SamplingParams(temperature=1.0), dtype=getattr(torch, case.dtype))
    if e == "p==q":
        draft = TableModel(V, s, "copy", base=target)
    elif e == "disjoint":
        target, draft = TableModel(V, s, "even"), TableModel(V, s + 1, "odd")
    elif e == "onehot_q":
        kw["point_mass"] = True
        draft = functools.partial(_point_draft, V, s)  # type: ignore[assignment]
    elif e == "onehot_p":
        target = TableModel(V, s, "onehot")
    elif e == "near_equal":
        draft = TableModel(V, s + 1, "near", base=target)
    elif e == "eos":
        kw["eos"] = 0
    elif e == "padded":  # two vocabulary rows that neither model ever gives mass
        V += 2
        target, draft = TableModel(V, s, "padded", sharpness=2.0), TableModel(V, s + 1, "padded", sharpness=2.0)
    elif e == "mixed":  # one-hot p in about half the contexts: greedy and sampled rows in one call
        target = TableModel(V, s, "mixed", sharpness=2.0)
    elif e == "ragged":
        kw["ragged"] = True
    elif e == "below":  # raw rows, p <= q everywhere and p sums to 1 - 1e-10: the zero-residual fallback
        target = TableModel(V, s, "below", base=draft)
        kw["params"] = None
    elif e == "greedy_ties":  # temperature 0 on a target whose top two tokens tie
        target = TableModel(V, s, "ties", sharpness=2.0)
        kw["params"] = SamplingParams(temperature=0.0)
    elif e == "top_p":
        kw["params"] = SamplingParams(temperature=0.9, top_p=0.7)
    elif e == "top_k":
        kw["params"] = SamplingParams(temperature=1.3, top_k=2)
    elif e == "large_v":
        return large.large_setup(case.method, V, case.k, s, kw["dtype"])
    elif e != "random":
        raise ValueError(f"unknown edge case {e!r}; one of {EDGES}")
    return Setup(target, draft, V, case.k, method=case.method, **kw)


def _point_draft(V: int, seed: int, ctx: Context) -> int:
    return random.Random(f"point {seed} {ctx}").randrange(V)


def run_case(case: CertCase) -> CertResult:
    """The shipped code's emitted law against the target's (plus the pathwise gumbel check)."""
    t0 = time.perf_counter()
    if case.edge == "large_v":  # one pass's exact law and the pathwise checks, in float32 and float64
        tv, probes, pathwise = 0.0, 0, 0
        for dtype in (torch.float32, torch.float64):
            try:
                t, pr, pw = large.run_large(case.method, case.vocab, case.k, case.seed, dtype)
            except CertificationError as err:
                return CertResult(case, float("inf"), 0, None, time.perf_counter() - t0, error=str(err))
            tv, probes, pathwise = max(tv, t), probes + pr, pathwise + pw
        return CertResult(case, tv, probes, pathwise, time.perf_counter() - t0)
    s = setup_for(case)
    want = target_distribution(s.p_ref, case.n_tokens, eos=s.eos)
    try:
        got, probes = shipped_distribution(s, case.n_tokens)
    except CertificationError as err:
        return CertResult(case, float("inf"), 0, None, time.perf_counter() - t0, error=str(err))
    pathwise = _gumbel_pathwise(case) if case.method == "gumbel" else None
    return CertResult(case, total_variation(got, want), probes, pathwise, time.perf_counter() - t0)


def _gumbel_pathwise(case: CertCase, n_seeds: int = 8) -> int:
    """Count (draft, seed) rows where ``verify(method="gumbel")`` with the real counter-based noise
    departs from target-only Gumbel sampling by the reference :func:`gumbel_choice`.

    Every draft sequence in V^K is verified against random target rows (a third of them one-hot,
    the verifier's shortcut) under ``n_seeds`` seeds, in one vectorised call.
    """
    V, K = case.vocab, case.k
    gen = torch.Generator().manual_seed(case.seed)
    drafts = torch.tensor(list(itertools.product(range(V), repeat=K)), dtype=torch.int64)  # [D, K]
    D = drafts.shape[0]
    p = torch.rand(n_seeds, K + 1, V, generator=gen, dtype=torch.float64) ** 3
    if case.edge == "disjoint":
        p[..., 1::2] = 0
    one_hot = torch.rand(n_seeds, K + 1, generator=gen) < 1 / 3
    p = torch.where(one_hot[..., None], torch.zeros_like(p).scatter_(-1, p.argmax(-1, keepdim=True), 1.0), p)
    p = (p / p.sum(-1, keepdim=True)).repeat_interleave(D, 0)  # [B, K+1, V]
    seeds = torch.arange(n_seeds, dtype=torch.int64).repeat_interleave(D) + 1000 * case.seed
    positions = torch.full((D * n_seeds,), 7, dtype=torch.int64)
    out = verify_module.verify(p, None, drafts.repeat(n_seeds, 1), seeds=seeds, positions=positions, method="gumbel")
    noise = gumbel_noise(seeds[:, None], positions[:, None] + torch.arange(K + 1), V).tolist()  # [B, K+1, V]
    bad = 0
    for r, (row_p, row_g) in enumerate(zip(p.tolist(), noise)):
        want = [gumbel_choice(pi, gi) for pi, gi in zip(row_p, row_g)]
        n_out = int(out.num_emitted[r])
        bad += out.tokens[r, :n_out].tolist() != want[:n_out]
    return bad


def default_grid(quick: bool) -> list[CertCase]:
    """Modes x edge cases x V x K, with N (>= 2) as large as the enumeration stays fast."""
    cases = []
    vocabs = (2, 3, 5) if quick else (2, 3, 4, 5)
    ks = (1, 2, 4) if quick else (1, 2, 3, 4)
    budget = 3_000 if quick else 40_000
    for method in ("exact", "gumbel"):
        for edge in EDGES:
            if method == "gumbel" and edge in EXACT_ONLY:
                continue
            if edge == "large_v":  # one pass (not N tokens) at V = 2,085, float32 and float64
                cases += [CertCase(method, edge, large.LARGE_V, k, 1) for k in ((1,) if quick else (1, 2))]
                continue
            dtypes = ("float64",) + ("float32",) * (edge in FLOAT32_EDGES) + ("bfloat16",) * (edge in BFLOAT16_EDGES)
            for dtype in dtypes:
                low = dtype != "float64"  # float32 / bfloat16: a few sizes (the rule is the same; the rows differ)
                for V in vocabs if not low else (3,) if quick else (3, 5):
                    for K in ks if not low else (2,) if quick else (1, 2):
                        n, v = 5, V + 2 * (edge == "padded")
                        while n > 2 and v ** (n + K) > budget:
                            n -= 1
                        cases.append(CertCase(method, edge, V, K, n, dtype=dtype))
    return cases


def certify_grid(cases: Sequence[CertCase]) -> list[CertResult]:
    """Run every case; see :func:`run_case`."""
    return [run_case(c) for c in cases]
