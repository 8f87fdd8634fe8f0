"""Certification of tree and block verification: the exact law of the shipped code, by its cells.

Like :mod:`verispec.certify.cells` for chains: the outcome of the real
:func:`verispec.verify.verify_draft` (trees) and ``verify(method="block")`` (chains) is a piecewise
constant function of its draws, so on table models its law is a finite sum. For every context of a
case (each with its own tree shape: ragged trees in one batch) this module enumerates

* every draft tree the drafter can propose, with its probability: i.i.d. children (each from the
  parent's q), children without replacement (q renormalised without the earlier siblings), or
  deterministic candidates (point masses: a lookup-style choice, or the top-k of q);
* every path of the verifier through that tree with the float64 reference primitives
  (:func:`~verispec.certify.reference.residual_distribution`, the Gumbel-max law): the accept /
  reject cell of each sibling tested, the node where the walk stops and the emitted token's CDF
  cell (block: the tau chosen by the eta cells, then the emitted token's cell);

and calls the shipped verifier once per probe (cells' midpoints, then DELTA inside either end, with
validation and greedy detection switched) on all of them in one batch, with :class:`CellDraws`
returning each cell's point for every (row, position, stream) the code asks. Rows whose output
moves inside a cell are probe mismatches. The law of one pass from each context, completed by the
target's own sampling up to ``depth + 1`` tokens, must be within :data:`TV_TOLERANCE` of the
target's law from that context: if every pass from every context composes with target sampling to
the target's law, passes composed with passes do too. Gumbel cases also run the shipped code on the
real counter-based noise against :func:`reference_verify_tree` on random trees (pathwise).
"""

from __future__ import annotations

import functools
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import importlib

import numpy as np
import torch

from .. import sampling
from ..draft import Draft
from ..rng import STREAM_BLOCK, STREAM_EMIT, accept_stream
from .cells import DELTA, POS0, PROBE_FLOOR, PROBES, CellDraws
from .grid import TV_TOLERANCE
from .reference import (block_weights, gumbel_max_laws, reference_probs, reference_verify_tree, residual_distribution,
                        total_variation)
from .tables import Context, TableModel, target_distribution

tree_module = importlib.import_module("verispec.verify.tree")  # the tree rules (mutants patch them here)
verify_module = importlib.import_module("verispec.verify.chain")  # verify(method="block")

__all__ = ["TREE_MODES", "SHAPES", "TreeCase", "TreeResult", "tree_grid", "run_tree_case"]

#: The verifier modes certified on trees ("block": block verification of chains).
TREE_MODES = ("iid", "without_replacement", "point", "top_k", "greedy", "gumbel", "block")

#: Tree shapes (parents, topological order). Depth up to 3, branching up to 3.
SHAPES: dict[str, tuple[int, ...]] = {
    "fan3": (-1, -1, -1),  # three children of the root
    "chain3": (-1, 0, 1),  # a chain of three
    "fork": (-1, -1, 0, 0),  # two children of the root, two under the first
    "broom": (-1, -1, -1, 0, 3),  # three under the root, one under the first, one under that: depth 3
    "bush": (-1, -1, 0, 0, 0, 2),  # two under the root, three under the first, one under the third
    "pair": (-1, -1),
    "leaf": (-1,),
}

_PROMPTS: tuple[Context, ...] = ((), (1,), (0, 1), (1, 0, 1))


@dataclass(frozen=True)
class TreeCase:
    """One case: a mode, V, the shapes given to the contexts (one each, cycling: ragged trees in
    one batch), and for "block" the chain lengths K (ragged: each context drafts 0..K)."""

    mode: str
    vocab: int
    shapes: tuple[str, ...] = ("fan3", "fork")
    edge: str = "random"  # or "p==q" (the draft is the target: zero residuals everywhere)
    k: int = 3  # block: draft length
    seed: int = 0
    dtype: str = "float64"  # of the logits, hence of p and q ("float32": the engine's)


