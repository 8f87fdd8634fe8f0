"""Prompt lookup where the context's tail matches earlier text, a model drafter elsewhere; both
at once, as one tree, for the rows whose verification follows the target's token."""

from __future__ import annotations

import dataclasses
import math

import torch

from ..models import CausalLM
from .base import Draft, DraftAsk, Drafter, DrafterBase
from .lookup import PromptLookupDrafter, order_by_reach
from .drawing import agreement

__all__ = ["HybridDrafter"]


class HybridDrafter(DrafterBase):
    """Prompt lookup where the context's tail matches earlier text, the model drafter elsewhere.

    A composition of the two drafters: per row and step, the copy rule's point-mass draft is
    used when it finds at least ``min_copy`` tokens and its first token is at least as likely
    to be accepted as a model token (the lookup's estimate from the match length against the
    row's running acceptance rate of model drafts, prior ``model_prior``), otherwise the
    model's sampled draft. Copy rows are given to the verifier as one-hot q rows (the
    distribution they came from), so one batch can mix both kinds exactly.

    Trees (rows with ``ask.nodes[b] > 0``): greedy and Gumbel rows, whose verification ignores q
    and follows the target's token, get both drafts in one tree: the lookup's trie and the
    model's draft (chain or tree) as sibling subtrees under the root, equal tokens under one
    parent merged into one node, then the ``ask.nodes[b]`` nodes of largest reach
    (:func:`~verispec.drafters.lookup.order_by_reach`). A model node's estimate is the model's
    own ``accept_prob`` where it has one, else the row's acceptance rate of model drafts, times
    the mass the lookup's siblings leave (``1 - their estimates``). Sampled rows keep the
    either/or choice: a point mass and a sibling drawn from q cannot share a parent (the
    verifier tests one q row per parent), so they get the copy's chain or the model's own draft.
    """

    scores_drafts = True  # copied tokens carry the lookup's estimates, model tokens NaN
    drafts_trees = True  # a node budget gets one tree of both drafts (greedy and Gumbel rows)
    COPY_BRANCHES = 4  # matches the default lookup offers as branches when asked for trees

    def __init__(self, model: Drafter, copy: PromptLookupDrafter | None = None,
                 min_copy: int = 2, model_prior: float = 0.3) -> None:
        if not 0.0 <= model_prior <= 1.0:
            raise ValueError(f"model_prior must be in [0, 1], got {model_prior}")
        self.model = model
        self.copy = copy or PromptLookupDrafter(max_branches=self.COPY_BRANCHES)
        self.min_copy = min_copy
        self.model_prior = model_prior
        self.model_tried = torch.zeros(0, dtype=torch.float64)  # [B] model drafts tried per row
        self.model_passed = torch.zeros(0, dtype=torch.float64)
        self._model_draft: tuple[list[list[int]], torch.Tensor] | None = None

    @property
    def name(self) -> str:
        return f"{self.model.name}+ngram"

    @property
    def reads_target_features(self) -> bool:  # type: ignore[override]
        return self.model.reads_target_features

    @property
    def feature_taps(self) -> tuple[int, ...]:  # type: ignore[override]
        return tuple(getattr(self.model, "feature_taps", ()))

    def bind(self, target: CausalLM) -> None:
        self.model.bind(target)
        self.copy.bind(target)

    def add(self, prompts: list[list[int]], features: list[torch.Tensor] | None = None) -> None:
        self.model.add(prompts, features)
        self.copy.add(prompts)
        strength = 5.0  # pseudo-observations behind model_prior
        n = len(prompts)
        self.model_tried = torch.cat([self.model_tried, torch.full((n,), strength, dtype=torch.float64)])
        self.model_passed = torch.cat([self.model_passed,
                                       torch.full((n,), strength * self.model_prior, dtype=torch.float64)])

    def keep(self, rows: torch.Tensor) -> None:
        self.model.keep(rows)
        self.copy.keep(rows)
        rows = rows.cpu()
        self.model_tried, self.model_passed = self.model_tried[rows], self.model_passed[rows]

    def propose(self, ask: DraftAsk) -> Draft:
        """Up to ``ask.k[b]`` model tokens per row, or up to ``ask.k_cap[b]`` copied ones; trees
        where rows ask for nodes (class docstring)."""
        if ask.nodes is not None and bool((ask.nodes > 0).any()):
            return self._propose_trees(ask)
        copied = self.copy.propose(dataclasses.replace(ask, nodes=None))
        use_copy = self._use_copy(copied, ask.k_cap.cpu())  # [B]
        k_model = torch.where(use_copy, 0, ask.k.cpu())
        drafted = None
        if bool((k_model > 0).any()):
            drafted = self.model.propose(DraftAsk(k_model, k_model, ask.params, ask.gumbel, ask.seeds,
                                                  ask.vocab_size, ask.dtype, ask.more, block=ask.block))
            self._model_draft = (drafted.tokens.tolist(), torch.minimum(drafted.num_draft.cpu(), k_model))
        return _merge(copied, drafted, use_copy, k_model, ask)

    def _propose_trees(self, ask: DraftAsk) -> Draft:
        """Trees of both drafts for the greedy and Gumbel rows that ask for nodes; either/or
        elsewhere (the model's own draft, chain or tree, or the copy's chain)."""
        nodes = ask.nodes.cpu()
        free = (nodes > 0) & (ask.params.greedy.cpu() | ask.gumbel.cpu())  # [B] rows composed
        if ask.block is not None:
            free &= ~ask.block.cpu()  # block verification takes chains only
        copied = self.copy.propose(dataclasses.replace(ask, nodes=torch.where(free, nodes, 0)))
        use_copy = self._use_copy(copied, ask.k_cap.cpu()) & ~free
        k_model = torch.where(use_copy, 0, ask.k.cpu())
        drafted = None
        if bool((k_model > 0).any()):
            drafted = self.model.propose(dataclasses.replace(
                ask, k=k_model, k_cap=k_model, nodes=torch.where(k_model > 0, nodes, 0)))
            drafted.num_draft = torch.where(k_model > 0, drafted.num_draft.cpu(), 0)
            if drafted.parents is None:
                drafted.num_draft = torch.minimum(drafted.num_draft, k_model)
            paths = _first_paths(drafted)  # what update scores the model by
            self._model_draft = (paths, torch.tensor([len(t) for t in paths], dtype=torch.int64))
        rate = self.model_passed / self.model_tried  # [B] a model token's estimate where it has none
        return _compose(copied, drafted, use_copy, free, k_model, nodes, rate, ask)

    def _use_copy(self, copied: Draft, k_copy: torch.Tensor) -> torch.Tensor:
        """``[B]`` bool: rows where the copy is long enough and likelier to pass than a model token."""
        use = copied.num_draft >= torch.minimum(k_copy, torch.full_like(k_copy, self.min_copy))
        use &= copied.num_draft > 0
        if copied.accept_prob is not None and copied.accept_prob.shape[1]:
            # NaN (no estimate) compares False: such rows fall back to the model
            use &= ~(copied.accept_prob[:, 0] < self.model_passed / self.model_tried)
        return use

    def update(self, emitted: list[list[int]], features: list[torch.Tensor] | None = None) -> None:
        if self._model_draft is not None:  # the model drafts' acceptance, exactly (see agreement)
            tokens, num = self._model_draft
            for b, new in enumerate(emitted):
                passed, tried = agreement(tokens[b][: int(num[b])], new)
                self.model_passed[b] += passed
                self.model_tried[b] += tried
            self._model_draft = None
        self.model.update(emitted, features)
        self.copy.update(emitted)


