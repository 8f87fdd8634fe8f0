"""Tree verification (docs/design.md section 9): several guesses per position, exactly the target's law.

A row's draft is a tree: node i holds ``tokens[b, i]`` and hangs under ``parents[b, i]`` (another
node, or -1: the root, the row's newest token); nodes are in topological order and the children of
one node are tried in index order (their sibling rank r = 0, 1, ...). ``target_probs[b, 0]`` is p
after the root and ``target_probs[b, i + 1]`` p after node i. ``draft_probs[b, i]`` is the law q
that node i's parent drew its children from: the same row for every sibling (for children drawn
without replacement, the law *before* any sibling was removed: the verifier removes them itself).

The walk starts at the root with law = p(root) and goes down one depth at a time. At a node with
target law p, the children c_0, c_1, ... are tried in order against a law that starts at p:

* ``iid`` (children drawn independently from q; multi-draft rejection, SpecInfer): accept c_r if
  u_r q(c_r) < law(c_r); after a rejection, law <- norm(max(0, law - q)) (the residual is carried
  to the next sibling), q unchanged;
* ``without_replacement`` (child r drawn from q with the earlier children removed; recursive
  rejection sampling, Jeon et al. 2024): the same ladder, with q <- q without c_r, renormalised,
  after each rejection (law(c_r) is 0 after the residual: a rejected token cannot come back);
* point masses (``draft_probs=None``, or ``child_draw="top_k"``: deterministic candidates such as
  the top-k of a head or the continuations of several prompt-lookup matches): q = one-hot(c_r),
  so c_r is accepted if u_r < law(c_r) and rejected c_r's mass is removed (law <- law without c_r,
  renormalised);
* accepting c_r moves the walk to c_r (law = p(c_r)); if every child is rejected (or the node is
  a leaf), the token is drawn from the current law (the carried residual; p itself at a leaf:
  the bonus) and the walk stops. Where a residual has no mass (law = q, where rejection has
  probability 0) the law is kept, as the chain keeps p.
* greedy rows (one-hot p): follow the child equal to argmax p, else emit argmax p; no draws.
* ``method="gumbel"``: the target's token at each depth is t = argmax(log p + G(seed, position));
  follow the (first) child with token t, else emit t. The text is target-only Gumbel sampling for
  that seed whatever the tree.

Draws. The token decided at depth t (the children of a node at depth t - 1) sits at absolute
position ``positions + t - 1`` (:func:`_node_positions`, the depth and never the node index): the
accept test of the child of sibling rank r reads uniform(seed, that position,
:func:`verispec.rng.accept_stream` (r)) (rank 0: STREAM_ACCEPT, what the chain verifier reads at that
slot), the residual / bonus draw uniform(seed, that position, STREAM_EMIT), the Gumbel rule
G(seed, that position). Only positions up to the emitting one are read, so the next pass, which
starts after it, never meets a draw this one used.

Vectorised over the batch (ragged trees: ``num_draft`` nodes per row, padded slots ignored); the
loops run over depth and sibling rank. The plain per-row reference it is tested against is
:func:`verispec.certify.reference.reference_verify_tree`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..draft import CHILD_DRAWS, Draft
from ..rng import COUNTER, STREAM_EMIT, Draws, accept_stream, inverse_cdf, random_seeds
from ..sampling import gumbel_rows
from . import chain
from .chain import SUM_TOLERANCE, Verification, _LOW_PRECISION_SUM_TOLERANCE

__all__ = ["verify_draft", "verify_tree", "verify_argmax_tree"]


def verify_draft(target_probs: torch.Tensor, draft: Draft, **kwargs) -> Verification:
    """Verify a :class:`~verispec.draft.Draft` (the engine's form: a tree per row).

    ``target_probs [B, N+1, V]``: p after the root (slot 0) and after each node i (slot i + 1).
    Chains go to :func:`verispec.verify.verify` (``kwargs`` as there, ``method="block"`` included);
    other trees to :func:`verify_tree` with the draft's ``child_draw``. ``top_k`` drafts are
    deterministic candidates and are verified as point masses whatever ``probs`` holds.

    Block verification reads chains only: in a draft that is not a chain, rows named ``"block"``
    are verified by the exact tree rule, token by token (exact whatever their draws' keys: their
    outcome then depends on the nodes up to the first rejection only).
    """
    q = None if draft.child_draw == "top_k" else draft.probs
    if draft.is_chain:
        return chain.verify(target_probs, q, draft.tokens, num_draft=draft.num_draft, **kwargs)
    if "method" in kwargs:
        kwargs["method"] = chain._sampling_methods(kwargs["method"])  # "block" -> "exact"
    return verify_tree(target_probs, q, draft.tokens, draft.parent_index(), num_draft=draft.num_draft,
                       child_draw=draft.child_draw, **kwargs)


def verify_tree(
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor | None,
    draft_tokens: torch.Tensor,
    parents: torch.Tensor,
    *,
    num_draft: torch.Tensor | None = None,
    child_draw: str = "iid",
    seeds: torch.Tensor | None = None,
    positions: torch.Tensor | None = None,
    method: str | Sequence[str] = "exact",
    greedy: bool | torch.Tensor | None = None,
    validate: bool = True,
    draws: Draws = COUNTER,
) -> Verification:
    """Verify a batch of draft trees (module docstring) and return what to emit.

    Args:
        target_probs: ``[B, N+1, V]`` p after the root (slot 0) and after node i (slot i + 1).
        draft_probs: ``[B, N, V]`` the law node i's parent drew its children from (one row shared
            by siblings), or ``None`` for point masses. Ignored by "gumbel" and greedy rows.
        draft_tokens: ``[B, N]`` node tokens.
        parents: ``[B, N]`` parent node of node i (``-1``: the root), an earlier node.
        num_draft: ``[B]`` nodes per row (the first ``num_draft`` slots); default N.
        child_draw: "single" or "iid", "without_replacement", "top_k" (point masses).
        seeds, positions: ``[B]`` request seeds and the absolute position of depth 1.
        method: "exact" or "gumbel", or one per row ("block" is for chains).
        greedy: rows with one-hot p (``None``: detected), as in :func:`verispec.verify.verify`.
        validate: check shapes, the trees, ids and every row of p and q the walk may read.
        draws: where the random draws come from (certification passes its own).

    Returns:
        A :class:`~verispec.verify.Verification`: ``path [B, N]`` the accepted nodes from the root
        (-1 after), ``tokens [B, N+1]`` their tokens then the emitted one (-1 after),
        ``num_accepted`` the path's length; ``accepted[b, i]`` is ``i < num_accepted[b]``.
    """
    B, N, V = _check_tree_shapes(target_probs, draft_probs, draft_tokens, parents)
    device = target_probs.device
    if child_draw not in CHILD_DRAWS:
        raise ValueError(f"child_draw must be one of {CHILD_DRAWS}, got {child_draw!r}")
    if method == "block" or (not isinstance(method, str) and "block" in list(method)):
        raise ValueError("method 'block' verifies chains only; a tree takes 'exact' or 'gumbel'")
    gumbel = gumbel_rows(method, B, device)  # [B]
    num_draft = chain._as_index_vector(num_draft, "num_draft", B, device, default=N)
    seeds = random_seeds(B).to(device) if seeds is None else chain._as_index_vector(seeds, "seeds", B, device)
    positions = chain._as_index_vector(positions, "positions", B, device, default=0)
    tokens = draft_tokens.to(torch.int64)
    parents = parents.to(torch.int64)
    point = draft_probs is None or child_draw == "top_k"
    q = None if point else draft_probs
    valid = torch.arange(N, device=device) < num_draft[:, None]  # [B, N]
    if validate:
        _check_tree(target_probs, tokens, parents, num_draft, positions, valid)
    greedy = torch.zeros_like(gumbel) if bool(gumbel.all()) else chain._greedy_rows(target_probs, greedy) & ~gumbel
    if validate:  # the rows the walk may read: p at the root and every node, q at every node
        tol = SUM_TOLERANCE.get(target_probs.dtype, _LOW_PRECISION_SUM_TOLERANCE)
        slots = torch.cat([torch.ones_like(valid[:, :1]), valid], 1)  # [B, N+1]
        chain._check_distributions("target_probs", target_probs, slots, tol, one_hot=greedy[:, None].expand(B, N + 1))
        sampled = valid & ~(gumbel | greedy)[:, None]  # [B, N] nodes whose q the ladder reads
        if q is not None:
            chain._check_distributions("draft_probs", q, sampled, tol)
        _check_draft_law(q, tokens, parents, valid, sampled, child_draw)
    tokens = torch.where(valid, tokens, 0)
    parents = torch.where(valid, parents, -2)  # padded slots hang under no node
    kids = _children(parents)  # [B, N+1, M]
    depth = _depths(parents)  # [B, N+1]
    at = _node_positions(positions, depth)  # [B, N+1] absolute position of each slot's children
    return _walk(target_probs, q, tokens, kids, at, seeds, draws, gumbel, greedy,
                 child_draw == "without_replacement", num_draft)


# ----------------------------------------------------------------------------------------------
# The tree's structure


def _children(parents: torch.Tensor) -> torch.Tensor:
    """``[B, N+1, M]`` int64: the children of slot s (0: the root, i + 1: node i) in sibling order
    (node index), ``-1`` past the last; ``parents`` is ``-2`` at padded slots. M >= 1."""
    B, N = parents.shape
    device = parents.device
    slot = parents + 1  # [B, N] the parent's slot; -1 for padded nodes
    earlier = torch.arange(N, device=device)[None, :] < torch.arange(N, device=device)[:, None]  # [N, N] j < i
    same = (slot[:, :, None] == slot[:, None, :]) & (slot[:, None, :] >= 0)  # [B, N, N]
    rank = (same & earlier[None]).sum(-1)  # [B, N] sibling rank
    M = max(1, int(rank.max()) + 1) if N else 1
    kids = torch.full((B, N + 2, M), -1, dtype=torch.int64, device=device)  # slot N + 1: padded nodes' sink
    sink = torch.where(slot >= 0, slot, N + 1)
    kids[torch.arange(B, device=device)[:, None], sink, rank] = torch.arange(N, device=device).expand(B, N)
    return kids[:, : N + 1]


def _depths(parents: torch.Tensor) -> torch.Tensor:
    """``[B, N+1]`` depth of each slot: 0 for the root, 1 + the parent's for node i (slot i + 1)."""
    B, N = parents.shape
    depth = torch.zeros(B, N + 1, dtype=torch.int64, device=parents.device)
    for i in range(N):  # topological order: a parent's depth is known before its children's
        depth[:, i + 1] = 1 + depth.gather(1, (parents[:, i] + 1).clamp_min(0)[:, None]).squeeze(1)
    return depth