@dataclass(frozen=True)
class TreeResult:
    case: TreeCase
    tv: float  # worst total variation over the contexts
    probe_mismatches: int
    pathwise_mismatches: int | None  # gumbel: real noise, shipped vs reference
    rows: int  # cell combinations verified
    seconds: float

    @property
    def passed(self) -> bool:
        return self.tv <= TV_TOLERANCE and not self.probe_mismatches and not self.pathwise_mismatches


def tree_grid(quick: bool) -> list[TreeCase]:
    """Every mode on ragged batches of shapes up to depth 3 and branching 3, V 2-4 (quick: fewer)."""
    cases = []
    vocabs = (2, 3) if quick else (2, 3, 4)
    for mode in TREE_MODES:
        for V in vocabs:
            if mode == "block":
                for k in ((2, 3) if quick else (1, 2, 3)):
                    for edge in ("random", "p==q", "point"):  # point: lookup-style drafts, q = one-hot
                        cases.append(TreeCase(mode, V, (), edge, k))
                continue
            distinct = mode in ("without_replacement", "top_k", "greedy", "gumbel")  # children distinct: <= V of them
            small = ("pair", "chain3", "fork", "leaf") if V == 2 and distinct else ()
            big = ("fan3", "broom", "chain3", "bush") if not quick or V == 2 else ("fan3", "fork", "chain3", "leaf")
            shapes = small or big
            if quick and V == 3 and mode in ("iid", "without_replacement"):
                shapes = ("broom", "fork", "chain3", "fan3")
            edges = ("random", "p==q") if mode in ("iid", "without_replacement") else ("random",)
            for edge in edges:
                cases.append(TreeCase(mode, V, shapes, edge))
    # float32 p and q, as the engine computes them, and bfloat16 (rows off by ~1e-3, where a walk that
    # did not read them as p / sum(p) moves cell ends by more than the probes' DELTA)
    for dtype in ("float32", "bfloat16"):
        for mode in (("iid", "block") if quick else ("iid", "without_replacement", "point", "gumbel", "block")):
            cases.append(TreeCase(mode, 3, ("broom", "fork", "chain3", "fan3") if mode != "block" else (), "random",
                                  dtype=dtype))
    return cases


# ----------------------------------------------------------------------------------------------
# The models and the rows the verifier reads


@dataclass(frozen=True)
class _Models:
    target: TableModel
    draft: TableModel
    params: sampling.SamplingParams
    V: int
    dtype: torch.dtype = torch.float64


def _models(case: TreeCase) -> _Models:
    V, s = case.vocab, case.seed
    target = TableModel(V, s, "random", sharpness=2.0)
    draft = TableModel(V, s, "copy", base=target) if case.edge == "p==q" else TableModel(V, s + 1, "random",
                                                                                        sharpness=2.0)
    T = 0.0 if case.mode == "greedy" else 1.0
    return _Models(target, draft, sampling.SamplingParams(temperature=T), V, getattr(torch, case.dtype))


@functools.lru_cache(maxsize=200_000)
def _shipped_row(table: TableModel, ctx: Context, params: sampling.SamplingParams,
                 dtype: torch.dtype = torch.float64) -> tuple[float, ...]:
    """The row the engine computes: the shipped transform of log(table row) in ``dtype`` (its values,
    exactly, as float64)."""
    logits = torch.log(torch.tensor([table(ctx)], dtype=torch.float64)).to(dtype)
    return tuple(sampling.logits_to_probs(logits, params)[0].double().tolist())


def _p_ref(m: _Models, ctx: Context) -> tuple[float, ...]:
    """The target's law: the float64 reference transform, or for another dtype the shipped row in
    that dtype read as p / sum(p) (what target-only sampling draws from)."""
    if m.dtype == torch.float64:
        return reference_probs(m.target(ctx), m.params.temperature)
    return tuple(_normal(_shipped_row(m.target, ctx, m.params, m.dtype)))


