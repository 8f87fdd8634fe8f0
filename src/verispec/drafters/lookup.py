"""Prompt lookup: copy what followed the earlier occurrence of the context's tail (no model).

With ``max_branches > 1`` and a node budget (:attr:`DraftAsk.nodes`) it offers the continuations
of several earlier matches at once, as a trie; :func:`order_by_reach` puts the nodes of any
scored tree in the order the engine cuts it (any prefix of the nodes is the best tree of its size).
"""

from __future__ import annotations

import torch

from .base import Draft, DraftAsk, DrafterBase
from .drawing import agreement

__all__ = ["PromptLookupDrafter", "order_by_reach"]


class PromptLookupDrafter(DrafterBase):
    """Prompt lookup decoding: propose what followed the earlier occurrence of the context's tail
    that matches it longest (up to ``max_ngram`` tokens; the most recent among equally long ones,
    at least ``min_ngram``). No model; q is a point mass. Rows with no match draft nothing.

    Each proposal carries an acceptance estimate per token (:attr:`Draft.accept_prob`): a copy
    that follows a 20-token match is far likelier to be right than one after a single matching
    token. Token j of a continuation after an m-token match is scored by the match length it
    extends, ``m + j``: the prior :data:`ACCEPT_PRIOR`, updated per row with what the target
    then emitted (``prior_strength`` pseudo-observations per length). The update is unbiased
    for sampled decoding too: the emitted token at a slot is an exact draw from the target, so
    it equals the copied token with probability p(copy), which is the acceptance probability
    of a point-mass draft. With ``k="auto"`` the engine asks for up to ``max_k`` tokens and
    cuts each row's draft where another token no longer pays for its verification.

    Trees (``max_branches > 1``, rows whose ``ask.nodes[b] > 0``): the distinct continuations of
    the best matches (longest first, the most recent among equally long ones; up to
    ``max_branches`` that add a node, each at most ``ask.k_cap[b]`` deep) merged into a trie, point
    masses verified as ``child_draw="top_k"``. ``accept_prob[b, i]`` estimates P(the target emits
    node i's token right after its parent | the parent was accepted): a node belongs to the best
    branch through it, and its own estimate ``e`` is that branch's as above (match length + offset,
    calibrated per row). The first child of a node keeps ``e``; a later child gets ``e`` times the
    mass its earlier siblings leave, ``e_r (1 - a_0 - ... - a_{r-1})``, so that the estimates of
    siblings, which are disjoint events, never sum past 1 (read: P(this match is right | the better
    ones are wrong) ~ its own estimate). Nodes are ordered by decreasing reach (the product of
    ``accept_prob`` down the path; ties: shallower, then earlier), which is topological, so the
    first W nodes are a valid tree and the one of W nodes with the most expected accepted tokens;
    a row keeps its first ``ask.nodes[b]``. Calibration scores only the top branch, the chain
    ``max_branches=1`` would have proposed, exactly as for chains: its per-length statistics keep
    their meaning (P(the best match's copy is right)), and since every emitted token is an exact
    draw from the target given the ones before, they stay unbiased whatever the tree.
    """

    scores_drafts = True  # proposals carry accept_prob (see Draft)
    SCAN = 8  # candidates looked at per branch wanted: a repeated continuation adds no node

    # P(a copied token is accepted | its match length m = 1, 2, ...; the last value for longer),
    # greedy, measured on SmolLM2-135M's answers to the distillation chat prompts (26,854 answer
    # tokens; verispec.distill.chat_prompts), not on the benchmark prompts.
    ACCEPT_PRIOR = (0.2, 0.5, 0.65, 0.75, 0.8, 0.86, 0.86, 0.86, 0.86, 0.86, 0.86, 0.92)

    def __init__(self, max_ngram: int = 32, min_ngram: int = 1, prior_strength: float = 8.0,
                 max_branches: int = 1) -> None:
        if min_ngram < 1 or max_ngram < min_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got min_ngram={min_ngram}, max_ngram={max_ngram}")
        if not prior_strength > 0:
            raise ValueError(f"prior_strength must be > 0, got {prior_strength}")
        if isinstance(max_branches, bool) or not isinstance(max_branches, int) or max_branches < 1:
            raise ValueError(f"max_branches must be an int >= 1, got {max_branches!r}")
        self.max_ngram, self.min_ngram, self.prior_strength = max_ngram, min_ngram, float(prior_strength)
        self.max_branches = max_branches
        self.prior = torch.tensor(self.ACCEPT_PRIOR, dtype=torch.float64)
        self.name = "ngram"  # trees or not: the machine's cost table (keyed by name) is the same
        self.drafts_trees = max_branches > 1  # type: ignore[misc]  # a node budget gets a trie
        self.contexts: list[list[int]] = []
        nb = len(self.ACCEPT_PRIOR)
        self.tried = torch.zeros(0, nb, dtype=torch.float64)  # [B, buckets] per match length
        self.passed = torch.zeros(0, nb, dtype=torch.float64)
        self._pending: list[tuple[list[int], int] | None] = []  # the last proposal per row, to score
        self._grown: dict[int, _Grown] = {}  # id(context) -> the context as a tensor, grown as it grows

    def add(self, prompts: list[list[int]], features: list[torch.Tensor] | None = None) -> None:
        self.contexts += [list(p) for p in prompts]
        zeros = torch.zeros(len(prompts), self.tried.shape[1], dtype=torch.float64)
        self.tried, self.passed = torch.cat([self.tried, zeros]), torch.cat([self.passed, zeros])
        self._pending += [None] * len(prompts)

    def keep(self, rows: torch.Tensor) -> None:
        index = rows.tolist()
        self.contexts = [self.contexts[i] for i in index]
        self._pending = [self._pending[i] for i in index]
        self.tried, self.passed = self.tried[rows.cpu()], self.passed[rows.cpu()]

    def match(self, context: list[int] | torch.Tensor) -> tuple[int, int]:
        """``(start, m)``: the longest earlier match of the context's tail is ``m`` tokens long
        and its continuation starts at ``context[start]``; ``(-1, 0)`` if none of ``min_ngram``.
        ``context``: token ids, or the int64 tensor of them."""
        ends, length = self._candidates(context)
        if not len(ends):
            return -1, 0
        m = int(length.max())
        if m < self.min_ngram:
            return -1, 0
        return int(ends[length == m][-1]) + 1, m

    def ranked(self, context: list[int] | torch.Tensor, limit: int | None = None) -> list[tuple[int, int]]:
        """The earlier matches of the context's tail of at least ``min_ngram`` tokens (the best
        ``limit`` of them, or all), as ``(start, m)`` like :meth:`match`: the longest first, the
        most recent among equally long ones (the first is :meth:`match`'s)."""
        ends, length = self._candidates(context)
        keep = length >= self.min_ngram
        ends, length = ends[keep], length[keep]
        order = torch.argsort(length * (len(context) + 1) + ends, descending=True)[:limit]  # ends < len(context)
        return [(e + 1, m) for e, m in zip(ends[order].tolist(), length[order].tolist())]

    def _candidates(self, context: list[int] | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(ends [H], length [H])``: the earlier copies of the context's last token (ascending) and
        how many tokens of the tail each matches (up to ``max_ngram``)."""
        L = len(context)
        empty = torch.zeros(0, dtype=torch.int64)
        if L < 2:
            return empty, empty
        seq = context if isinstance(context, torch.Tensor) else torch.tensor(context, dtype=torch.int64)
        ends = (seq[:-1] == seq[-1]).nonzero().flatten()  # [H] earlier copies of the last token
        if not len(ends):
            return empty, empty
        back = torch.arange(min(self.max_ngram, L - 1))  # [n]
        idx = ends[:, None] - back  # [H, n] walking back from each candidate
        same = (idx >= 0) & (seq[idx.clamp_min(0)] == seq[L - 1 - back])  # [H, n]
        return ends, same.long().cumprod(1).sum(1)  # [H] match length per candidate

    def _buckets(self, m: int, n: int) -> torch.Tensor:
        """``[n]`` prior indices of the next n copied tokens after an m-token match (the match
        length each extends, capped at the last entry)."""
        return (torch.arange(n) + m).clamp_max(len(self.ACCEPT_PRIOR)) - 1

    def propose(self, ask: DraftAsk) -> Draft:
        """Up to ``ask.k_cap[b]`` tokens per row (a row's cap is its ``k`` unless the engine cuts);
        a trie of up to ``ask.nodes[b]`` nodes where the row asks for one (class docstring)."""
        trees = self._tree_rows(ask)
        if trees is None:
            return self._chains(ask.k_cap.cpu())
        return self._trees(ask.k_cap.cpu(), ask.nodes.cpu(), trees)

    def _tree_rows(self, ask: DraftAsk) -> torch.Tensor | None:
        """``[B]`` bool, the rows that get a trie; ``None`` when none does (chains, as ever)."""
        if self.max_branches == 1 or ask.nodes is None:
            return None
        rows = ask.nodes.cpu() > 0
        if ask.block is not None:  # block verification takes chains only
            rows &= ~ask.block.cpu()
        return rows if bool(rows.any()) else None

    def _trees(self, k: torch.Tensor, nodes: torch.Tensor, trees: torch.Tensor) -> Draft:
        """Tries for the rows ``trees [B]`` (up to ``nodes[b]`` nodes, ``k[b]`` deep), the chain
        elsewhere; nodes by decreasing reach (:func:`order_by_reach`)."""
        B = len(self.contexts)
        est = ((self.passed + self.prior_strength * self.prior) / (self.tried + self.prior_strength)).tolist()
        rows = []
        for b, (ctx, seq) in enumerate(zip(self.contexts, self._tensors())):  # ragged search, a row at a time
            branches = self.max_branches if bool(trees[b]) else 1
            cands = self.ranked(seq, self.SCAN * branches)
            trie, top = _trie(ctx, cands, int(k[b]), branches, est[b])
            self._pending[b] = top
            rows.append(trie)
        M = max((len(t[0]) for t in rows), default=0)
        tokens = torch.zeros(B, M, dtype=torch.int64)
        parents = (torch.arange(M) - 1).expand(B, M).clone()
        accept = torch.full((B, M), float("nan"), dtype=torch.float64)
        count = torch.tensor([len(t[0]) for t in rows], dtype=torch.int64)
        for b, (tok, par, acc) in enumerate(rows):  # ragged lists -> padded rows
            n = len(tok)
            if n:
                tokens[b, :n], parents[b, :n] = torch.tensor(tok), torch.tensor(par)
                accept[b, :n] = torch.tensor(acc, dtype=torch.float64)
        tokens, parents, accept, _ = order_by_reach(tokens, parents, accept, count)
        num = torch.where(trees, torch.minimum(count, nodes), count)
        W = int(num.max()) if B else 0
        copied = torch.ones(B, W, dtype=torch.bool)
        draft = Draft(tokens[:, :W], None, num, parents[:, :W].clone(), "top_k", accept_prob=accept[:, :W].clone(),
                      copied=copied)
        return draft if not draft.is_chain else Draft(draft.tokens, None, num, accept_prob=draft.accept_prob,
                                                      copied=copied)

    def _chains(self, k: torch.Tensor) -> Draft:
        """One chain per row: the continuation of the best match, up to ``k[b]`` tokens."""
        B = len(self.contexts)
        K = int(k.max()) if B else 0
        tokens = torch.zeros(B, K, dtype=torch.int64)
        num = torch.zeros(B, dtype=torch.int64)
        prob = torch.full((B, K), float("nan"), dtype=torch.float64)
        s = self.prior_strength
        for b, (ctx, seq) in enumerate(zip(self.contexts, self._tensors())):  # ragged search, a row at a time
            start, m = self.match(seq)
            found = ctx[start : start + int(k[b])] if start >= 0 else []
            self._pending[b] = (found, m) if found else None
            if not found:
                continue
            n = len(found)
            tokens[b, :n] = torch.tensor(found, dtype=torch.int64)
            num[b] = n
            i = self._buckets(m, n)
            prob[b, :n] = (self.passed[b, i] + s * self.prior[i]) / (self.tried[b, i] + s)
        return Draft(tokens, None, num, accept_prob=prob, copied=torch.ones(B, K, dtype=torch.bool))

    def _tensors(self) -> list[torch.Tensor]:
        """Each row's context as an int64 tensor: the one kept for that context list, grown by what
        was appended since (converting the whole context every step cost O(context) per row)."""
        old, self._grown = self._grown, {}
        out = []
        for ctx in self.contexts:
            g = old.get(id(ctx))
            if g is None or g.tokens is not ctx or g.n > len(ctx):
                g = _Grown(ctx)
            self._grown[id(ctx)] = g
            out.append(g.view())
        return out

    def update(self, emitted: list[list[int]], features: list[torch.Tensor] | None = None) -> None:
        for b, (ctx, new) in enumerate(zip(self.contexts, emitted)):
            pending = self._pending[b]
            if pending is not None:  # score the last proposal against what the target emitted
                found, m = pending
                passed, tried = agreement(found, new)
                # index_add_: long matches share the last bucket, so indices repeat
                self.tried[b].index_add_(0, self._buckets(m, tried), torch.ones(tried, dtype=torch.float64))
                self.passed[b].index_add_(0, self._buckets(m, passed), torch.ones(passed, dtype=torch.float64))
                self._pending[b] = None
            ctx.extend(new)


def _trie(ctx: list[int], cands: list[tuple[int, int]], depth: int, branches: int, est: list[float]
          ) -> tuple[tuple[list[int], list[int], list[float]], tuple[list[int], int] | None]:
    """The trie of the continuations of ``cands`` (``(start, m)``, best first), each at most
    ``depth`` tokens, stopping after ``branches`` of them have added a node; ``est``: the row's
    estimate per match-length bucket. Returns ``((tokens, parents, accept), top)``, nodes in
    creation order (topological), ``top`` the first continuation and its match length (or None).
    A node's estimate is its creating branch's own, times the mass its earlier siblings leave."""
    tokens: list[int] = []
    parents: list[int] = []
    accept: list[float] = []
    child: dict[tuple[int, int], int] = {}  # (parent, token) -> node
    used: dict[int, float] = {}  # parent -> estimate mass of its children so far
    top, added = None, 0
    for start, m in cands:
        found = ctx[start : start + depth]
        if not found:
            continue
        if top is None:
            top = (found, m)
        cur, new = -1, False
        for j, t in enumerate(found):
            node = child.get((cur, t))
            if node is None:
                left = max(0.0, 1.0 - used.get(cur, 0.0))
                a = est[min(m + j, len(est)) - 1] * left
                used[cur] = used.get(cur, 0.0) + a
                node = child[(cur, t)] = len(tokens)
                tokens.append(t)
                parents.append(cur)
                accept.append(a)
                new = True
            cur = node
        added += new
        if added == branches:
            break
    return (tokens, parents, accept), top


def order_by_reach(tokens: torch.Tensor, parents: torch.Tensor, accept: torch.Tensor, num: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The nodes of each row's tree by decreasing reach (the product of ``accept`` from the root
    down to the node; ties: the shallower, then the earlier node first), parents renumbered.

    Reach never grows down a path (``accept`` in [0, 1]; NaN counts as 0), so the order is
    topological and its first W nodes are the tree of W nodes with the largest sum of reaches,
    the expected accepted tokens if ``accept`` is right. ``tokens, parents [B, M]`` int64,
    ``accept [B, M]`` float64, ``num [B]`` nodes per row (padded slots stay last, parents i - 1).
    Returns ``(tokens, parents, accept, perm)``, ``perm [B, M]`` the old index of each new slot.
    """
    B, M = tokens.shape
    slot = torch.arange(M)
    valid = slot < num[:, None]  # [B, M]
    a = torch.where(valid, accept.nan_to_num(0.0).clamp(0.0, 1.0), 0.0)
    col = torch.where(valid, parents, -1) + 1  # [B, M] the parent's column (0: the root)
    reach = torch.ones(B, M + 1, dtype=torch.float64)
    depth = torch.zeros(B, M + 1, dtype=torch.int64)
    for i in range(M):  # topological: a parent's reach is known before its children's
        reach[:, i + 1] = a[:, i] * reach.gather(1, col[:, i : i + 1]).squeeze(1)
        depth[:, i + 1] = 1 + depth.gather(1, col[:, i : i + 1]).squeeze(1)
    key = torch.where(valid, reach[:, 1:], -1.0)  # padded slots last
    by_depth = torch.sort(depth[:, 1:], dim=1, stable=True).indices
    by_reach = torch.sort(key.gather(1, by_depth), dim=1, descending=True, stable=True).indices
    perm = by_depth.gather(1, by_reach)  # [B, M]
    inv = torch.empty_like(perm).scatter_(1, perm, slot.expand(B, M).contiguous())
    old = parents.gather(1, perm)
    new = torch.where(old >= 0, inv.gather(1, old.clamp_min(0)), -1)
    new = torch.where(valid, new, slot - 1)  # valid nodes come first, so slot < num is the valid mask
    return tokens.gather(1, perm), new, accept.gather(1, perm), perm


class _Grown:
    """A token list mirrored in an int64 tensor with spare room: :meth:`view` appends what the list
    gained since the last call (amortised O(new tokens)), reallocating at twice the size when full."""

    __slots__ = ("tokens", "buf", "n")

    def __init__(self, tokens: list[int]) -> None:
        self.tokens = tokens  # the list itself (appended to in place by the drafter)
        self.buf = torch.tensor(tokens, dtype=torch.int64)
        self.n = len(tokens)

    def view(self) -> torch.Tensor:
        """``[len(tokens)]`` the list's tokens (a view of the buffer)."""
        L = len(self.tokens)
        if L > self.n:
            if L > self.buf.shape[0]:
                grown = torch.empty(max(L, 2 * self.buf.shape[0]), dtype=torch.int64)
                grown[: self.n] = self.buf[: self.n]
                self.buf = grown
            self.buf[self.n : L] = torch.tensor(self.tokens[self.n :], dtype=torch.int64)
            self.n = L
        return self.buf[:L]