def _node_positions(positions: torch.Tensor, depth: torch.Tensor) -> torch.Tensor:
    """``[B, N+1]`` the absolute position of the token decided among slot s's children:
    ``positions + depth(s)`` (``positions`` is depth 1's). Every draw is keyed by it: by the depth,
    never by the node, so that every branch of a tree, and a chain, draw the same noise at the same
    position (the Gumbel text is target-only's)."""
    return positions[:, None] + depth


# ----------------------------------------------------------------------------------------------
# The walk: one depth at a time, every live row at once


def _walk(p, q, tokens, kids, at, seeds, draws, gumbel, greedy, without_replacement, num_draft) -> Verification:
    B, N1, V = p.shape
    N = N1 - 1
    device = p.device
    path = torch.full((B, N), -1, dtype=torch.int64, device=device)
    x = torch.zeros(B, dtype=torch.int64, device=device)
    num_accepted = torch.zeros(B, dtype=torch.int64, device=device)
    cur = torch.zeros(B, dtype=torch.int64, device=device)  # the slot the walk is at (0: the root)
    tokens = tokens if N else tokens.new_zeros(B, 1)  # no nodes: nothing to gather (kids are all -1)
    live = torch.arange(B, device=device)
    while live.numel():
        slot = cur[live]
        kid = kids[live, slot]  # [n, M] node ids, -1 past the last child
        has = kid >= 0
        kid_tok = torch.where(has, tokens[live[:, None], kid.clamp_min(0)], -1)  # [n, M]
        pos = at[live, slot]  # [n] the position of the token decided here
        p_node = chain._rows_at(p, live, slot, torch.float64)  # [n, V]
        p_node = p_node / chain._sums(p_node)[:, None]
        rank = torch.full_like(slot, -1)  # [n] the accepted child's sibling rank, -1: none
        emit = torch.zeros_like(slot)  # [n] the token emitted where no child is accepted
        g, e = gumbel[live], greedy[live]
        s = ~(g | e)
        for rows, target in ((g, "gumbel"), (e, "greedy")):
            if bool(rows.any()):
                raw = chain._rows_at(p, live[rows], slot[rows])  # [m, V] as the chain reads it
                t = (chain._target_token(raw, seeds[live[rows]], pos[rows], draws) if target == "gumbel"
                     else raw.argmax(-1))  # [m] the target's token here
                match = kid_tok[rows] == t[:, None]  # [m, M]
                rank[rows] = torch.where(match.any(-1), match.to(torch.int64).argmax(-1), -1)
                emit[rows] = t
        if bool(s.any()):
            r = s.nonzero().squeeze(1)
            M = kid.shape[1]
            u = torch.stack([draws.uniform(seeds[live[r]], pos[r], accept_stream(j)) for j in range(M)], 1)  # [m, M]
            q_node = None
            if q is not None and N:  # the law the children were drawn from: any child's row (siblings share it)
                q_node = chain._rows_at(q, live[r], kid[r, 0].clamp_min(0), torch.float64)  # [m, V]
                q_node = q_node / chain._sums(q_node)[:, None]
            rank_s, law = _sibling_ladder(p_node[r], q_node, kid_tok[r], has[r], u, without_replacement)
            rank[r] = rank_s
            stop = rank_s < 0
            if bool(stop.any()):
                emit[r[stop]] = inverse_cdf(law[stop], draws.uniform(seeds[live[r[stop]]], pos[r[stop]], STREAM_EMIT))
        go = rank >= 0
        child = kid.gather(1, rank.clamp_min(0)[:, None]).squeeze(1)  # [n]
        done = live[~go]
        x[done] = emit[~go]
        moving = live[go]
        path[moving, num_accepted[moving]] = child[go]
        num_accepted[moving] += 1
        cur[moving] = child[go] + 1
        live = moving
    node_tok = torch.where(path >= 0, tokens.gather(1, path.clamp_min(0)), -1)  # [B, N]
    out = torch.cat([node_tok, torch.full_like(x[:, None], -1)], 1)  # [B, N+1]
    out.scatter_(1, num_accepted[:, None], x[:, None])
    accepted = torch.arange(N, device=device) < num_accepted[:, None]
    return Verification(tokens=out, num_accepted=num_accepted, num_emitted=num_accepted + 1, accepted=accepted,
                        num_draft=num_draft, path=path)


