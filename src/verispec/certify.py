"""Exactness certification: a plain float64 reference verifier and exact enumeration.

Three pieces, each small enough to read against DESIGN.md section 2:

* the *rule primitives* (:func:`accept_probability`, :func:`residual_distribution`,
  :func:`gumbel_choice`) in plain float64 Python;
* :func:`reference_verify`: a per-row, per-slot loop over those primitives that uses the same
  counter-based draws as :func:`verispec.verify`, so the vectorised verifier must give the
  same tokens (tests compare them);
* :func:`emitted_distribution`: runs the algorithm *symbolically* on toy target/draft models
  given as tables (context -> distribution over V tokens): every draft branch weighted by q,
  every accept/reject outcome weighted by the accept probability, every residual/bonus token,
  until N tokens are emitted or EOS ends the sequence. Comparing it with
  :func:`target_distribution` is a proof by computation that the rule is exact for that case.

For ``method="gumbel"`` the target's token at a slot is a deterministic function of the shared
noise; its law is computed by numerical integration over the Gumbel noise
(:func:`gumbel_max_law`, to ~1e-13), and the enumeration runs the accept-while-equal rule over
every draft token. :func:`certify_grid` also checks the real vectorised ``verify`` pathwise:
for every draft in V^K and many noise seeds it must emit target-only Gumbel sampling's tokens.
"""

from __future__ import annotations

import functools
import itertools
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from .rng import STREAM_ACCEPT, STREAM_EMIT, gumbel_noise, sample, uniform
from .verify import gumbel_argmax, verify

__all__ = [
    "accept_probability",
    "residual_distribution",
    "gumbel_choice",
    "gumbel_max_law",
    "reference_verify",
    "TableModel",
    "emitted_distribution",
    "target_distribution",
    "total_variation",
    "CertCase",
    "CertResult",
    "certify_grid",
    "default_grid",
    "run_case",
]

Dist = tuple[float, ...]
Context = tuple[int, ...]
#: A toy model: context (token ids so far) -> next-token distribution over V tokens.
TableFn = Callable[[Context], Dist]
#: A point-mass drafter: context -> the token it proposes.
PointFn = Callable[[Context], int]


# ----------------------------------------------------------------------------------------------
# Rule primitives (float64)


def accept_probability(p_d: float, q_d: float) -> float:
    """min(1, p(d) / q(d)) for a draft token d sampled from q (q(d) > 0)."""
    return min(1.0, p_d / q_d)


