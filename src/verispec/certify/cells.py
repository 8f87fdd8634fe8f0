"""The exact law of the *shipped* verifier, by enumerating the cells of its random draws.

Every outcome of :func:`verispec.verify` is a piecewise-constant function of its draws: an accept
uniform matters only through the side of p(d)/q(d) it falls on, an inverse-CDF uniform only
through the CDF cell it falls in, and Gumbel noise only through which token wins the argmax. So on
a small table model the law of what the real code emits is a finite sum: enumerate every draft
branch (the drafter's own sampling cells, driven through :func:`verispec.drafters.sample_draft`),
every accept/reject pattern and every emitted token's cell, call the real vectorised ``verify`` at
one point inside each cell combination (all of them in one batched call, ragged rows and all),
and weight its output by the cells' probabilities. Greedy setups (temperature 0) take their law from
:func:`verispec.verify.verify_argmax` on the engine's argmax of the logits (what the engine runs for
greedy chains), and ``verify`` must agree with it on every row; Gumbel cells run the shipped search
:func:`verispec.rng.gumbel_argmax` on noise chosen inside the cell (:class:`TableUniforms`). p and q
are computed in the setup's dtype (float32 is the engine's) by the shipped transform.
:func:`shipped_distribution` does this pass by pass until N tokens are out, giving the law of the emitted sequence, which the grid compares with
the target's own sequence law (:mod:`verispec.certify.grid`).

The cell boundaries come from the float64 reference (:mod:`verispec.certify.reference`). That the
shipped code really is constant on each cell is checked too: every combination is run three times,
at the cells' midpoints and at points a fraction :data:`DELTA` of the width inside either end of
every cell (draws the rule must ignore get far-apart values), with ``validate`` and the greedy
detection switched between the runs; any row whose output differs is a *probe mismatch*. (So a
cell end that the code moves by less than DELTA of the cell's width is not seen: the accept test
on unnormalised float32 rows, off by ~1e-7, is caught only through bfloat16 rows, off by ~1e-3.)
"""

from __future__ import annotations

import functools
import math
import random
from dataclasses import dataclass

import torch

import importlib

from .. import rng, sampling
from ..drafters import drawing as drafters
from ..engine import step as engine_step
from ..rng import GUMBEL_BLOCK, STREAM_ACCEPT, STREAM_DRAFT, STREAM_EMIT, Draws, GumbelUniforms
from .reference import gumbel_max_laws, reference_probs, residual_distribution
from .tables import Context, PointFn, TableFn

verify_module = importlib.import_module("verispec.verify.chain")  # the chain rules (the package re-exports its functions)

__all__ = ["CellDraws", "Setup", "shipped_distribution", "POS0", "DELTA"]

POS0 = 7  # absolute position of draft slot 0 in every certified row: a non-zero key
DELTA = 1e-4  # probes sit this fraction of a cell's width inside its ends
PROBE_FLOOR = 1e-9  # cell combinations less likely than this are evaluated at their midpoint only
PROBES = ("mid", "lo", "hi")
_MARGIN = {"mid": 1.0, "lo": 1e-4, "hi": 20.0}  # Gumbel probes: the winner's lead over the rest