def verify_argmax_tree(target_top: torch.Tensor, draft: Draft) -> Verification:
    """Greedy rows' trees from the target's argmax alone: follow the first child holding
    ``target_top`` at its parent's slot, else emit it (what :func:`verify_tree` does for rows with
    one-hot p, the reference the tests compare it with), without the ``[B, N+1, V]`` p.

    ``target_top [B, N+1]``: argmax p after the root (slot 0) and after each node. Inputs are not
    validated: ids come from the engine's own argmax and its drafter's tree."""
    B, N = draft.tokens.shape
    device = target_top.device
    valid = torch.arange(N, device=device) < draft.num_draft.to(device)[:, None]
    parents = torch.where(valid, draft.parent_index().to(device), -2)  # padded nodes hang under no slot
    tokens = draft.tokens.to(device)
    path = torch.full((B, N), -1, dtype=torch.int64, device=device)
    num_accepted = torch.zeros(B, dtype=torch.int64, device=device)
    cur = torch.zeros(B, dtype=torch.int64, device=device)  # the slot the walk is at
    live = torch.ones(B, dtype=torch.bool, device=device)
    rows = torch.arange(B, device=device)
    for _ in range(N):  # one depth per round, every row at once
        want = target_top.gather(1, cur[:, None])  # [B, 1] the target's token after the current slot
        match = (parents + 1 == cur[:, None]) & (tokens == want) & live[:, None]  # [B, N]
        go = match.any(1)
        if not bool(go.any()):
            break
        child = match.to(torch.int64).argmax(1)  # the first child holding it
        path[rows[go], num_accepted[go]] = child[go]
        num_accepted += go.long()
        cur = torch.where(go, child + 1, cur)
        live &= go
    x = target_top.gather(1, cur[:, None]).squeeze(1)  # [B] emitted after the last accepted slot
    node_tok = torch.where(path >= 0, tokens.gather(1, path.clamp_min(0)), -1)
    out = torch.cat([node_tok, torch.full_like(x[:, None], -1)], 1)  # [B, N+1]
    out.scatter_(1, num_accepted[:, None], x[:, None])
    accepted = torch.arange(N, device=device) < num_accepted[:, None]
    return Verification(tokens=out, num_accepted=num_accepted, num_emitted=num_accepted + 1, accepted=accepted,
                        num_draft=draft.num_draft.to(device), path=path)