def residual_distribution(p: Sequence[float], q: Sequence[float]) -> list[float]:
    """Normalised max(0, p - q); p itself when the residual has no mass (then p == q)."""
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

    P(x) = integral over g of the Gumbel density of G_x at g times, for every other token z,
    P(G_z < g + log p_x - log p_z). Equals p(x) (the Gumbel-max trick); computed, not assumed.
    """
    from scipy.integrate import quad

    def law(x: int) -> float:
        if p[x] <= 0:
            return 0.0
        shifts = [math.log(p[x]) - math.log(pz) for z, pz in enumerate(p) if z != x and pz > 0]

        def integrand(g: float) -> float:
            log_f = -g - math.exp(-g) - sum(math.exp(-(g + s)) for s in shifts)
            return math.exp(log_f)

        # Split at the mode region so quad sees the mass; tails decay doubly exponentially.
        pieces = [(-math.inf, -5.0), (-5.0, 0.0), (0.0, 5.0), (5.0, 40.0), (40.0, math.inf)]
        return math.fsum(quad(integrand, a, b, epsabs=1e-15, epsrel=1e-13, limit=200)[0] for a, b in pieces)

    return tuple(law(x) for x in range(len(p)))


# ----------------------------------------------------------------------------------------------
# Reference verifier: one row, one slot at a time.


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
    it emits exactly the tokens the vectorised verifier emits.
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
                if i < n and int(draft_tokens[b, i]) == t:
                    emitted.append(t)
                    continue
                emitted.append(t)
                break
            if i == n:  # all drafts accepted: bonus token from p
                emitted.append(int(sample(p[None], seed, pos, STREAM_EMIT)[0]))
                break
            d = int(draft_tokens[b, i])
            q = _one_hot(d, p.numel()) if draft_probs is None else draft_probs[b, i].double()
            u = float(uniform(seed, pos, STREAM_ACCEPT))
            if u < accept_probability(float(p[d]), float(q[d])):
                emitted.append(d)
                continue
            residual = torch.clamp(p - q, min=0)
            if float(residual.sum()) <= 0:
                residual = p
            emitted.append(int(sample(residual[None], seed, pos, STREAM_EMIT)[0]))
            break
        out.append(emitted)
    return out


def _one_hot(d: int, V: int) -> torch.Tensor:
    q = torch.zeros(V, dtype=torch.float64)
    q[d] = 1.0
    return q


# ----------------------------------------------------------------------------------------------
# Toy models as tables


@dataclass(frozen=True)
class TableModel:
    """A deterministic random table: context -> distribution over ``vocab`` tokens.

    ``kind``: "random" (Dirichlet-like), "onehot" (a point mass), "near" (``base`` perturbed
    by ~1e-9), "even"/"odd" (support only on even/odd token ids, for disjoint supports),
    "copy" (exactly ``base``).
    """

    vocab: int
    seed: int
    kind: str = "random"
    base: TableModel | None = None
    sharpness: float = 1.0

    def __call__(self, ctx: Context) -> Dist:
        return _table_row(self, ctx)


@functools.lru_cache(maxsize=1_000_000)
def _table_row(m: TableModel, ctx: Context) -> Dist:
    rnd = random.Random(hash((m.seed, m.kind, ctx)))
    V = m.vocab
    if m.kind == "copy":
        assert m.base is not None
        return m.base(ctx)
    if m.kind == "onehot":
        return _onehot_row(V, rnd.randrange(V))
    if m.kind == "near":
        assert m.base is not None
        base = m.base(ctx)
        w = [b * (1 + 1e-9 * rnd.uniform(-1, 1)) for b in base]
        s = math.fsum(w)
        return tuple(x / s for x in w)
    w = [rnd.expovariate(1.0) ** m.sharpness for _ in range(V)]
    if m.kind == "even":
        w = [x if i % 2 == 0 else 0.0 for i, x in enumerate(w)]
    elif m.kind == "odd":
        w = [x if i % 2 == 1 else 0.0 for i, x in enumerate(w)]
    s = math.fsum(w)
    return tuple(x / s for x in w)


def _onehot_row(V: int, t: int) -> Dist:
    return tuple(1.0 if i == t else 0.0 for i in range(V))


# ----------------------------------------------------------------------------------------------
# Exact enumeration


def total_variation(a: dict, b: dict) -> float:
    """Total variation distance between two distributions given as {outcome: prob}."""
    return 0.5 * math.fsum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b))


def target_distribution(target: TableFn, n_tokens: int, *, eos: int | None = None,
                        prompt: Context = ()) -> dict[Context, float]:
    """Law of the first ``n_tokens`` tokens of target-only sampling (shorter if EOS ends it)."""
    dist: dict[Context, float] = {(): 1.0}
    for _ in range(n_tokens):
        nxt: dict[Context, float] = {}
        for seq, w in dist.items():
            if eos is not None and seq and seq[-1] == eos:
                nxt[seq] = nxt.get(seq, 0.0) + w
                continue
            for x, px in enumerate(target(prompt + seq)):
                if px > 0:
                    nxt[seq + (x,)] = nxt.get(seq + (x,), 0.0) + w * px
        dist = nxt
    return dist


def emitted_distribution(
    target: TableFn,
    draft: TableFn | PointFn,
    *,
    k: int,
    n_tokens: int,
    method: str = "exact",
    point_mass: bool = False,
    eos: int | None = None,
    prompt: Context = (),
) -> dict[Context, float]:
    """Exact law of the first ``n_tokens`` tokens emitted by speculative decoding.

    Args:
        target: table giving p for a context.
        draft: table giving q (or, with ``point_mass=True``, a function giving the proposed token).
        k: draft length per iteration.
        n_tokens: how many emitted tokens to look at.
        method: "exact" or "gumbel".
        eos: end-of-sequence token; tokens after an emitted EOS are dropped and the sequence ends.
        prompt: context before the first emitted token.
    """
    finished: dict[Context, float] = {}
    frontier: dict[Context, float] = {(): 1.0}
    while frontier:
        nxt: dict[Context, float] = {}
        for seq, w in frontier.items():
            for block, wb in _one_iteration(target, draft, k, method, point_mass, prompt + seq).items():
                out = seq + block
                if eos is not None and eos in out:
                    out = out[: out.index(eos) + 1]
                done = len(out) >= n_tokens or (eos is not None and out and out[-1] == eos)
                out = out[:n_tokens]
                bucket = finished if done else nxt
                bucket[out] = bucket.get(out, 0.0) + w * wb
        frontier = nxt
    return finished


def _one_iteration(target: TableFn, draft: TableFn | PointFn, k: int, method: str, point_mass: bool,
                   ctx: Context) -> dict[Context, float]:
    """Law of the block of tokens one draft-and-verify iteration emits after ``ctx``."""
    law: dict[Context, float] = {}

    def emit(block: Context, w: float) -> None:
        if w > 0:
            law[block] = law.get(block, 0.0) + w

    def branch(drafted: Context, w: float) -> None:
        here = ctx + drafted
        p = target(here)
        if len(drafted) == k:  # every draft accepted: bonus token
            law_p = gumbel_max_law(p) if method == "gumbel" else p
            for x, px in enumerate(law_p):
                emit(drafted + (x,), w * px)
            return
        if point_mass:
            proposals = [(draft(here), 1.0)]  # type: ignore[arg-type]
            q = None
        else:
            q = draft(here)  # type: ignore[assignment]
            proposals = [(d, qd) for d, qd in enumerate(q) if qd > 0]
        for d, qd in proposals:
            if method == "gumbel":
                # The target's token t ~ Gumbel-max law of p; accept iff d == t, else emit t.
                for t, pt in enumerate(gumbel_max_law(p)):
                    if pt == 0:
                        continue
                    if t == d:
                        branch(drafted + (d,), w * qd * pt)
                    else:
                        emit(drafted + (t,), w * qd * pt)
                continue
            qvec = _onehot_row(len(p), d) if q is None else q
            a = accept_probability(p[d], qvec[d])
            branch(drafted + (d,), w * qd * a)
            for x, rx in enumerate(residual_distribution(p, qvec)):
                emit(drafted + (x,), w * qd * (1 - a) * rx)

    branch((), 1.0)
    return law


# ----------------------------------------------------------------------------------------------
# The certification grid


@dataclass(frozen=True)
class CertCase:
    """One certification case: a mode, a toy target/draft pair and its sizes."""

    method: str
    edge: str
    vocab: int
    k: int
    n_tokens: int
    seed: int = 0


@dataclass(frozen=True)
class CertResult:
    case: CertCase
    tv: float  # total variation between emitted and target-only laws
    pathwise_mismatches: int | None  # gumbel only: vectorised verify vs target-only Gumbel sampling
    seconds: float

    @property
    def passed(self) -> bool:
        return self.tv <= TV_TOLERANCE and not self.pathwise_mismatches


TV_TOLERANCE = 1e-12
EDGES = ("random", "p==q", "disjoint", "onehot_q", "onehot_p", "near_equal", "eos")


def _models(case: CertCase) -> tuple[TableFn, TableFn | PointFn, bool, int | None]:
    V, s = case.vocab, case.seed
    target = TableModel(V, s, "random", sharpness=2.0)
    draft: TableFn | PointFn = TableModel(V, s + 1, "random", sharpness=2.0)
    point_mass, eos = False, None
    if case.edge == "p==q":
        draft = TableModel(V, s, "copy", base=target)
    elif case.edge == "disjoint":
        target, draft = TableModel(V, s, "even"), TableModel(V, s + 1, "odd")
    elif case.edge == "onehot_q":
        point_mass = True
        draft = functools.partial(_point_draft, V, s)
    elif case.edge == "onehot_p":
        target = TableModel(V, s, "onehot")
    elif case.edge == "near_equal":
        draft = TableModel(V, s + 1, "near", base=target)
    elif case.edge == "eos":
        eos = 0
    return target, draft, point_mass, eos


def _point_draft(V: int, seed: int, ctx: Context) -> int:
    return random.Random(hash((seed, "point", ctx))).randrange(V)


def run_case(case: CertCase) -> CertResult:
    """Enumerate one case and compare with the target's law (plus the pathwise gumbel check)."""
    t0 = time.perf_counter()
    target, draft, point_mass, eos = _models(case)
    got = emitted_distribution(target, draft, k=case.k, n_tokens=case.n_tokens, method=case.method,
                               point_mass=point_mass, eos=eos)
    want = target_distribution(target, case.n_tokens, eos=eos)
    mismatches = _gumbel_pathwise(case) if case.method == "gumbel" else None
    return CertResult(case, total_variation(got, want), mismatches, time.perf_counter() - t0)