def _normal(row: Sequence[float]) -> list[float]:
    total = math.fsum(row)
    return [x / total for x in row]


def _top(row: Sequence[float], k: int) -> int:
    """The k-th most likely token of ``row`` (ties: lowest id first)."""
    return sorted(range(len(row)), key=lambda x: (-row[x], x))[k]


# ----------------------------------------------------------------------------------------------
# Draft trees


def _draft_trees(case: TreeCase, m: _Models, ctx: Context, parents: tuple[int, ...]
                 ) -> list[tuple[tuple[int, ...], float]]:
    """Every token assignment of the tree's nodes the drafter can propose, with its probability."""
    N, V = len(parents), m.V
    trees: list[tuple[tuple[int, ...], float]] = [((), 1.0)]
    for i in range(N):
        nxt = []
        for toks, w in trees:
            here = ctx + _path_tokens(parents, toks, parents[i])
            rank = sum(1 for j in range(i) if parents[j] == parents[i])
            earlier = [toks[j] for j in range(i) if parents[j] == parents[i]]
            if case.mode in ("iid", "without_replacement"):
                q = _normal(_shipped_row(m.draft, here, m.params, m.dtype))
                free = 1.0 - math.fsum(q[t] for t in earlier) if case.mode == "without_replacement" else 1.0
                for t in range(V):
                    if q[t] > 0 and not (case.mode == "without_replacement" and t in earlier):
                        nxt.append((toks + (t,), w * q[t] / free))
            elif case.mode == "point":  # a lookup-style candidate: any token, repeats allowed
                nxt.append((toks + (random.Random(f"point {case.seed} {here} {rank}").randrange(V),), w))
            else:  # top_k, greedy, gumbel: the rank-th most likely token of the draft table
                nxt.append((toks + (_top(m.draft(here), rank),), w))
        trees = nxt
    return trees


def _path_tokens(parents: tuple[int, ...], toks: tuple[int, ...], node: int) -> tuple[int, ...]:
    """The tokens from the root down to ``node`` (inclusive; () for the root)."""
    out = []
    while node >= 0:
        out.append(toks[node])
        node = parents[node]
    return tuple(reversed(out))


# ----------------------------------------------------------------------------------------------
# Outcomes: the verifier's paths through one tree, with their cells


@dataclass
class _Outcome:
    weight: float
    emitted: tuple[int, ...]
    accept: dict[tuple[int, int], tuple[float, bool]]  # (depth, rank) -> (a, accepted)
    emit: tuple[int, float, float] | None  # (depth, cdf_lo, width)
    wanted: dict[int, int]  # gumbel: depth -> the token that must win


def _tree_outcomes(case: TreeCase, P: list[list[float]], Q: list[list[float]] | None, parents: tuple[int, ...],
                   toks: tuple[int, ...]) -> list[_Outcome]:
    """Every path of the rule through one tree (``P[s]``: normalised p at slot s, ``Q[i]``: q of node i)."""
    N, V = len(parents), len(P[0])
    kids: dict[int, list[int]] = {}
    for i, par in enumerate(parents):
        kids.setdefault(par, []).append(i)
    out: list[_Outcome] = []

    def walk(node: int, depth: int, w: float, accept: dict, wanted: dict, emitted: tuple[int, ...]) -> None:
        p, children = P[node + 1], kids.get(node, [])
        if case.mode in ("greedy", "gumbel"):
            law = [float(x == _top(p, 0)) for x in range(V)] if case.mode == "greedy" else _gumbel_law(p)
            for t in range(V):
                if law[t] <= 0:
                    continue
                c = next((c for c in children if toks[c] == t), None)
                if c is None:
                    out.append(_Outcome(w * law[t], emitted + (t,), accept, None, {**wanted, depth: t}))
                else:
                    walk(c, depth + 1, w * law[t], accept, {**wanted, depth: t}, emitted + (t,))
            return
        law = p
        q = None if Q is None or not children else Q[children[0]]
        for r, c in enumerate(children):
            d = toks[c]
            qc = [float(x == d) for x in range(V)] if q is None else q
            a = min(1.0, law[d] / qc[d])
            if a > 0:
                walk(c, depth + 1, w * a, {**accept, (depth, r): (a, True)}, wanted, emitted + (d,))
            w *= 1 - a
            if w <= 0:
                return
            accept = {**accept, (depth, r): (a, False)}
            law = residual_distribution(law, qc)
            if case.mode == "without_replacement" and q is not None:
                q = _normal_or_zero([0.0 if x == d else qx for x, qx in enumerate(q)])
        lo = 0.0
        for x in range(V):
            if law[x] > 0:
                out.append(_Outcome(w * law[x], emitted + (x,), accept, (depth, lo, law[x]), wanted))
            lo += law[x]

    walk(-1, 0, 1.0, {}, {}, ())
    return out