def _merge(copied: Draft, drafted: Draft | None, use_copy: torch.Tensor, k_model: torch.Tensor,
           ask: DraftAsk) -> Draft:
    """One chain per row: the copy where ``use_copy``, the model's draft elsewhere. Copies are
    point masses; the whole proposal is too when the model passes no q (greedy), so no dense q
    is built then."""
    B, Kc = copied.tokens.shape
    device = drafted.tokens.device if drafted is not None else copied.tokens.device
    K = max(drafted.tokens.shape[1] if drafted is not None else 0, Kc)  # as wide as what was drafted
    dense = drafted is not None and drafted.probs is not None
    tokens = torch.zeros(B, K, dtype=torch.int64, device=device)
    probs = torch.zeros(B, K, ask.vocab_size, dtype=ask.dtype, device=device) if dense else None
    accept = torch.full((B, K), float("nan"), dtype=torch.float64)
    conf = torch.full((B, K), float("nan"), dtype=torch.float64)
    model_num = torch.minimum(drafted.num_draft.cpu(), k_model) if drafted is not None else torch.zeros_like(k_model)
    num = torch.where(use_copy, copied.num_draft, model_num)
    if drafted is not None:
        Km = drafted.tokens.shape[1]
        tokens[:, :Km] = drafted.tokens
        if probs is not None:
            probs[:, :Km] = drafted.probs
        if drafted.confidence is not None:
            conf[:, :Km] = torch.where(use_copy[:, None], float("nan"), drafted.confidence.cpu())
    rows = use_copy.to(device)
    tokens[rows, :Kc] = copied.tokens.to(device)[rows]
    if probs is not None and bool(rows.any()):  # the copy rows' q: point masses, written in place
        r = rows.nonzero().squeeze(1)  # [n]
        probs[r, :Kc] = 0
        probs[r[:, None], torch.arange(Kc, device=device)[None], copied.tokens.to(device)[r]] = 1.0
    if copied.accept_prob is not None:
        accept[use_copy, :Kc] = copied.accept_prob[use_copy]
    return Draft(tokens, probs, num, forwards=drafted.forwards if drafted is not None else 0, accept_prob=accept,
                 confidence=conf, copied=use_copy[:, None].expand(B, K).to(device))