def _gumbel_pathwise(case: CertCase, n_seeds: int = 64) -> int:
    """Count (draft, seed) pairs where verify(method="gumbel") departs from target-only sampling.

    Every draft sequence in V^K is verified against random target tables under ``n_seeds`` noise
    seeds, in one vectorised call; the emitted tokens must be target-only Gumbel sampling's.
    """
    V, K = case.vocab, case.k
    gen = torch.Generator().manual_seed(case.seed)
    drafts = torch.tensor(list(itertools.product(range(V), repeat=K)), dtype=torch.int64)  # [D, K]
    D = drafts.shape[0]
    B = D * n_seeds
    p = torch.rand(n_seeds, K + 1, V, generator=gen, dtype=torch.float64) ** 3
    if case.edge == "disjoint":
        p[..., 1::2] = 0
    p = (p / p.sum(-1, keepdim=True)).repeat_interleave(D, 0)  # [B, K+1, V]
    seeds = torch.arange(n_seeds, dtype=torch.int64).repeat_interleave(D) + 1000 * case.seed
    positions = torch.full((B,), 7, dtype=torch.int64)
    d = drafts.repeat(n_seeds, 1)
    out = verify(p, None, d, seeds=seeds, positions=positions, method="gumbel")
    target_only = gumbel_argmax(torch.log(p), seeds, positions)  # [B, K+1]
    bad = 0
    for slot in range(K + 1):
        live = out.num_emitted > slot
        bad += int((live & (out.tokens[:, slot] != target_only[:, slot])).sum())
    return bad


def default_grid(quick: bool) -> list[CertCase]:
    """Modes x edge cases x V x K, with N as large as the enumeration stays fast."""
    cases = []
    vocabs = (2, 3, 5) if quick else (2, 3, 4, 5)
    ks = (1, 2, 4) if quick else (1, 2, 3, 4)
    for method in ("exact", "gumbel"):
        for edge in EDGES:
            if method == "gumbel" and edge == "onehot_q":
                continue  # gumbel drafts are always point masses; covered by every gumbel case
            for V in vocabs:
                for K in ks:
                    budget = 3_000 if quick else 60_000
                    n = 5
                    while n > 2 and V ** (n + K) > budget:
                        n -= 1
                    cases.append(CertCase(method, edge, V, K, n))
    return cases


def certify_grid(cases: Sequence[CertCase]) -> list[CertResult]:
    """Run every case; see :func:`run_case`."""
    return [run_case(c) for c in cases]