def _normal_or_zero(row: list[float]) -> list[float]:
    total = math.fsum(row)
    return [x / total for x in row] if total > 0 else row


@functools.lru_cache(maxsize=100_000)
def _gumbel_law_cached(p: tuple[float, ...]) -> tuple[float, ...]:
    return tuple(gumbel_max_laws(np.array([p], dtype=np.float64))[0].tolist())


def _gumbel_law(p: list[float]) -> tuple[float, ...]:
    return _gumbel_law_cached(tuple(p))


def _block_outcomes(P: list[list[float]], Q: list[list[float]], x: tuple[int, ...]
                    ) -> list[tuple[float, tuple, dict, tuple]]:
    """Every (tau, emitted token) of block verification on one chain: (weight, emitted, eta cells
    {i: (h_i, passes)}, (slot, cdf_lo, width))."""
    n, V = len(x), len(P[0])
    w, h = block_weights(P, Q, x)
    out = []
    for tau in range(n + 1):
        pt = h[tau] * math.prod(1 - h[j] for j in range(tau + 1, n + 1))
        if pt <= 0:
            continue
        cells = {j: (h[j], False) for j in range(tau + 1, n + 1)}
        if tau:
            cells[tau] = (h[tau], True)
        if tau == n:
            law = P[n]
        else:
            law = [max(0.0, w[tau] * P[tau][y] - Q[tau][y]) for y in range(V)]
            law = _normal(law) if math.fsum(law) > 0 else P[tau]
        lo = 0.0
        for y in range(V):
            if law[y] > 0:
                out.append((pt * law[y], x[:tau] + (y,), cells, (tau, lo, law[y])))
            lo += law[y]
    return out


# ----------------------------------------------------------------------------------------------
# One case


def run_tree_case(case: TreeCase) -> TreeResult:
    """The shipped code's law of one pass from each context against the target's law."""
    t0 = time.perf_counter()
    m = _models(case)
    prompts = _PROMPTS
    rows = _block_rows(case, m, prompts) if case.mode == "block" else _tree_rows(case, m, prompts)
    laws, probes, n_rows = _run_rows(case, m, rows, len(prompts))
    tv = 0.0
    for ctx, law in zip(prompts, laws):
        n_tokens = (case.k if case.mode == "block" else max(_depth(SHAPES[s]) for s in case.shapes)) + 1
        tv = max(tv, total_variation(_complete(m, ctx, law, n_tokens), target_distribution(
            functools.partial(_p_ref, m), n_tokens, prompt=ctx)))
    pathwise = _gumbel_pathwise(case) if case.mode == "gumbel" else None
    return TreeResult(case, tv, probes, pathwise, n_rows, time.perf_counter() - t0)


def _depth(parents: tuple[int, ...]) -> int:
    depth = [0] * len(parents)
    for i, par in enumerate(parents):
        depth[i] = 1 + (depth[par] if par >= 0 else 0)
    return max(depth, default=0)