def _sibling_ladder(
    p_node: torch.Tensor,  # [n, V] float64, normalised: the target's law at the node
    q_node: torch.Tensor | None,  # [n, V] float64, normalised: the law its children were drawn from; None: point masses
    kid_tok: torch.Tensor,  # [n, M] the children's tokens in sibling order (-1 past the last)
    has: torch.Tensor,  # [n, M] the child of that rank exists
    u: torch.Tensor,  # [n, M] accept uniforms, one per sibling rank
    without_replacement: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rank [n], law [n, V])``: the sibling rank of the accepted child (-1: none) and, for rows that
    accepted none, the law to emit from (the residual carried through every rejected sibling)."""
    n, M = kid_tok.shape
    law = p_node.clone()
    q_law = None if q_node is None else q_node.clone()
    rank = torch.full((n,), -1, dtype=torch.int64, device=p_node.device)
    for j in range(M):
        open_ = has[:, j] & (rank < 0)  # [n] rows that try their child of rank j
        if not bool(open_.any()):
            break
        c = kid_tok[:, j].clamp_min(0)[:, None]  # [n, 1]
        q_c = torch.ones_like(u[:, j]) if q_law is None else q_law.gather(1, c).squeeze(1)
        acc = open_ & chain._accepts(u[:, j], law.gather(1, c).squeeze(1), q_c)
        rank[acc] = j
        rej = (open_ & ~acc).nonzero().squeeze(1)
        if rej.numel():
            q_r = (torch.zeros_like(law[rej]).scatter_(1, c[rej], 1.0) if q_law is None else q_law[rej])  # [h, V]
            law[rej] = _carry(law[rej], q_r)
            if without_replacement and q_law is not None:
                q_law[rej] = _remove(q_law[rej], c[rej])
    return rank, law


def _carry(law: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``[h, V]`` the law the next sibling is tested against (and, after the last, emitted from) once
    a child drawn from ``q`` is rejected: norm(max(0, law - q)); ``law`` itself where that has no
    mass (law = q, where rejection has probability 0)."""
    residual = (law - q).clamp_min_(0)
    mass = residual.sum(-1, keepdim=True)
    return torch.where(mass > 0, residual / torch.where(mass > 0, mass, 1.0), law)