def _first_paths(d: Draft) -> list[list[int]]:
    """Per row, the tokens of the draft's first path: node 0, then always the first child (a
    chain's whole draft; a tree's best guess at each depth when its nodes come best first)."""
    tokens, parents, num = d.tokens.tolist(), d.parent_index().tolist(), d.num_draft.tolist()
    out = []
    for tok, par, n in zip(tokens, parents, num):
        path, at = [], -1
        for i in range(n):  # topological: the first child of ``at`` is the first node under it
            if par[i] == at:
                path.append(tok[i])
                at = i
        out.append(path)
    return out


def _as_rows(d: Draft | None, B: int) -> list[tuple[list[int], list[int], list[float], list[float]]]:
    """Each row of a draft as lists (one copy to the CPU): tokens, parents, accept_prob and
    confidence (NaN where none), ``num_draft[b]`` nodes each; empty rows for no draft."""
    if d is None:
        return [([], [], [], [])] * B
    num = d.num_draft.tolist()
    tok, par = d.tokens.cpu().tolist(), d.parent_index().cpu().tolist()
    acc = None if d.accept_prob is None else d.accept_prob.cpu().tolist()
    conf = None if d.confidence is None else d.confidence.cpu().tolist()
    nan = [math.nan] * d.width
    return [(tok[b][:n], par[b][:n], (nan if acc is None else acc[b])[:n], (nan if conf is None else conf[b])[:n])
            for b, n in enumerate(num)]


def _graft(copy: tuple[list[int], list[int], list[float], list[float]],
           model: tuple[list[int], list[int], list[float], list[float]], rate: float
           ) -> tuple[list[int], list[int], list[float], list[float], list[bool]]:
    """One tree of a row's lookup trie and its model draft, both hanging under the root: the model's
    nodes are inserted in order, a node whose parent already has a child with its token becoming
    that child. Returns tokens, parents, accept, confidence and, per node, whether the model made it.

    A model node's estimate is the model's ``accept_prob`` (NaN: ``rate``) times the mass the
    lookup's children of its parent leave, ``1 - sum of their estimates`` (the events that the
    target emits one sibling or another are disjoint); a merged node keeps the lookup's estimate."""
    tokens, parents, accept, conf = (list(x) for x in copy)
    made = [False] * len(tokens)
    child = {(p, t): i for i, (p, t) in enumerate(zip(parents, tokens))}
    copy_mass: dict[int, float] = {}
    for p, a in zip(parents, accept):
        copy_mass[p] = copy_mass.get(p, 0.0) + a
    where: list[int] = []  # model node -> its node in the tree
    for t, p, a, c in zip(*model):
        par = where[p] if p >= 0 else -1
        node = child.get((par, t))
        if node is None:
            own = rate if math.isnan(a) else a
            node = child[(par, t)] = len(tokens)
            tokens.append(t)
            parents.append(par)
            accept.append(own * max(0.0, 1.0 - copy_mass.get(par, 0.0)))
            conf.append(c)
            made.append(True)
        where.append(node)
    return tokens, parents, accept, conf, made