def _complete(m: _Models, ctx: Context, law: dict[Context, float], n_tokens: int) -> dict[Context, float]:
    """The law of the first ``n_tokens`` tokens: one pass (``law``) then target-only sampling."""
    out: dict[Context, float] = {}
    for block, w in law.items():
        block = block[:n_tokens]
        rest = target_distribution(functools.partial(_p_ref, m), n_tokens - len(block), prompt=ctx + block)
        for tail, wt in rest.items():
            out[block + tail] = out.get(block + tail, 0.0) + w * wt
    return out


@dataclass
class _Rows:
    """Cell combinations to verify: per row its context, draft (tokens, parents, q rows), p rows,
    weight, the cells of its draws, and what the rule emits there."""

    ctx: list[int]
    parents: list[tuple[int, ...]]
    tokens: list[tuple[int, ...]]
    p: list[list[list[float]]]  # rows handed to the verifier, per slot
    q: list[list[list[float]] | None]
    weight: list[float]
    cells: list  # per row: _Outcome (trees) or (eta cells, emit) (block)


def _tree_rows(case: TreeCase, m: _Models, prompts: Sequence[Context]) -> _Rows:
    rows = _Rows([], [], [], [], [], [], [])
    for c, ctx in enumerate(prompts):
        shape = case.shapes[c % len(case.shapes)]
        parents = SHAPES[shape]
        for toks, wt in _draft_trees(case, m, ctx, parents):
            slots = [()] + [_path_tokens(parents, toks, i) for i in range(len(parents))]
            P = [list(_shipped_row(m.target, ctx + s, m.params, m.dtype)) for s in slots]
            Q = None
            if case.mode in ("iid", "without_replacement"):
                Q = [list(_shipped_row(m.draft, ctx + _path_tokens(parents, toks, par), m.params, m.dtype))
                     for par in parents]
            for o in _tree_outcomes(case, [_normal(r) for r in P], None if Q is None else [_normal(r) for r in Q],
                                    parents, toks):
                if o.weight <= 0:
                    continue
                rows.ctx.append(c), rows.parents.append(parents), rows.tokens.append(toks)
                rows.p.append(P), rows.q.append(Q), rows.weight.append(wt * o.weight), rows.cells.append(o)
    return rows


def _block_rows(case: TreeCase, m: _Models, prompts: Sequence[Context]) -> _Rows:
    rows = _Rows([], [], [], [], [], [], [])
    for c, ctx in enumerate(prompts):
        n = random.Random(f"block {case.seed} {ctx}").randrange(case.k + 1) if c else case.k  # ragged
        chains: list[tuple[tuple[int, ...], float]] = [((), 1.0)]
        for _ in range(n):
            if case.edge == "point":  # a deterministic candidate: the draft table's most likely token
                chains = [(t + (_top(m.draft(ctx + t), 0),), w) for t, w in chains]
                continue
            chains = [(t + (x,), w * qx) for t, w in chains
                      for x, qx in enumerate(_normal(_shipped_row(m.draft, ctx + t, m.params, m.dtype))) if qx > 0]
        for toks, wt in chains:
            P = [list(_shipped_row(m.target, ctx + toks[:i], m.params, m.dtype)) for i in range(n + 1)]
            Q = ([[float(y == toks[i]) for y in range(m.V)] for i in range(n)] if case.edge == "point" else
                 [list(_shipped_row(m.draft, ctx + toks[:i], m.params, m.dtype)) for i in range(n)])
            for w, emitted, eta, emit in _block_outcomes([_normal(r) for r in P], [_normal(r) for r in Q], toks):
                rows.ctx.append(c), rows.parents.append(tuple(range(-1, n - 1))), rows.tokens.append(toks)
                rows.p.append(P), rows.q.append(Q), rows.weight.append(wt * w)
                rows.cells.append((eta, emit, emitted))
    return rows


