"""Prompt lookup: copy what followed the earlier occurrence of the context's tail (no model)."""

from __future__ import annotations

import torch

from .base import Draft, DraftAsk, DrafterBase
from .drawing import agreement

__all__ = ["PromptLookupDrafter"]


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
    """

    scores_drafts = True  # proposals carry accept_prob (see Draft)

    # P(a copied token is accepted | its match length m = 1, 2, ...; the last value for longer),
    # greedy, measured on SmolLM2-135M's answers to the distillation chat prompts (26,854 answer
    # tokens; verispec.distill.chat_prompts), not on the benchmark prompts.
    ACCEPT_PRIOR = (0.2, 0.5, 0.65, 0.75, 0.8, 0.86, 0.86, 0.86, 0.86, 0.86, 0.86, 0.92)

    def __init__(self, max_ngram: int = 32, min_ngram: int = 1, prior_strength: float = 8.0) -> None:
        if min_ngram < 1 or max_ngram < min_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got min_ngram={min_ngram}, max_ngram={max_ngram}")
        if not prior_strength > 0:
            raise ValueError(f"prior_strength must be > 0, got {prior_strength}")
        self.max_ngram, self.min_ngram, self.prior_strength = max_ngram, min_ngram, float(prior_strength)
        self.prior = torch.tensor(self.ACCEPT_PRIOR, dtype=torch.float64)
        self.name = "ngram"
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
        L = len(context)
        if L < 2:
            return -1, 0
        seq = context if isinstance(context, torch.Tensor) else torch.tensor(context, dtype=torch.int64)
        ends = (seq[:-1] == seq[-1]).nonzero().flatten()  # [H] earlier copies of the last token
        if not len(ends):
            return -1, 0
        back = torch.arange(min(self.max_ngram, L - 1))  # [n]
        idx = ends[:, None] - back  # [H, n] walking back from each candidate
        same = (idx >= 0) & (seq[idx.clamp_min(0)] == seq[L - 1 - back])  # [H, n]
        length = same.long().cumprod(1).sum(1)  # [H] match length per candidate
        m = int(length.max())
        if m < self.min_ngram:
            return -1, 0
        return int(ends[length == m][-1]) + 1, m

    def _buckets(self, m: int, n: int) -> torch.Tensor:
        """``[n]`` prior indices of the next n copied tokens after an m-token match (the match
        length each extends, capped at the last entry)."""
        return (torch.arange(n) + m).clamp_max(len(self.ACCEPT_PRIOR)) - 1

    def propose(self, ask: DraftAsk) -> Draft:
        """Up to ``ask.k_cap[b]`` tokens per row (a row's cap is its ``k`` unless the engine cuts)."""
        k = ask.k_cap.cpu()
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
        return Draft(tokens, None, num, accept_prob=prob)

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