def _remove(q: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """``[h, V]`` the law the next sibling was drawn from without replacement: ``q`` without the
    rejected tokens ``c [h, 1]``, renormalised (all zeros if nothing is left: no sibling follows)."""
    q = q.scatter(1, c, 0.0)
    mass = q.sum(-1, keepdim=True)
    return q / torch.where(mass > 0, mass, 1.0)


# ----------------------------------------------------------------------------------------------
# Validation: errors that name the argument


def _check_tree_shapes(p: object, q: object, d: object, parents: object) -> tuple[int, int, int]:
    if not isinstance(parents, torch.Tensor):
        raise TypeError(f"parents must be a torch.Tensor, got {type(parents).__name__}")
    if parents.dtype.is_floating_point or parents.dtype.is_complex or parents.dtype == torch.bool:
        raise TypeError(f"parents must have an integer dtype, got {parents.dtype}")
    B, N = chain._check_shapes(p, q, d)
    if tuple(parents.shape) != (B, N):
        raise ValueError(f"parents must be [B, N] = [{B}, {N}] like draft_tokens, got {tuple(parents.shape)}")
    if parents.device != p.device:  # type: ignore[union-attr]
        raise ValueError(f"parents is on {parents.device} but target_probs is on "  # type: ignore[union-attr]
                         f"{p.device}")
    return B, N, p.shape[-1]  # type: ignore[union-attr]


def _check_tree(p, tokens, parents, num_draft, positions, valid) -> None:
    """The trees (parents earlier nodes or -1), ids, lengths and positions."""
    B, N1, V = p.shape
    N = N1 - 1
    if bool(((num_draft < 0) | (num_draft > N)).any()):
        raise ValueError(f"num_draft must lie in [0, N={N}], got {num_draft.tolist()}")
    if bool((positions < 0).any()):
        raise ValueError(f"positions must be >= 0, got {positions.tolist()}")
    node = torch.arange(N, device=p.device)
    if bool((valid & ((parents < -1) | (parents >= N))).any()):
        raise ValueError(f"parents must be node indices in [0, N={N}) or -1 (the root); some are out of range")
    if bool((valid & (parents >= node)).any()):
        b, i = (valid & (parents >= node)).nonzero()[0].tolist()
        raise ValueError(f"parents must point to an earlier node or -1 (topological order): parents[{b}, {i}] = "
                         f"{int(parents[b, i])}")
    if bool((valid & ((tokens < 0) | (tokens >= V))).any()):
        raise ValueError(f"draft_tokens must be ids in [0, V={V}) at the nodes of each row")


def _check_draft_law(q, tokens, parents, valid, sampled, child_draw) -> None:
    """Siblings share their q row, every sampled node has q > 0, and siblings drawn without
    replacement are distinct (``sampled [B, N]``: the nodes the ladder tests)."""
    B, N = tokens.shape
    node = torch.arange(N, device=tokens.device)
    same_parent = (parents[:, :, None] == parents[:, None, :]) & valid[:, :, None] & valid[:, None, :]  # [B, N, N]
    earlier = node[None, :] < node[:, None]  # [N, N]: j < i
    if child_draw == "without_replacement":
        dup = same_parent & earlier & (tokens[:, :, None] == tokens[:, None, :])
        if bool((sampled[:, :, None] & dup).any()):
            raise ValueError("draft_tokens repeats a token among siblings, but child_draw='without_replacement' "
                             "draws distinct children")
    if q is not None and bool(sampled.any()):
        V = q.shape[-1]
        q_d = q.gather(-1, tokens.clamp(0, V - 1)[..., None]).squeeze(-1)  # [B, N]
        if bool((sampled & ~(q_d > 0)).any()):
            raise ValueError("draft_probs gives probability 0 (or NaN) to a drafted token: the node was not drawn "
                             "from draft_probs (pass draft_probs=None for point masses)")
        first = torch.where(same_parent & earlier, node[None, None, :], node[None, :, None]).amin(-1)  # [B, N]
        shared = q.gather(1, first[..., None].expand(B, N, V))  # [B, N, V] the first sibling's row
        if bool((sampled & ~(q[:, :N] == shared).all(-1)).any()):
            raise ValueError("draft_probs must hold the same row for every child of one node (the law the "
                             "children were drawn from)")