def _run_rows(case: TreeCase, m: _Models, rows: _Rows, n_ctx: int) -> tuple[list[dict], int, int]:
    R, V = len(rows.weight), m.V
    N = max(max((len(t) for t in rows.tokens), default=0), 1)
    S = N + 2  # draw columns: positions POS0 .. POS0 + N, and a junk one
    P = torch.full((R, N + 1, V), 1.0 / V, dtype=m.dtype)
    Q = torch.full((R, N, V), 1.0 / V, dtype=m.dtype)
    D = torch.zeros(R, N, dtype=torch.int64)
    par = torch.full((R, N), -1, dtype=torch.int64)
    n = torch.tensor([len(t) for t in rows.tokens], dtype=torch.int64)
    for r in range(R):
        k = len(rows.tokens[r])
        P[r, : k + 1] = torch.tensor(rows.p[r], dtype=torch.float64).to(m.dtype)  # exact: values of m.dtype
        if rows.q[r] is not None and k:
            Q[r, :k] = torch.tensor(rows.q[r], dtype=torch.float64).to(m.dtype)
        if k:
            D[r, :k] = torch.tensor(rows.tokens[r])
            par[r, :k] = torch.tensor(rows.parents[r])
    weight = torch.tensor(rows.weight, dtype=torch.float64)
    outs = []
    for k, probe in enumerate(PROBES):
        point = (0.5, DELTA, 1 - DELTA)[k]
        uniforms, noise = _tables(case, rows, R, S, V, point, k)
        draws = CellDraws(uniforms, noise)
        kw = dict(seeds=torch.arange(R), positions=torch.full((R,), POS0), draws=draws, validate=probe == "lo")
        if case.mode == "block":
            out = verify_module.verify(P, None if case.edge == "point" else Q, D, num_draft=n, method="block", **kw)
        else:
            mode = case.mode
            child_draw = {"iid": "iid", "without_replacement": "without_replacement"}.get(mode, "top_k")
            draft = Draft(D, Q if mode in ("iid", "without_replacement") else None, n, parents=par,
                          child_draw=child_draw)
            out = tree_module.verify_draft(P, draft, method="gumbel" if mode == "gumbel" else "exact",
                                           greedy=(mode == "greedy") if probe == "mid" else None, **kw)
        outs.append(out.tokens)
    probed = weight >= PROBE_FLOOR
    differs = (outs[0] != outs[1]).any(1) | (outs[0] != outs[2]).any(1)
    mismatches = int((probed & differs).sum())
    laws: list[dict] = [{} for _ in range(n_ctx)]
    for r, toks in enumerate(outs[0].tolist()):
        block = tuple(t for t in toks if t >= 0)
        law = laws[rows.ctx[r]]
        law[block] = law.get(block, 0.0) + rows.weight[r]
    return laws, mismatches, R


_MARGIN = (1.0, 1e-4, 20.0)  # Gumbel probes: the wanted token's lead over the best other one


