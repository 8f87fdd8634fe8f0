"""Growing a draft tree with a model drafter (EAGLE-2's dynamic tree, kept exact at any temperature).

Depth by depth, every node of the frontier gets up to ``width`` children; a node's *value* is the
product of its ancestors' and its own rank values, where the rank value of a node's r-th child is
the r-th largest probability of the law its parent drew from (``s_parent[r]``). For a greedy row
the r-th child is the r-th most likely token, so the value is EAGLE-2's cumulative draft
probability; for a sampled row the children are drawn without replacement from q, and the value
of the r-th child does not depend on which token the draw gave. At the end the ``nodes`` best
values are kept (a parent's value is at least its children's and a node's at least its later
siblings', so the kept nodes form a tree and each node's children are a prefix of its draws).

Exactness (docs/design.md section 9): every choice of shape, which nodes are expanded, how many
children each gets, which nodes are kept, depends on the parents' laws and on ancestors' tokens,
never on the draw of the node it concerns, so each node's children are a prefix of draws
without replacement from the law recorded for them, which is what the without-replacement rule
verifies. The child of rank r is drawn with uniform(seed, position, ``draft_stream(r)``): cousins
share draws (only one node's children are ever tested at one depth) and a pass never reads a
draw past the position it emits at.

The nodes come out in decreasing value (ties: in drafting order, shallower first): a prefix of
them is again a tree, the best of its size, so the engine may cut a row's tree to its first W
nodes by cost. ``accept_prob`` of a node is its rank value: the drafter's estimate that the
target emits the node's token after its parent (calibrated by the engine).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from ..draft import Draft
from ..rng import COUNTER, Draws, draft_stream, gumbel_uniforms, inverse_cdf
from ..sampling import logits_to_probs
from .drawing import to_target_vocab

if TYPE_CHECKING:
    from .base import DraftAsk

__all__ = ["draft_tree"]

#: ``expand(tokens [B, m], parents [B, m])``: feed a depth's m new nodes (``parents``: earlier nodes' ids
#: in drafting order, -1 the root) and return the drafter's logits ``[B, m, V_d]`` after each.
Expand = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def draft_tree(logits: torch.Tensor, expand: Expand, ask: DraftAsk, vocab_map: torch.Tensor | None, positions: torch.Tensor,
               *, width: int, draws: Draws = COUNTER) -> tuple[Draft, int]:
    """Grow a tree per row from the drafter's logits after each row's context ``logits [B, V_d]``.

    Row b gets at most ``ask.nodes[b]`` nodes and depth ``ask.k[b]``: at each depth the ``width``
    best children of the frontier (at most ``width`` per node), then the best ``ask.nodes[b]``
    of all. ``positions [B]``: the absolute position of depth 1. Returns the draft (nodes by
    decreasing value, ``accept_prob`` their rank values, ``child_draw`` "without_replacement",
    or "top_k" point masses when every row is greedy) and the number of ``expand`` calls.
    """
    B, device = logits.shape[0], logits.device
    k = ask.k.to(device)
    budget = torch.minimum(ask.nodes.to(device), width * k)  # [B]
    K = int(k.max()) if B else 0
    grown: list[tuple[torch.Tensor, ...]] = []  # per depth: tokens, parents, value, rank value, probs
    frontier = torch.full((B, 1), -1, dtype=torch.int64, device=device)  # node ids; -1: the root
    f_value = torch.ones(B, 1, dtype=torch.float64, device=device)  # -inf: no node
    f_logits, n, calls, fed = logits[:, None], 0, 0, 1  # [B, F, V_d]
    for t in range(1, K + 1):
        values = torch.cat([g[2] for g in grown], 1) if grown else None
        f_value = f_value.masked_fill(~((t <= k) & _can_improve(values, f_value, budget))[:, None], -math.inf)
        if not bool((f_value > -math.inf).any()):
            break
        kids = _children(f_logits, f_value, frontier, ask, vocab_map, positions + t - 1, width, draws)
        grown.append(kids)
        m = kids[0].shape[1]
        if t == K or m == 0:
            break
        go = torch.ones(B, dtype=torch.bool, device=device)
        if ask.more is not None:  # the policy's question, asked of the tree's best path (its conditional)
            best, before = kids[2].amax(1), f_value.amax(1)
            go = ask.more(t - 1, torch.where(best > -math.inf, best / before, math.nan)).to(device)
            if not bool(go.any()):
                break
        f_logits = expand(kids[0], kids[1])
        calls, fed = calls + 1, fed + m
        frontier, n = torch.arange(n, n + m, device=device).expand(B, m), n + m
        f_value = kids[2].masked_fill(~go[:, None], -math.inf)
    d = _keep_best(grown, budget, device)
    d.forwards, d.fed = calls + 1, fed
    return d, calls


def _can_improve(values: torch.Tensor | None, f_value: torch.Tensor, budget: torch.Tensor) -> torch.Tensor:
    """``[B]`` rows where a child of the frontier could still be among the row's best ``budget``
    nodes (a child's value is at most its parent's)."""
    best = f_value.amax(1)
    if values is None or values.shape[1] == 0:
        return best > -math.inf
    held = (values > -math.inf).sum(1)
    ranked = values.sort(1, descending=True).values
    kth = ranked.gather(1, (budget - 1).clamp(0, values.shape[1] - 1)[:, None])[:, 0]
    return (best > -math.inf) & ((held < budget) | (best > kth))


def _children(f_logits, f_value, frontier, ask, vocab_map, pos, width, draws):
    """The next depth: the ``width`` best children of the frontier, at most ``width`` per node.

    ``f_logits [B, F, V_d]``, ``f_value [B, F]`` (-inf: not expanded), ``frontier [B, F]`` node
    ids. Returns ``(tokens, parents, value, rank_value [B, m], probs [B, m, V] | None)`` sorted
    by decreasing value, each parent's children in rank order; padding has value -inf."""
    B, F, _ = f_logits.shape
    V, device = ask.vocab_size, f_logits.device
    greedy = ask.params.greedy.to(device)
    s, top, q = _rank_values(f_logits, ask, vocab_map, greedy, width)  # [B, F, C] x2, [B, F, V] | None
    ranks = torch.arange(width, device=device)
    cand = (f_value[:, :, None] * s.double()).masked_fill(s <= 0, -math.inf)  # [B, F, C]
    chosen = cand.flatten(1).topk(min(width, F * width), -1)
    counts = torch.zeros(B, F, dtype=torch.int64, device=device)  # children per node: a prefix of its ranks
    counts.scatter_add_(1, chosen.indices // width, (chosen.values > -math.inf).long())
    tokens = _draw(q, top, counts, ask, greedy, pos, width, draws)  # [B, F, C]
    value = torch.where(ranks[None, None] < counts[:, :, None], cand, -math.inf)
    m = int(counts.sum(1).max()) if B else 0
    order = value.flatten(1).sort(dim=1, descending=True, stable=True).indices[:, :m]  # [B, m] best first
    pick = lambda x: x.flatten(1).gather(1, order)  # noqa: E731  [B, F, C] -> [B, m]
    parents = pick(frontier[:, :, None].expand(B, F, width))
    probs = None if q is None else q.gather(1, (order // width)[..., None].expand(-1, -1, V))  # a child's law: its parent's q
    return pick(tokens), parents, pick(value), pick(s.double()), probs


def _rank_values(f_logits, ask, vocab_map, greedy, width):
    """``(s, top [B, F, C], q [B, F, V] | None)``: each node's ``width`` largest probabilities and
    their tokens, and the laws children are drawn from. A greedy row's q is one-hot, so its values
    and tokens are the drafter's own softmax, read in the drafter's vocabulary (a reduced head's
    12k ids instead of the target's 49k); q (over the target's vocabulary) is built only when a
    row samples."""
    B, F, Vd = f_logits.shape
    soft = torch.softmax(f_logits.float(), -1)  # [B, F, V_d]
    s, top = soft.topk(width, -1)
    if vocab_map is not None:
        top = vocab_map.to(top.device)[top]
    if bool(greedy.all()):
        return s, top, None
    rows = torch.arange(B).repeat_interleave(F)
    flat = to_target_vocab(f_logits.reshape(B * F, Vd), vocab_map, ask.vocab_size, ask.dtype)  # [B*F, V]
    q = logits_to_probs(flat, ask.params.rows(rows).to(flat.device)).view(B, F, -1)
    s_q, top_q = q.topk(width, -1)
    g = greedy[:, None, None]
    return torch.where(g, s.to(s_q.dtype), s_q), torch.where(g, top, top_q), q


def _draw(q, top, counts, ask, greedy, pos, width, draws) -> torch.Tensor:
    """``[B, F, C]`` the children: rank r < ``counts[b, f]`` of node f. Greedy rows take the
    drafter's likeliest tokens, Gumbel rows the top of log q + G(seed, position) (rank 0 is the
    chain's Gumbel draft), exact rows draw without replacement from q with uniform(seed,
    position, ``draft_stream(r)``)."""
    if q is None:  # every row greedy
        return top
    B, F, V = q.shape
    device = q.device
    gumbel = ask.gumbel.to(device) & ~greedy
    exact = ~(gumbel | greedy)
    tokens = top.clone()
    seeds = ask.seeds.to(device)
    if bool(gumbel.any()):
        g = gumbel.nonzero().squeeze(1)
        u = gumbel_uniforms(seeds[g], pos[g], V)  # [n, V], shared by the row's nodes (keyed by position)
        key = (torch.log(u)[:, None] / q[g].double()).nan_to_num(-math.inf)  # [n, F, V]: argmax = the Gumbel draw
        tokens[g] = key.topk(width, -1).indices
    if bool(exact.any()):
        e = exact.nonzero().squeeze(1)
        left = q[e].double()  # [n, F, V] q without the children drawn so far
        for r in range(width):
            take = counts[e] > r  # [n, F]
            if not bool(take.any()):
                break
            u = draws.uniform(seeds[e], pos[e], draft_stream(r))[:, None].expand(-1, F)
            x = inverse_cdf(torch.where(take[..., None], left, 1.0), u)  # [n, F]
            tokens[e, :, r] = x
            left = left.scatter(2, x[..., None], torch.where(take[..., None], 0.0, left.gather(2, x[..., None])))
    return tokens


def _keep_best(grown: list[tuple[torch.Tensor, ...]], budget: torch.Tensor, device: torch.device) -> Draft:
    """The ``budget`` best nodes of each row by decreasing value (ties: drafting order), parents
    renumbered to the new order."""
    B = len(budget)
    if not grown:
        return Draft(torch.zeros(B, 0, dtype=torch.int64, device=device), None, torch.zeros(B, dtype=torch.int64))
    tokens, parents, value, rank_value = (torch.cat([g[i] for g in grown], 1) for i in range(4))
    N = tokens.shape[1]
    # stable: among equal values, drafting order, which is by depth (a parent before its children)
    order = value.sort(dim=1, descending=True, stable=True).indices  # [B, N]
    real = (value > -math.inf).sum(1)
    num = torch.minimum(budget, real)  # [B]
    W = int(num.max()) if B else 0
    order = order[:, :W]
    new_of = torch.full((B, N), -1, dtype=torch.int64, device=device)
    new_of.scatter_(1, order, torch.arange(W, device=device).expand(B, W))
    par = parents.gather(1, order)
    par = torch.where(par >= 0, new_of.gather(1, par.clamp_min(0)), -1)
    kept = torch.arange(W, device=device)[None] < num[:, None]
    par = torch.where(kept, par, (torch.arange(W, device=device) - 1).expand(B, W))  # padding: a valid chain
    probs = None
    if grown[0][4] is not None:
        probs = torch.cat([g[4] for g in grown], 1).gather(1, order[..., None].expand(-1, -1, grown[0][4].shape[-1]))
    return Draft(tokens.gather(1, order), probs, num.cpu(), parents=par,
                 child_draw="top_k" if probs is None else "without_replacement",
                 accept_prob=rank_value.gather(1, order).cpu())