class CellDraws(Draws):
    """Draws read from tables instead of a generator: row r of a call (seed r) at absolute position
    ``POS0 + s`` gets ``tables[stream][r, s]`` (uniforms) or ``noise[r, s]`` (``[V]`` Gumbel noise).
    Positions outside a table read its last column, which always holds a value the rule must ignore.
    """

    def __init__(self, uniforms: dict[int, torch.Tensor], noise: torch.Tensor | None = None) -> None:
        self.uniforms, self.noise = uniforms, noise

    @staticmethod
    def _cells(seeds: torch.Tensor, positions: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        rows, pos = torch.broadcast_tensors(torch.as_tensor(seeds), torch.as_tensor(positions))
        return rows, (pos - POS0).clamp(0, width - 1)

    def uniform(self, seeds: torch.Tensor, positions: torch.Tensor, stream: int) -> torch.Tensor:
        table = self.uniforms[stream]  # [R, S]
        rows, slots = self._cells(seeds, positions, table.shape[1])
        return table[rows, slots]

    def gumbel(self, seeds: torch.Tensor, positions: torch.Tensor, vocab_size: int) -> torch.Tensor:
        assert self.noise is not None, "this certification case drew no Gumbel noise"
        rows, slots = self._cells(seeds, positions, self.noise.shape[1])
        return self.noise[rows, slots]  # [..., V], a fresh tensor (callers add to it in place)

    def gumbel_argmax(self, probs: torch.Tensor, seeds: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """The shipped Gumbel-max search (:func:`verispec.rng.gumbel_argmax`, block maxima, pruning,
        the whole-row fallback) run on this table's noise: its uniforms u = exp(-exp(-G))."""
        u = torch.exp(-torch.exp(-self.gumbel(seeds, positions, probs.shape[-1])))  # [n, V]
        return rng.gumbel_argmax(probs, seeds, positions, noise=TableUniforms(u))


class TableUniforms(GumbelUniforms):
    """Gumbel uniforms read from a table ``u [n, V]`` instead of the counter-based generator, in the
    blocks the shipped search reads (ids past V, in the last block, get 0: never chosen)."""

    def __init__(self, u: torch.Tensor) -> None:
        n, V = u.shape
        C = -(-V // GUMBEL_BLOCK)
        self.u = torch.cat([u, u.new_zeros(n, C * GUMBEL_BLOCK - V)], 1)  # [n, C * L]

    def block_max(self, blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.u.view(self.u.shape[0], -1, GUMBEL_BLOCK)[:, blocks].max(-1)  # [n, C] each

    def block(self, rows: torch.Tensor, blocks: torch.Tensor, top: torch.Tensor, at: torch.Tensor) -> torch.Tensor:
        idx = blocks[:, None] * GUMBEL_BLOCK + torch.arange(GUMBEL_BLOCK)  # [m, L]
        return self.u[rows[:, None], idx]

    def rows(self, rows: torch.Tensor, vocab_size: int) -> torch.Tensor:
        return self.u[rows, :vocab_size]


@dataclass(frozen=True)
class Setup:
    """One certification setup: models, sampling transform and verifier mode.

    Attributes:
        target: the target's table (its rows are ``softmax(logits)``; the transform applies).
        draft: the draft's table, or with ``point_mass`` a function giving the proposed token.
        vocab: V.
        k: draft slots per pass (K).
        method: "exact" or "gumbel".
        params: the sampling transform, or ``None`` for raw tables passed as p and q untouched.
        point_mass: the drafter proposes tokens, not distributions (q = one-hot).
        eos: end-of-sequence token or ``None``.
        ragged: each context drafts its own number of tokens in [0, K] (rows of one call differ).
        dtype: the dtype of the logits, hence of p and q as the engine computes them (float32:
            the engine's own). The target's law is then that of the rows the shipped transform
            gives in this dtype, p / sum(p), which target-only sampling draws from.
    """

    target: TableFn
    draft: TableFn | PointFn
    vocab: int
    k: int
    method: str = "exact"
    params: sampling.SamplingParams | None = sampling.SamplingParams()
    point_mass: bool = False
    eos: int | None = None
    ragged: bool = False
    dtype: torch.dtype = torch.float64

    def p_ref(self, ctx: Context) -> tuple[float, ...]:
        """The target's law at ``ctx`` after the transform: by the float64 reference, or for other
        dtypes the shipped transform's row in that dtype, normalised (its law under sampling)."""
        return _ref(self.target(ctx), self.params, self.dtype)

    def q_ref(self, ctx: Context) -> tuple[float, ...]:
        return _ref(self.draft(ctx), self.params, self.dtype)  # type: ignore[arg-type]

    def n_draft(self, ctx: Context) -> int:
        return random.Random(f"ragged {ctx}").randrange(self.k + 1) if self.ragged else self.k


@functools.lru_cache(maxsize=1_000_000)
def _ref(row: tuple[float, ...], params: sampling.SamplingParams | None,
         dtype: torch.dtype = torch.float64) -> tuple[float, ...]:
    if params is None:
        return tuple(row)
    if dtype != torch.float64:
        logits = torch.log(torch.tensor([row], dtype=torch.float64)).to(dtype)
        p = sampling.logits_to_probs(logits, params)[0].double().tolist()
        total = math.fsum(p)
        return tuple(x / total for x in p)
    return reference_probs(row, params.temperature, params.top_k, params.top_p, params.min_p)


@functools.lru_cache(maxsize=1_000_000)
def _residual_ref(p: tuple[float, ...], q: tuple[float, ...]) -> tuple[float, ...]:
    return tuple(residual_distribution(p, q))


def shipped_distribution(setup: Setup, n_tokens: int, prompt: Context = ()) -> tuple[dict[Context, float], int]:
    """Law of the first ``n_tokens`` tokens emitted by the shipped verifier (shorter if EOS ends
    it), and the number of probe mismatches (rows whose output changed inside one cell)."""
    finished: dict[Context, float] = {}
    frontier: dict[Context, float] = {(): 1.0}
    mismatches = 0
    eos = setup.eos
    while frontier:
        seqs = list(frontier)
        laws, bad = _one_pass(setup, [prompt + s for s in seqs])
        mismatches += bad
        nxt: dict[Context, float] = {}
        for seq, law in zip(seqs, laws):
            for block, wb in law.items():
                out = seq + block
                if eos is not None and eos in out:
                    out = out[: out.index(eos) + 1]
                done = len(out) >= n_tokens or (eos is not None and out[-1] == eos)
                out = out[:n_tokens]
                bucket = finished if done else nxt
                bucket[out] = bucket.get(out, 0.0) + frontier[seq] * wb
        frontier = nxt
    return finished, mismatches


# ----------------------------------------------------------------------------------------------
# One draft-and-verify pass over a set of contexts


@dataclass
class _Branches:
    """Draft branches of a pass, one per (context, draft sequence)."""

    ctx: list[int]  # index of the context
    tokens: list[tuple[int, ...]]  # the drafted tokens
    weight: list[float]  # probability of drafting them
    q: list[list[torch.Tensor]]  # per slot: the q the drafter reported ([V] float64), if any


def _one_pass(s: Setup, contexts: list[Context]) -> tuple[list[dict[Context, float]], int]:
    br = _draft_branches(s, contexts)
    K, V = s.k, s.vocab
    full = [contexts[c] + t for c, t in zip(br.ctx, br.tokens)]
    n = torch.tensor([len(t) for t in br.tokens])  # [Bb] ragged draft lengths
    # Target p at slots 0..n (the shipped transform); the unused slots get a junk distribution
    # that the verifier must ignore.
    p_rows = [[full[b][: len(contexts[br.ctx[b]]) + i] for i in range(int(n[b]) + 1)] for b in range(len(full))]
    p, top = _shipped_probs(s, [c for rows in p_rows for c in rows])  # [sum(n + 1), V], [sum(n + 1)]
    P = torch.full((len(full), K + 1, V), 1.0 / V, dtype=s.dtype)
    T = torch.zeros(len(full), K + 1, dtype=torch.int64)  # the engine's argmax of the logits per slot
    at = 0
    for b, rows in enumerate(p_rows):
        P[b, : len(rows)] = p[at : at + len(rows)]
        T[b, : len(rows)] = top[at : at + len(rows)]
        at += len(rows)
    Q = None
    if s.method == "exact" and not s.point_mass and not (s.params is not None and s.params.greedy):
        Q = torch.full((len(full), K, V), 1.0 / V, dtype=s.dtype)
        for b, qs in enumerate(br.q):
            for i, q in enumerate(qs):
                Q[b, i] = q
    D = torch.full((len(full), K), -1, dtype=torch.int64)
    for b, t in enumerate(br.tokens):
        D[b, : len(t)] = torch.tensor(t, dtype=torch.int64)

    branch, weight, tables = (_gumbel_rows if s.method == "gumbel" else _exact_rows)(s, contexts, br)
    br_weight = torch.tensor(br.weight, dtype=torch.float64)
    R = branch.numel()
    greedy_params = s.params is not None and s.params.greedy
    outs = [torch.empty(R, K + 1, dtype=torch.int64) for _ in PROBES]
    argmax_out = torch.empty(R, K + 1, dtype=torch.int64)
    step = max(1, _ROW_BUDGET // ((K + 2) * V))  # rows per call: large V is verified in slices
    for lo in range(0, R, step):
        sl = slice(lo, min(R, lo + step))
        b, r = branch[sl], sl.stop - sl.start
        for k, probe in enumerate(PROBES):
            uniforms, noise = tables(k, sl)
            out = verify_module.verify(
                P[b], None if Q is None else Q[b], D[b], num_draft=n[b],
                seeds=torch.arange(r), positions=torch.full((r,), POS0), method=s.method,
                greedy=greedy_params if probe == "mid" else None, validate=probe == "lo",
                draws=CellDraws(uniforms, noise))
            outs[k][sl] = out.tokens
        if greedy_params:  # what the engine runs for greedy chains: the rule from the argmax alone
            argmax_out[sl] = verify_module.verify_argmax(T[b], D[b], n[b]).tokens
    # Rows of probability below PROBE_FLOOR are not probed: their cells can be narrower than the
    # rounding of p - q (near-equal p and q), so a probe near a cell end may fall across it.
    probed = br_weight[branch] * weight >= PROBE_FLOOR
    differs = (outs[0] != outs[1]).any(1) | (outs[0] != outs[2]).any(1)
    law_of = outs[0]
    if greedy_params:  # the law is verify_argmax's; verify() must agree with it on every row
        differs |= (argmax_out != outs[0]).any(1)
        law_of = argmax_out
    mismatches = int((probed & differs).sum())
    laws: list[dict[Context, float]] = [{} for _ in contexts]
    for b, w, toks in zip(branch.tolist(), weight.tolist(), law_of.tolist()):
        block = tuple(t for t in toks if t >= 0)
        law = laws[br.ctx[b]]
        law[block] = law.get(block, 0.0) + br.weight[b] * w
    return laws, mismatches


_ROW_BUDGET = 1 << 22  # elements of p per verify call: large vocabularies run in slices of rows


def _shipped_probs(s: Setup, ctxs: list[Context]) -> tuple[torch.Tensor, torch.Tensor]:
    """``[len(ctxs), V]`` the target's p at each context as the engine computes it: the shipped
    :func:`verispec.logits_to_probs` of the logits ``log(table row)`` in ``s.dtype`` (raw rows when
    ``params`` is None), and ``[len(ctxs)]`` the engine's argmax of those logits (its greedy path)."""
    unique = list(dict.fromkeys(ctxs))  # prefixes repeat across branches: transform each once
    rows = torch.tensor([s.target(c) for c in unique], dtype=torch.float64).reshape(len(unique), s.vocab)
    logits = torch.log(rows).to(s.dtype)
    top = engine_step._argmax_tokens(logits[:, None], s.vocab)[:, 0]
    rows = sampling.logits_to_probs(logits, s.params) if s.params is not None else rows.to(s.dtype)
    index = torch.tensor([{c: i for i, c in enumerate(unique)}[c] for c in ctxs], dtype=torch.int64)
    return rows[index], top[index]


def _draft_branches(s: Setup, contexts: list[Context]) -> _Branches:
    """Every draft sequence each context can get, with its probability and reported q."""
    br = _Branches(list(range(len(contexts))), [()] * len(contexts), [1.0] * len(contexts),
                   [[] for _ in contexts])
    shipped = (s.method == "exact" and not s.point_mass and s.params is not None)
    for i in range(s.k):
        grow = [b for b in range(len(br.ctx)) if len(br.tokens[b]) == i < s.n_draft(contexts[br.ctx[b]])]
        if not grow:
            break
        ctxs = [contexts[br.ctx[b]] + br.tokens[b] for b in grow]
        if s.point_mass:
            new = [(b, s.draft(c), 1.0, None) for b, c in zip(grow, ctxs)]  # type: ignore[arg-type]
        elif s.method == "gumbel":
            # Gumbel drafts are tokens and the output does not depend on them: one draft per context
            # (the draft table's most likely token), with every target token enumerated against it,
            # covers every accept/stop path of the verifier.
            new = [(b, _top_token(s.q_ref(c)), 1.0, None) for b, c in zip(grow, ctxs)]
        elif shipped:
            new = _sampled_drafts(s, grow, ctxs, i)
        else:  # raw tables: every token, weighted by q
            new = []
            for b, c in zip(grow, ctxs):
                q = s.q_ref(c)
                total = math.fsum(q)
                qt = torch.tensor(q, dtype=torch.float64).to(s.dtype)
                new += [(b, x, qx / total, qt) for x, qx in enumerate(q) if qx > 0]
        growing = set(grow)
        keep = [b for b in range(len(br.ctx)) if b not in growing]
        nb = _Branches([br.ctx[b] for b in keep], [br.tokens[b] for b in keep], [br.weight[b] for b in keep],
                       [br.q[b] for b in keep])
        for b, x, w, q in new:
            nb.ctx.append(br.ctx[b])
            nb.tokens.append(br.tokens[b] + (int(x),))
            nb.weight.append(br.weight[b] * w)
            nb.q.append(br.q[b] + ([] if q is None else [q]))
        br = nb
    return br


def _top_token(q: tuple[float, ...]) -> int:
    """The most likely token of ``q`` (the lowest id on ties)."""
    return max(range(len(q)), key=lambda x: (q[x], -x))


def _sampled_drafts(s: Setup, grow: list[int], ctxs: list[Context], slot: int) -> list[tuple]:
    """The shipped drafter step (:func:`verispec.drafters.sample_draft`) run inside every cell of its
    draft uniform: ``(branch, token, cell probability, reported q)`` per cell. Greedy drafts are one
    cell (q is a point mass; the engine passes none)."""
    assert s.params is not None
    logits = torch.log(torch.tensor([s.draft(c) for c in ctxs], dtype=torch.float64)).to(s.dtype)  # [m, V]
    if s.params.greedy:
        d, _ = drafters.sample_draft(logits, s.params, "exact", torch.arange(len(ctxs)),
                                     torch.full((len(ctxs),), POS0 + slot))
        return [(b, x, 1.0, None) for b, x in zip(grow, d.tolist())]
    owner, lows, weight = [], [], []  # per cell of q: its context, where it starts, its width
    for j, c in enumerate(ctxs):
        lo = 0.0
        for qx in s.q_ref(c):
            if qx > 0:
                owner.append(j), lows.append(lo), weight.append(qx)
            lo += qx
    rows = torch.tensor(owner)
    widths = torch.tensor(weight, dtype=torch.float64)
    tokens = []
    for point in (0.5, DELTA, 1 - DELTA):
        table = torch.full((len(owner), s.k + 2), 0.5, dtype=torch.float64)
        table[:, slot] = torch.tensor(lows, dtype=torch.float64) + point * widths
        d, q = drafters.sample_draft(logits[rows], s.params, "exact", torch.arange(len(owner)),
                                     torch.full((len(owner),), POS0 + slot), CellDraws({STREAM_DRAFT: table}))
        tokens.append(d)  # q, the reported distribution, does not depend on the draws
    # The drafter's token must be constant on each of its cells, like the verifier's output (cells
    # narrower than PROBE_FLOOR are evaluated at their midpoint only: rounding can move their ends).
    probed = widths >= PROBE_FLOOR
    if not bool(((tokens[0] == tokens[1]) & (tokens[0] == tokens[2]) | ~probed).all()):
        raise CertificationError("the shipped draft sampler's token changes inside one CDF cell of q")
    return [(grow[o], x, w, q[r]) for r, (o, x, w) in enumerate(zip(owner, tokens[0].tolist(), weight))]


class CertificationError(AssertionError):
    """The shipped code is not a piecewise-constant function of its draws on the reference cells."""


def _ref_rows(s: Setup, contexts: list[Context], br: _Branches) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Reference p ``[Bb, K+1, V]``, q ``[Bb, K, V]`` (one-hot for point masses and greedy drafts)
    and drafts ``[Bb, K]`` (0 past n) of every branch, in float64. Rows are as the verifier gets
    them: raw tables (``params=None``) keep their own sums."""
    K, V = s.k, s.vocab
    uniform = [1.0 / V] * V  # unused slots: any distribution (the verifier must not read them)
    dense_q = not s.point_mass and not (s.params is not None and s.params.greedy)
    p_rows, q_rows, d_rows = [], [], []
    for c, toks in zip(br.ctx, br.tokens):
        ctx, n = contexts[c], len(toks)
        p_rows.append([list(s.p_ref(ctx + toks[:i])) for i in range(n + 1)] + [uniform] * (K - n))
        if dense_q:
            q_rows.append([list(s.q_ref(ctx + toks[:i])) for i in range(n)] + [uniform] * (K - n))
        else:
            q_rows.append([[float(x == t) for x in range(V)] for t in toks] + [uniform] * (K - n))
        d_rows.append(list(toks) + [0] * (K - n))
    p = torch.tensor(p_rows, dtype=torch.float64).reshape(len(br.ctx), K + 1, V)
    q = torch.tensor(q_rows, dtype=torch.float64).reshape(len(br.ctx), K, V)
    d = torch.tensor(d_rows, dtype=torch.int64).reshape(len(br.ctx), K)
    return p, q, d


def _exact_rows(s: Setup, contexts: list[Context], br: _Branches):
    """Rows (branch, accept pattern j, emitted token x) with their probability and draw tables.

    Pattern j: slots < j accepted, slot j rejected (j < n) or every draft accepted (j = n); the
    emitted token x then comes from the residual at j or the bonus p at n.
    """
    K, V = s.k, s.vocab
    p, q, d = _ref_rows(s, contexts, br)
    p, q = p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)  # rows are read as p / sum(p)
    n = torch.tensor([len(t) for t in br.tokens])
    Bb = len(br.ctx)
    slots = torch.arange(K)
    drafted = slots < n[:, None]  # [Bb, K]
    p_d = p[:, :K].gather(-1, d[..., None]).squeeze(-1)
    q_d = q.gather(-1, d[..., None]).squeeze(-1)
    a = torch.where(drafted, torch.minimum(torch.ones_like(p_d), p_d / q_d.clamp_min(1e-300)), 1.0)  # [Bb, K]
    # P(pattern j) = a_0 ... a_{j-1} (1 - a_j), and a_0 ... a_{n-1} for j = n.
    before = torch.cat([torch.ones(Bb, 1, dtype=torch.float64), a.cumprod(1)], 1)  # [Bb, K+1]
    reject = torch.cat([1 - a, torch.ones(Bb, 1, dtype=torch.float64)], 1)  # [Bb, K+1]
    j_all = torch.arange(K + 1)
    pattern = before * torch.where(j_all < n[:, None], reject, 1.0) * (j_all <= n[:, None])  # [Bb, K+1]
    emit = torch.zeros(Bb, K + 1, V, dtype=torch.float64)  # law of the emitted token per pattern
    for b in range(Bb):
        nb = int(n[b])
        for j in range(nb + 1):
            if pattern[b, j] > 0:
                emit[b, j] = (p[b, nb] / p[b, nb].sum() if j == nb else
                              torch.tensor(_residual_ref(tuple(p[b, j].tolist()), tuple(q[b, j].tolist())),
                                           dtype=torch.float64))
    w = pattern[..., None] * emit  # [Bb, K+1, V]
    branch, j, x = (w > 0).nonzero(as_tuple=True)
    weight = w[branch, j, x]
    R = branch.numel()
    cdf_hi = emit.cumsum(-1)[branch, j, x]
    width = emit[branch, j, x]
    cdf_lo = cdf_hi - width
    a_r = a[branch]  # [R, K]
    slots = torch.arange(K)[None]

    def tables(probe: int, rows: slice):
        """Draw tables of rows ``rows`` for probe mid, low or high; draws the rule must ignore get the
        same point, far apart between probes."""
        point = (0.5, DELTA, 1 - DELTA)[probe]
        a_s, j_s, m = a_r[rows], j[rows], rows.stop - rows.start
        acc = torch.full((m, K + 2), point, dtype=torch.float64)
        accept_pt = a_s * point  # inside [0, a)
        reject_pt = a_s + (1 - a_s) * point  # inside [a, 1)
        acc[:, :K] = torch.where(slots < j_s[:, None], accept_pt, torch.where(slots == j_s[:, None], reject_pt, point))
        em = torch.full((m, K + 2), point, dtype=torch.float64)
        em[torch.arange(m), j_s] = cdf_lo[rows] + point * width[rows]
        return {STREAM_ACCEPT: acc, STREAM_EMIT: em}, None

    return branch, weight, tables


def _gumbel_rows(s: Setup, contexts: list[Context], br: _Branches):
    """Rows (branch, first mismatch j, target token t) with probability and noise tables.

    The target's token at slot i is t_i = argmax(log p_i + G_i); its law is the Gumbel-max law of
    p_i (numerical integration, :func:`gumbel_max_laws`). Pattern j: t_i = d_i for i < j, then
    t_j != d_j (j < n) or any t_j (the bonus slot j = n). The noise realising t at a slot is random
    Gumbel noise with t's raised to lead the best other token by :data:`_MARGIN` (per probe); the
    other slots get random noise. The shipped search (:func:`verispec.rng.gumbel_argmax`) runs on it.
    """
    K, V = s.k, s.vocab
    p, _, d = _ref_rows(s, contexts, br)
    n = [len(t) for t in br.tokens]
    g = gumbel_max_laws(p.reshape(-1, V).numpy()).reshape(len(n), K + 1, V).tolist()  # [Bb][K+1][V]
    branch, pat, tok, weight = [], [], [], []
    for b in range(len(n)):
        prefix = 1.0
        for j in range(n[b] + 1):
            for t in range(V):
                if (j < n[b] and t == int(d[b, j])) or g[b][j][t] <= 0:
                    continue
                branch.append(b), pat.append(j), tok.append(t), weight.append(prefix * g[b][j][t])
            if j < n[b]:
                prefix *= g[b][j][int(d[b, j])]
    branch_t, j_t, t_t = torch.tensor(branch), torch.tensor(pat), torch.tensor(tok)
    R = len(branch)
    logp = torch.log(p)  # [Bb, K+1, V]; -inf where p = 0
    # target token per slot: d_i before j, t at j
    want = torch.cat([d[branch_t], torch.zeros(R, 1, dtype=torch.int64)], 1)  # [R, K+1]
    want[torch.arange(R), j_t] = t_t
    used = torch.arange(K + 1)[None] <= j_t[:, None]  # [R, K+1]

    def tables(probe: int, rows: slice):
        """Noise of rows ``rows`` for a probe: random Gumbel noise, except that at every used slot the
        wanted token's noise is raised to beat the best other token's log p + G by the probe's margin
        (a point inside the cell "this token wins", near its boundary for the low probe)."""
        m = rows.stop - rows.start
        gen = torch.Generator().manual_seed(1234 + 7919 * probe + rows.start)
        noise = -torch.log(-torch.log(torch.rand(m, K + 2, V, generator=gen, dtype=torch.float64).clamp_min(1e-300)))
        lp, w = logp[branch_t[rows]], want[rows, :, None]  # [m, K+1, V], [m, K+1, 1]
        others = (lp + noise[:, : K + 1]).scatter_(-1, w, -math.inf).amax(-1, keepdim=True)  # [m, K+1, 1]
        g_w = torch.where(torch.isfinite(others), others - lp.gather(-1, w) + _MARGIN[PROBES[probe]],
                          noise[:, : K + 1].gather(-1, w))
        lead = noise[:, : K + 1].scatter(-1, w, g_w)
        # One shift per slot (the argmax of log p + G does not move) keeps every G of a token with mass
        # at least -3, inside the range of the real noise (u >= 2**-53: G >= -3.6): far below it
        # u = exp(-exp(-G)) underflows to 0 in the search, which works with u.
        low = torch.where(torch.isfinite(lp), lead, math.inf).amin(-1, keepdim=True)  # [m, K+1, 1]
        lead = lead + (-3.0 - low).clamp(0.0, 40.0)
        noise[:, : K + 1] = torch.where(used[rows, :, None], lead, noise[:, : K + 1])
        uniforms = {STREAM_ACCEPT: torch.full((m, K + 2), 0.5, dtype=torch.float64)}
        uniforms[STREAM_EMIT] = uniforms[STREAM_ACCEPT]
        return uniforms, noise

    return branch_t, torch.tensor(weight, dtype=torch.float64), tables