def _tables(case: TreeCase, rows: _Rows, R: int, S: int, V: int, point: float, probe: int):
    """The draw tables of one probe: every stream the code may ask for, [R, S] each (slot = position
    - POS0); cells' points where the rule reads a draw, ``point`` elsewhere."""
    M = 3  # sibling ranks up to 3
    uniforms = {accept_stream(r): torch.full((R, S), point, dtype=torch.float64) for r in range(M + 1)}
    uniforms[STREAM_EMIT] = torch.full((R, S), point, dtype=torch.float64)
    for i in range(1, S + 1):
        uniforms[STREAM_BLOCK + i] = torch.full((R, S), point, dtype=torch.float64)
    noise = None
    if case.mode == "block":
        for r, (eta, emit, _) in enumerate(rows.cells):
            for i, (h, passes) in eta.items():
                uniforms[STREAM_BLOCK + i][r, 0] = h * point if passes else h + (1 - h) * point
            slot, lo, width = emit
            uniforms[STREAM_EMIT][r, slot] = lo + point * width
        return uniforms, None
    if case.mode == "gumbel":
        gen = torch.Generator().manual_seed(4321 + probe)
        noise = -torch.log(-torch.log(torch.rand(R, S, V, generator=gen, dtype=torch.float64).clamp_min(1e-300)))
        for r, o in enumerate(rows.cells):
            path_slot = _path_slots(rows.parents[r], rows.tokens[r], o)
            for depth, t in o.wanted.items():
                p = rows.p[r][path_slot[depth]]
                lp = [math.log(x) if x > 0 else -math.inf for x in p]
                others = max((lp[y] + float(noise[r, depth, y]) for y in range(V) if y != t), default=-math.inf)
                g = others - lp[t] + _MARGIN[probe] if math.isfinite(others) else float(noise[r, depth, t])
                noise[r, depth, t] = g
                low = min(float(noise[r, depth, y]) for y in range(V) if p[y] > 0)
                noise[r, depth] += max(0.0, min(40.0, -3.0 - low))  # keep G >= -3 (the search works with u)
        return uniforms, noise
    for r, o in enumerate(rows.cells):
        for (depth, rank), (a, accepted) in o.accept.items():
            uniforms[accept_stream(rank)][r, depth] = a * point if accepted else a + (1 - a) * point
        if o.emit is not None:
            depth, lo, width = o.emit
            uniforms[STREAM_EMIT][r, depth] = lo + point * width
    return uniforms, noise


def _path_slots(parents: tuple[int, ...], toks: tuple[int, ...], o: _Outcome) -> dict[int, int]:
    """depth -> the slot whose p decides the token at that depth, along the outcome's path."""
    kids: dict[int, list[int]] = {}
    for i, par in enumerate(parents):
        kids.setdefault(par, []).append(i)
    out, node = {}, -1
    for depth in sorted(o.wanted):
        out[depth] = node + 1
        nxt = next((c for c in kids.get(node, []) if toks[c] == o.wanted[depth]), None)
        if nxt is None:
            break
        node = nxt
    return out


def _gumbel_pathwise(case: TreeCase, n_rows: int = 96) -> int:
    """Rows where the shipped gumbel tree walk on the real counter-based noise departs from the
    reference walk (:func:`reference_verify_tree`: target-only Gumbel choices along the path)."""
    gen = torch.Generator().manual_seed(case.seed + 77)
    rnd = random.Random(case.seed)
    V, N = case.vocab, 6
    p = torch.rand(n_rows, N + 1, V, generator=gen, dtype=torch.float64) ** 3
    one_hot = torch.rand(n_rows, N + 1, generator=gen) < 1 / 4
    p = torch.where(one_hot[..., None], torch.zeros_like(p).scatter_(-1, p.argmax(-1, keepdim=True), 1.0), p)
    p = p / p.sum(-1, keepdim=True)
    parents = torch.tensor([[rnd.randrange(-1, i) for i in range(N)] for _ in range(n_rows)])
    tokens = torch.randint(0, V, (n_rows, N), generator=gen)
    num_draft = torch.randint(0, N + 1, (n_rows,), generator=gen)
    seeds, positions = torch.arange(n_rows) + 1000 * case.seed, torch.randint(0, 50, (n_rows,), generator=gen)
    out = tree_module.verify_tree(p, None, tokens, parents, num_draft=num_draft, child_draw="top_k", seeds=seeds,
                                  positions=positions, method="gumbel")
    want = reference_verify_tree(p, None, tokens, parents, num_draft=num_draft, seeds=seeds, positions=positions,
                                 child_draw="top_k", method="gumbel")
    return sum([t for t in row if t >= 0] != w for row, w in zip(out.tokens.tolist(), want))


def certify_trees(cases: Sequence[TreeCase], on_case: Callable[[], None] | None = None) -> list[TreeResult]:
    results = []
    for c in cases:
        results.append(run_tree_case(c))
        if on_case:
            on_case()
    return results