def _compose(copied: Draft, drafted: Draft | None, use_copy: torch.Tensor, free: torch.Tensor,
             k_model: torch.Tensor, nodes: torch.Tensor, rate: torch.Tensor, ask: DraftAsk) -> Draft:
    """The tree-mode proposal: rows ``free [B]`` get the lookup's trie and the model's draft in one tree
    (:func:`_graft`; its best ``nodes[b]`` nodes), the others the copy's chain where ``use_copy`` and
    the model's own draft (chain or tree) elsewhere. A dense q is built only when a sampled "exact"
    row verifies the model's q-drawn draft; point masses (``child_draw="top_k"``) otherwise. Model
    nodes are scored (``accept_prob``) only when the result is a tree, as the engine then cuts
    every row by its nodes' estimates; a chain proposal keeps the chain form's NaN for them."""
    B = len(use_copy)
    rows = []  # per row: tokens, parents, accept, confidence, made-by-model
    for b, (c, m, r) in enumerate(zip(_as_rows(copied, B), _as_rows(drafted, B), rate.tolist())):
        if bool(free[b]):
            rows.append(_graft(c, m, r))
        elif bool(use_copy[b]):
            rows.append((*c, [False] * len(c[0])))
        else:
            rows.append((m[0], m[1], [r if math.isnan(a) else a for a in m[2]], m[3], [True] * len(m[0])))
    M = max((len(r[0]) for r in rows), default=0)
    tokens = torch.zeros(B, M, dtype=torch.int64)
    parents = (torch.arange(M) - 1).expand(B, M).clone()
    accept = torch.full((B, M), math.nan, dtype=torch.float64)
    conf = torch.full((B, M), math.nan, dtype=torch.float64)
    made = torch.zeros(B, M, dtype=torch.bool)
    count = torch.tensor([len(r[0]) for r in rows], dtype=torch.int64)
    for b, (tok, par, acc, cf, mm) in enumerate(rows):  # ragged lists -> padded rows
        n = len(tok)
        if n:
            tokens[b, :n], parents[b, :n] = torch.tensor(tok), torch.tensor(par)
            accept[b, :n], conf[b, :n] = torch.tensor(acc, dtype=torch.float64), torch.tensor(cf, dtype=torch.float64)
            made[b, :n] = torch.tensor(mm)
    # only the composed rows are reordered: a model's own tree stays as drawn (siblings drawn
    # without replacement are verified in their drawing order), and a chain is in reach order already
    ordered = order_by_reach(tokens, parents, accept, count)
    f = free[:, None]
    tokens, parents, accept = (torch.where(f, new, old) for new, old in zip(ordered[:3], (tokens, parents, accept)))
    perm = torch.where(f, ordered[3], torch.arange(M).expand(B, M))
    conf, made = conf.gather(1, perm), made.gather(1, perm)
    num = torch.where(free, torch.minimum(count, nodes), count)
    W = int(num.max()) if B else 0
    tokens, parents, accept, conf, made = (x[:, :W] for x in (tokens, parents, accept, conf, made))
    chain = Draft(tokens, None, num, parents.clone()).is_chain
    sampled = ~(ask.params.greedy.cpu() | ask.gumbel.cpu())
    dense = drafted is not None and drafted.probs is not None and drafted.child_draw != "top_k" \
        and bool((sampled & ~use_copy & (k_model > 0)).any())
    device = drafted.tokens.device if drafted is not None else copied.tokens.device
    probs = _dense_q(drafted, ~free & ~use_copy, tokens, ask, device) if dense else None
    if chain:
        return Draft(tokens.to(device), probs, num, accept_prob=torch.where(made, math.nan, accept),
                     forwards=drafted.forwards if drafted is not None else 0, confidence=conf, copied=~made)
    child_draw = (drafted.child_draw if drafted.child_draw in ("iid", "without_replacement") else "iid") \
        if dense else "top_k"
    return Draft(tokens.to(device), probs, num, parents.clone().to(device), child_draw,
                 drafted.forwards if drafted is not None else 0, accept, conf,
                 drafted.fed if drafted is not None else 0, ~made)


def _dense_q(drafted: Draft, own: torch.Tensor, tokens: torch.Tensor, ask: DraftAsk, device: torch.device
             ) -> torch.Tensor:
    """``[B, W, V]`` q per node: the model's rows for the rows ``own [B]`` that verify the model's own
    draft (kept in its order), one-hot elsewhere (copied point masses; composed rows, whose
    verification reads no q)."""
    B, W = tokens.shape
    q = torch.zeros(B, W, ask.vocab_size, dtype=ask.dtype, device=device)
    q.scatter_(2, tokens.to(device)[..., None], 1.0)
    r = own.nonzero().squeeze(1).to(device)
    w = min(W, drafted.probs.shape[1])
    if r.numel() and w:
        q[r, :w] = drafted.probs[r, :w].to(ask.dtype)
    return q
