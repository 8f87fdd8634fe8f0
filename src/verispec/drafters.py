"""Drafters: propose K tokens (and the q they were sampled from) for the target to verify.

The protocol is small on purpose (see :class:`Drafter`): the engine starts a drafter on the
prompts, asks for a proposal each iteration, and then tells it which tokens were emitted so it
can roll back. Drafters sample with the engine's :class:`SamplingParams` transform and the
shared counter-based randomness (stream ``STREAM_DRAFT`` at the draft's absolute position), so
a whole run is a pure function of the seeds.

* :class:`ModelDrafter` - a small causal LM sharing the target's tokenizer, with its own KV cache.
* :class:`PromptLookupDrafter` - continues the longest match of the context's tail (q = point mass),
  with a per-token acceptance estimate from the match length.
* :class:`HybridDrafter` - prompt lookup where an n-gram matches, the model elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

import torch

from .eagle import (DRAFT_WEIGHTS, EagleDraftModel, EagleFiles, bind_eagle, features_match_logits, is_eagle_dir,
                    load_eagle_head)
from .models import CausalLM
from .rng import COUNTER, STREAM_DRAFT, Draws, inverse_cdf
from .runner import KVRunner, left_pad
from .sampling import SamplingParams, logits_to_probs

__all__ = ["Draft", "Drafter", "ModelDrafter", "PromptLookupDrafter", "HybridDrafter", "EagleDrafter", "DraftContext",
           "agreement", "to_target_vocab", "greedy_draft", "sample_draft", "make_drafter", "load_drafter",
           "eagle_head_dir", "DEFAULT_DRAFTERS", "default_drafter"]


@dataclass
class Draft:
    """One proposal for a batch.

    Attributes:
        tokens: ``[B, K]`` int64 draft tokens (anything past ``num_draft`` is ignored).
        probs: ``[B, K, V]`` the distributions the tokens were sampled from (target vocabulary),
            or ``None`` when every draft is a point mass.
        num_draft: ``[B]`` int64 drafted tokens per row (<= the ``k`` asked for).
        forwards: draft model forward passes this proposal took.
        accept_prob: optional ``[B, K]`` float64: the drafter's estimate that token j is accepted
            given that tokens ``< j`` were; NaN where it has none. Under ``k="auto"`` the engine
            keeps, per row, the prefix that maximises expected tokens per second of verifying.
    """

    tokens: torch.Tensor
    probs: torch.Tensor | None
    num_draft: torch.Tensor
    forwards: int = 0
    accept_prob: torch.Tensor | None = None


@dataclass
class DraftContext:
    """What a drafter is started with.

    Attributes:
        prompts: token ids per row.
        sampling: the request's sampling transform (the drafter must sample from it).
        seeds: ``[B]`` int64 request seeds.
        method: "exact" (sample d ~ q) or "gumbel" (d = argmax(log q + G), shared noise).
        vocab_size: the target's vocabulary size V; ``probs`` must be ``[B, K, V]``.
        dtype: dtype of the target's probabilities (q must match it).
        features: for drafters with ``uses_target_features``: per row, the target's final
            hidden states ``[len(prompt) - 1, H]`` at the prompt positions before the last
            (feature i belongs to the position of token i and precedes token i + 1).
    """

    prompts: list[list[int]]
    sampling: SamplingParams
    seeds: torch.Tensor
    method: str
    vocab_size: int
    dtype: torch.dtype
    features: list[torch.Tensor] | None = None


@runtime_checkable
class Drafter(Protocol):
    """What the engine needs from a drafter."""

    def bind(self, target: CausalLM) -> None:
        """Check compatibility with the target (tokenizer, vocabulary) before any generation."""

    def start(self, ctx: DraftContext) -> None:
        """Begin a batch of requests whose contexts are ``ctx.prompts``."""

    def propose(self, k: torch.Tensor) -> Draft:
        """Propose up to ``k[b]`` tokens for each row b (``k [B]`` int64, may be 0).

        Drafters with a true ``scores_drafts`` attribute fill :attr:`Draft.accept_prob`; under
        ``k="auto"`` they are called as ``propose(k, k_lookup=cap)`` and may return up to
        ``cap[b]`` scored tokens per row (the engine cuts them; see ``SpeculativeDecoder``).
        """

    def update(self, emitted: list[list[int]]) -> None:
        """Append each row's newly emitted tokens to its context (accepted drafts + 1 token).

        Drafters with a true ``uses_target_features`` attribute are called as
        ``update(emitted, features=...)``: per row, the target's final hidden states
        ``[len(emitted[b]), H]`` at the positions just before each emitted token.
        """


def sample_draft(logits: torch.Tensor, params: SamplingParams, method: str, seeds: torch.Tensor,
                 positions: torch.Tensor, draws: Draws = COUNTER) -> tuple[torch.Tensor, torch.Tensor]:
    """One draft step of a model drafter: q = the request's transform of the draft ``logits [B, V]``
    (target vocabulary) and the token d drawn from exactly that q. Returns ``(d [B], q [B, V])``.

    The q returned is the q the verifier must be given: a drafter that reports any other
    distribution than the one it sampled from breaks exactness (certified, see
    :mod:`verispec.certify`, which drives this function through ``draws``).
    """
    q = logits_to_probs(logits, params)  # [B, V]
    return _draw_from(q, params, method, seeds, positions, draws), q


def _draw_from(q: torch.Tensor, params: SamplingParams, method: str, seeds: torch.Tensor, positions: torch.Tensor,
               draws: Draws) -> torch.Tensor:
    if params.greedy:  # q is one-hot: both rules pick its token, so skip the noise
        return q.argmax(-1)
    if method == "gumbel":
        return draws.gumbel_argmax(q, seeds, positions)
    return inverse_cdf(q, draws.uniform(seeds, positions, STREAM_DRAFT))


def agreement(draft: list[int], emitted: list[int]) -> tuple[int, int]:
    """``(passed, tried)`` for a draft against what the target then emitted at the same slots:
    the leading run of equal tokens, and the slots compared up to and including the first
    difference. Equal means accepted: a rejected slot never emits its draft token (the residual
    is 0 there), and at the bonus slot a point-mass draft equals the bonus draw with exactly
    its acceptance probability."""
    n = min(len(draft), len(emitted))
    passed = next((j for j in range(n) if emitted[j] != draft[j]), n)
    return passed, passed + (passed < n)


def to_target_vocab(logits: torch.Tensor, vocab_map: torch.Tensor | None, V: int, dtype: torch.dtype) -> torch.Tensor:
    """Draft logits ``[B, V_d]`` -> ``[B, V]`` over the target vocabulary.

    Row i of a reduced head scores target id ``vocab_map[i]``; every other id gets -inf (q = 0,
    which the exact verifier handles). Without a map, a padded head is cut to V and a short
    one padded with -inf.
    """
    logits = logits.to(dtype)
    if vocab_map is not None:
        full = logits.new_full((logits.shape[0], V), float("-inf"))
        return full.index_copy_(1, vocab_map.to(logits.device), logits)
    Vd = logits.shape[-1]
    if Vd == V:
        return logits
    if Vd > V:  # padded draft head: the target gives those ids probability 0 anyway
        return logits[:, :V]
    return torch.cat([logits, logits.new_full((logits.shape[0], V - Vd), float("-inf"))], dim=1)


def greedy_draft(logits: torch.Tensor, vocab_map: torch.Tensor | None, V: int) -> torch.Tensor:
    """``[B]`` the greedy draft token of draft logits ``[B, V_d]``: the argmax of
    ``to_target_vocab(logits, vocab_map, V, ...)`` (ties to the lowest target id, as
    :func:`logits_to_probs`), without building the ``[B, V]`` rows. Under greedy sampling q is
    this token's point mass, so drafters pass no dense q at all (``Draft.probs = None``).

    Raises:
        ValueError: NaN or +inf logits, as :func:`logits_to_probs`.
    """
    x = logits if vocab_map is not None else logits[:, :V]
    if torch.isnan(x).any() or torch.isposinf(x).any():
        raise ValueError("draft logits contain NaN or +inf (a broken model or overflow)")
    if torch.isneginf(x).all(-1).any():
        raise ValueError("a row of draft logits is entirely -inf: no token can be drafted")
    if vocab_map is None:
        return x.argmax(-1)  # [B], the first maximum = the lowest id
    if not bool((vocab_map[1:] > vocab_map[:-1]).all()):
        # an unsorted map: the first maximum in row order need not be the lowest target id
        return to_target_vocab(logits, vocab_map, V, logits.dtype).argmax(-1)
    return vocab_map.to(logits.device)[x.argmax(-1)]


# ----------------------------------------------------------------------------------------------


class ModelDrafter:
    """A small causal LM as drafter. It keeps its own KV cache and rolls it back on rejection.

    Invariant: the cache holds a prefix of each row's context; the rest of the context
    (``pending``: the last emitted token, or two when every draft was accepted) is fed at the
    start of the next proposal, so the draft cache sees every emitted token exactly once.
    """

    def __init__(self, model: CausalLM) -> None:
        self.lm = model

    @property
    def name(self) -> str:
        return self.lm.name

    def bind(self, target: CausalLM) -> None:
        if target.tokenizer.get_vocab() != self.lm.tokenizer.get_vocab():
            raise ValueError(
                f"draft {self.lm.name!r} does not share the target's tokenizer ({target.name!r}); "
                "verispec needs the same token ids on both sides"
            )

    def start(self, ctx: DraftContext) -> None:
        self.ctx = ctx
        self.contexts = [list(p) for p in ctx.prompts]
        self.runner = KVRunner(self.lm.model, len(ctx.prompts))
        V = ctx.vocab_size
        vmap = self.lm.vocab_map
        if vmap is not None and int(vmap.max()) >= V:
            raise ValueError(f"draft vocab_map has ids >= the target vocabulary size {V}")
        self._fed: list[list[int]] = [[] for _ in ctx.prompts]  # drafts fed to the cache, per row

    def _logits_to_target_vocab(self, logits: torch.Tensor) -> torch.Tensor:
        return to_target_vocab(logits, self.lm.vocab_map, self.ctx.vocab_size, self.ctx.dtype)

    def propose(self, k: torch.Tensor) -> Draft:
        B = len(self.contexts)
        K = int(k.max()) if B else 0
        V = self.ctx.vocab_size
        device = self.lm.model.device
        tokens = torch.zeros(B, K, dtype=torch.int64)
        point_mass = self.ctx.sampling.greedy  # q = one-hot on the argmax: no dense q (Draft.probs)
        probs = None if point_mass else torch.zeros(B, K, V, dtype=self.ctx.dtype)
        if K == 0:
            return Draft(tokens, probs, k.clone(), 0)

        # Feed each row's pending context tokens (ragged: left-pad with placeholders).
        cached = self.runner.lengths.tolist()
        pending = [ctx[c:] for ctx, c in zip(self.contexts, cached)]
        if not all(pending):
            raise RuntimeError("draft cache holds a row's whole context; the newest token must stay pending")
        feed, live = left_pad(pending)
        positions = torch.tensor([len(c) for c in self.contexts], dtype=torch.int64)  # slot 0
        logits = self.runner.forward(feed.to(device), live.to(device), logits_to_keep=1)[:, -1]
        for i in range(K):
            if probs is None:
                d = greedy_draft(logits, self.lm.vocab_map, V).cpu()
            else:
                d, q = sample_draft(self._logits_to_target_vocab(logits), self.ctx.sampling, self.ctx.method,
                                    self.ctx.seeds, positions + i)  # [B], [B, V]
                probs[:, i] = q
            tokens[:, i] = d
            if i + 1 < K:
                logits = self.runner.forward(d[:, None].to(device))[:, -1]
        self._fed = tokens[:, : K - 1].tolist()  # d_1..d_{K-1} went through the cache; d_K did not
        return Draft(tokens, probs, k.clone(), K)

    def update(self, emitted: list[list[int]]) -> None:
        # A cached draft token stays valid iff it and every token before it equal what was
        # emitted at that position (its keys/values depend on exactly that prefix). The newest
        # emitted token always stays pending: the next proposal needs the logits it produces.
        keep = []
        for b, new in enumerate(emitted):
            fed, n = self._fed[b], 0
            while n < len(fed) and n < len(new) - 1 and fed[n] == new[n]:
                n += 1
            self.contexts[b].extend(new)
            keep.append(min(len(self.contexts[b]) - len(new) + n, len(self.contexts[b]) - 1))
        self._fed = [[] for _ in emitted]
        self.runner.truncate(torch.tensor(keep, dtype=torch.int64, device=self.runner.lengths.device))


# ----------------------------------------------------------------------------------------------


class PromptLookupDrafter:
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

    # P(a copied token is accepted | its match length m = 1, 2, ...; the last value for longer),
    # greedy, measured on SmolLM2-135M's answers to the distillation chat prompts (26,854 answer
    # tokens; verispec.chat_prompts), not on the benchmark prompts.
    ACCEPT_PRIOR = (0.2, 0.5, 0.65, 0.75, 0.8, 0.86, 0.86, 0.86, 0.86, 0.86, 0.86, 0.92)

    def __init__(self, max_ngram: int = 32, min_ngram: int = 1, prior_strength: float = 8.0) -> None:
        if min_ngram < 1 or max_ngram < min_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got min_ngram={min_ngram}, max_ngram={max_ngram}")
        if not prior_strength > 0:
            raise ValueError(f"prior_strength must be > 0, got {prior_strength}")
        self.max_ngram, self.min_ngram, self.prior_strength = max_ngram, min_ngram, float(prior_strength)
        self.prior = torch.tensor(self.ACCEPT_PRIOR, dtype=torch.float64)
        self.name = "ngram"
        self.scores_drafts = True  # proposals carry accept_prob (see Draft)

    def bind(self, target: CausalLM) -> None:
        pass

    def start(self, ctx: DraftContext) -> None:
        self.contexts = [list(p) for p in ctx.prompts]
        nb = len(self.ACCEPT_PRIOR)
        self.tried = torch.zeros(len(self.contexts), nb, dtype=torch.float64)  # [B, buckets] per match length
        self.passed = torch.zeros(len(self.contexts), nb, dtype=torch.float64)
        self._pending: list[tuple[list[int], int] | None] = [None] * len(self.contexts)

    def match(self, context: list[int]) -> tuple[int, int]:
        """``(start, m)``: the longest earlier match of the context's tail is ``m`` tokens long
        and its continuation starts at ``context[start]``; ``(-1, 0)`` if none of ``min_ngram``."""
        L = len(context)
        if L < 2:
            return -1, 0
        seq = torch.tensor(context)
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

    def propose(self, k: torch.Tensor, k_lookup: torch.Tensor | None = None) -> Draft:
        """Up to ``k[b]`` tokens per row (``k_lookup[b]`` when given: the engine's long cap)."""
        k = k if k_lookup is None else k_lookup
        B = len(self.contexts)
        K = int(k.max()) if B else 0
        tokens = torch.zeros(B, K, dtype=torch.int64)
        num = torch.zeros(B, dtype=torch.int64)
        prob = torch.full((B, K), float("nan"), dtype=torch.float64)
        s = self.prior_strength
        for b, ctx in enumerate(self.contexts):  # ragged string search, one row at a time
            start, m = self.match(ctx)
            found = ctx[start : start + int(k[b])] if start >= 0 else []
            self._pending[b] = (found, m) if found else None
            if not found:
                continue
            n = len(found)
            tokens[b, :n] = torch.tensor(found, dtype=torch.int64)
            num[b] = n
            i = self._buckets(m, n)
            prob[b, :n] = (self.passed[b, i] + s * self.prior[i]) / (self.tried[b, i] + s)
        return Draft(tokens, None, num, 0, prob)

    def update(self, emitted: list[list[int]]) -> None:
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


# ----------------------------------------------------------------------------------------------


class HybridDrafter:
    """Prompt lookup where the context's tail matches earlier text, the model drafter elsewhere.

    A composition of the two drafters: per row and iteration, the copy rule's point-mass draft
    is used when it finds at least ``min_copy`` tokens and its first token is at least as likely
    to be accepted as a model token (the lookup's estimate from the match length against the
    row's running acceptance rate of model drafts, prior ``model_prior``), otherwise the
    model's sampled draft. Copy rows are given to the verifier as one-hot q rows (the
    distribution they came from), so one batch can mix both kinds exactly.
    """

    def __init__(self, model: ModelDrafter | EagleDrafter, copy: PromptLookupDrafter | None = None,
                 min_copy: int = 2, model_prior: float = 0.3) -> None:
        if not 0.0 <= model_prior <= 1.0:
            raise ValueError(f"model_prior must be in [0, 1], got {model_prior}")
        self.model = model
        self.copy = copy or PromptLookupDrafter()
        self.min_copy = min_copy
        self.model_prior = model_prior

    @property
    def name(self) -> str:
        return f"{self.model.name}+ngram"

    def bind(self, target: CausalLM) -> None:
        self.model.bind(target)
        self.copy.bind(target)

    def start(self, ctx: DraftContext) -> None:
        self.ctx = ctx
        self.model.start(ctx)
        self.copy.start(ctx)
        B = len(ctx.prompts)
        strength = 5.0  # pseudo-observations behind model_prior
        self.model_tried = torch.full((B,), strength, dtype=torch.float64)
        self.model_passed = torch.full((B,), strength * self.model_prior, dtype=torch.float64)
        self._model_draft: tuple[list[list[int]], torch.Tensor] | None = None

    def propose(self, k: torch.Tensor, k_lookup: torch.Tensor | None = None) -> Draft:
        """Up to ``k[b]`` model tokens per row, or up to ``k_lookup[b]`` (default ``k[b]``) copied
        ones; copied tokens carry the lookup's acceptance estimates, model tokens NaN."""
        k_copy = k if k_lookup is None else k_lookup
        copied = self.copy.propose(k_copy)
        use_copy = copied.num_draft >= torch.minimum(k_copy, torch.full_like(k_copy, self.min_copy))
        use_copy &= copied.num_draft > 0
        if copied.accept_prob is not None and copied.accept_prob.shape[1]:
            # NaN (no estimate) compares False: such rows fall back to the model
            use_copy &= ~(copied.accept_prob[:, 0] < self.model_passed / self.model_tried)
        k_model = torch.where(use_copy, 0, k)
        drafted = self.model.propose(k_model) if bool((k_model > 0).any()) else None
        if drafted is not None:
            self._model_draft = (drafted.tokens.tolist(), torch.minimum(drafted.num_draft, k_model))
        Kc = copied.tokens.shape[1]
        K = max(int(k.max()) if len(k) else 0, Kc)
        V = self.ctx.vocab_size
        tokens = torch.zeros(len(k), K, dtype=torch.int64)
        # Copies are point masses; so are the model's drafts when it passes no q (greedy): then
        # the whole proposal is, and no dense q is built.
        dense = drafted is not None and drafted.probs is not None
        probs = torch.zeros(len(k), K, V, dtype=self.ctx.dtype) if dense else None
        accept = torch.full((len(k), K), float("nan"), dtype=torch.float64)
        num = torch.where(use_copy, copied.num_draft, k_model)
        if drafted is not None:
            Km = drafted.tokens.shape[1]
            tokens[:, :Km] = drafted.tokens
            if probs is not None:
                probs[:, :Km] = drafted.probs
        tokens[use_copy, :Kc] = copied.tokens[use_copy]
        if probs is not None:
            one_hot = torch.zeros(len(k), Kc, V, dtype=self.ctx.dtype).scatter_(2, copied.tokens[..., None], 1.0)
            probs[use_copy, :Kc] = one_hot[use_copy]
        if copied.accept_prob is not None:
            accept[use_copy, :Kc] = copied.accept_prob[use_copy]
        return Draft(tokens, probs, num, drafted.forwards if drafted is not None else 0, accept)

    @property
    def scores_drafts(self) -> bool:
        return bool(getattr(self.copy, "scores_drafts", False))

    @property
    def uses_target_features(self) -> bool:
        return bool(getattr(self.model, "uses_target_features", False))

    def update(self, emitted: list[list[int]], features: list[torch.Tensor] | None = None) -> None:
        if self._model_draft is not None:  # the model drafts' acceptance, exactly (see agreement)
            tokens, num = self._model_draft
            for b, new in enumerate(emitted):
                passed, tried = agreement(tokens[b][: int(num[b])], new)
                self.model_passed[b] += passed
                self.model_tried[b] += tried
            self._model_draft = None
        if self.uses_target_features:
            self.model.update(emitted, features=features)
        else:
            self.model.update(emitted)
        self.copy.update(emitted)


# ----------------------------------------------------------------------------------------------


class EagleDrafter:
    """Drafts with an EAGLE head over the target's features (see :mod:`verispec.eagle`).

    The head's KV cache holds one *pair* ``(f_{i-1}, x_i)`` per context position, only for
    positions whose target feature is known (the target computes ``f_i`` when it verifies
    position i). A proposal feeds the pending real pairs, then drafts step by step, feeding
    its own predicted feature beside each draft token; those speculative pairs are rolled back
    at ``update``, which brings the target's real features for the emitted tokens.
    """

    uses_target_features = True

    def __init__(self, files: EagleFiles, name: str = "eagle", *, weights: str = "auto") -> None:
        """``weights``: what each draft step reads, ``"auto"`` / ``"fp16"`` / ``"fp32"`` (see
        :func:`verispec.eagle.bind_eagle`)."""
        if weights not in DRAFT_WEIGHTS:
            raise ValueError(f"weights must be one of {DRAFT_WEIGHTS}, got {weights!r}")
        self.files = files
        self.name = name
        self.weights = weights
        self.model: EagleDraftModel | None = None

    def bind(self, target: CausalLM) -> None:
        if not features_match_logits(target.model):
            raise ValueError(f"target {target.name!r} does not compute its logits as lm_head(final hidden "
                             "state); an EAGLE head cannot draft from its features")
        self.model = bind_eagle(self.files, target, weights=self.weights)
        self.vocab_map = self.files.vocab_map

    def start(self, ctx: DraftContext) -> None:
        if self.model is None:
            raise RuntimeError("EagleDrafter.bind(target) must be called before start()")
        if ctx.features is None or len(ctx.features) != len(ctx.prompts):
            raise ValueError("EagleDrafter needs the target's prompt features (DraftContext.features)")
        self.ctx = ctx
        H = self.model.config.hidden_size
        self.lengths = [len(p) for p in ctx.prompts]  # context length per row
        self.pending_tok = [list(p) for p in ctx.prompts]  # x_i not in the head's cache yet
        zero = torch.zeros(1, H, dtype=self.model.dtype)
        self.pending_feat = [[zero, f.to(self.model.dtype)] for f in ctx.features]  # f_{i-1} beside each
        self.runner = KVRunner(self.model, len(ctx.prompts))
        self._real = self.runner.lengths.clone()

    def propose(self, k: torch.Tensor) -> Draft:
        B = len(self.lengths)
        K = int(k.max()) if B else 0
        V = self.ctx.vocab_size
        tokens = torch.zeros(B, K, dtype=torch.int64)
        point_mass = self.ctx.sampling.greedy  # q = one-hot on the argmax: no dense q (Draft.probs)
        probs = None if point_mass else torch.zeros(B, K, V, dtype=self.ctx.dtype)
        if K == 0:
            return Draft(tokens, probs, k.clone(), 0)
        device = self.model.device
        H = self.model.config.hidden_size

        # Feed the pending real pairs (ragged: left-pad with placeholders).
        feed, live = left_pad(self.pending_tok)
        if feed.shape[1] == 0:
            raise RuntimeError("EAGLE head has no pending pair to draft from")
        feats = torch.zeros(*feed.shape, H, dtype=self.model.dtype)
        feats[live] = torch.cat([f for row in self.pending_feat for f in row])  # row-major, as live
        logits, f_hat = self.runner.forward(feed.to(device), live.to(device), logits_to_keep=1,
                                            return_hidden=True, features=feats.to(device))
        self.pending_tok = [[] for _ in range(B)]
        self.pending_feat = [[] for _ in range(B)]
        self._real = self.runner.lengths.clone()  # the cache holds only real pairs up to here
        f_last = f_hat[:, -1:]  # [B, 1, H] predicted feature of the newest position
        positions = torch.tensor(self.lengths, dtype=torch.int64)  # slot 0's absolute position
        for i in range(K):
            if probs is None:
                d = greedy_draft(logits[:, -1], self.vocab_map, V).cpu()
            else:
                d, q = sample_draft(to_target_vocab(logits[:, -1], self.vocab_map, V, self.ctx.dtype),
                                    self.ctx.sampling, self.ctx.method, self.ctx.seeds, positions + i)  # [B], [B, V]
                probs[:, i] = q
            tokens[:, i] = d
            if i + 1 < K:  # the pair (f^, d): the head's own feature beside its own draft
                logits, f_last = self.runner.forward(d[:, None].to(device), logits_to_keep=1,
                                                     return_hidden=True, features=f_last)
        return Draft(tokens, probs, k.clone(), K)

    def update(self, emitted: list[list[int]], features: list[torch.Tensor] | None = None) -> None:
        if features is None:
            raise ValueError("EagleDrafter.update needs the target's features for the emitted tokens")
        self.runner.truncate(self._real.to(self.runner.lengths.device))  # drop speculative pairs
        for b, new in enumerate(emitted):
            if not new:
                continue
            if features[b].shape[0] != len(new):
                raise ValueError(f"row {b}: {len(new)} emitted tokens but {features[b].shape[0]} features")
            self.pending_tok[b].extend(new)
            self.pending_feat[b].append(features[b].to(self.model.dtype))
            self.lengths[b] += len(new)


# ----------------------------------------------------------------------------------------------

DEFAULT_DRAFT_MODEL = "smollm2-135m-draft"
EAGLE_DRAFT = "smollm2-135m-eagle"
EAGLE_BUILTINS = {EAGLE_DRAFT: Path(__file__).parent / "data" / EAGLE_DRAFT}


def eagle_head_dir(spec: str) -> Path | None:
    """The EAGLE head directory ``spec`` names (``"eagle"`` or a built-in head's name, or a
    directory written by ``save_eagle_head``), or None if it names none.

    Raises:
        ModelLoadError: ``spec`` names a built-in head that is not installed.
    """
    from .models import ModelLoadError

    name = EAGLE_DRAFT if spec == "eagle" else spec
    if name in EAGLE_BUILTINS:
        path = EAGLE_BUILTINS[name]
        if not is_eagle_dir(path):
            raise ModelLoadError(f"built-in EAGLE head {name!r} is not installed (expected {path})")
        return path
    return Path(spec) if is_eagle_dir(spec) else None


def load_drafter(spec: str, *, dtype: torch.dtype = torch.float32) -> ModelDrafter | EagleDrafter:
    """A model drafter from a name or path: an :class:`EagleDrafter` for EAGLE heads (``"eagle"``
    is the built-in one; ``"HEAD:fp32"`` / ``"HEAD:fp16"`` choose what its draft steps read, see
    :func:`verispec.eagle.bind_eagle`), else a :class:`ModelDrafter` over ``load_causal_lm(spec)``.

    Raises:
        ModelLoadError: the model cannot be loaded (the message names the argument).
    """
    from .models import ModelLoadError, load_causal_lm

    base, _, weights = spec.rpartition(":")
    head_dir = eagle_head_dir(base) if base else None
    if head_dir is not None:
        if weights not in DRAFT_WEIGHTS:
            raise ModelLoadError(f"{spec!r}: an EAGLE head's weights must be one of {', '.join(DRAFT_WEIGHTS)}, "
                                 f"got {weights!r}")
        return EagleDrafter(load_eagle_head(head_dir, dtype=dtype), name=f"{head_dir.name}:{weights}",
                            weights=weights)
    head_dir = eagle_head_dir(spec)
    if head_dir is not None:  # a built-in head's directory is named after it
        return EagleDrafter(load_eagle_head(head_dir, dtype=dtype), name=head_dir.name)
    return ModelDrafter(load_causal_lm(spec, dtype=dtype))


DEFAULT_DRAFTERS = {"smollm2-135m": EAGLE_DRAFT + "+ngram"}
"""``"default"`` per built-in target: the fastest drafter measured for it (BENCHMARKS.md)."""


def default_drafter(target: str | None) -> str:
    """The drafter spec ``"default"`` stands for with ``target``: its entry in ``DEFAULT_DRAFTERS``,
    else prompt lookup (a draft model or head is made for one target)."""
    return DEFAULT_DRAFTERS.get(target or "", "ngram")


def make_drafter(spec: str, *, target: str | None = None, dtype: torch.dtype = torch.float32) -> Drafter | None:
    """Build a drafter from a command-line style spec.

    ``"none"`` (target-only), ``"ngram"`` (prompt lookup), ``"eagle"`` (the built-in EAGLE head),
    ``"hybrid"`` (prompt lookup, then the built-in draft model), ``"default"`` (for a built-in
    ``target`` its measured fastest drafter, ``DEFAULT_DRAFTERS``: the EAGLE head behind prompt
    lookup for ``smollm2-135m``; prompt lookup for any other target, since a draft model or head
    is made for one target), or a model name / path (see :func:`load_drafter`; ``"NAME+ngram"``
    for that model behind prompt lookup).
    """
    if spec == "none":
        return None
    if spec == "default":
        spec = default_drafter(target)
    if spec == "ngram":
        return PromptLookupDrafter()
    if spec == "hybrid":
        spec = DEFAULT_DRAFT_MODEL + "+ngram"
    if spec.endswith("+ngram"):
        return HybridDrafter(load_drafter(spec[: -len("+ngram")], dtype=dtype))
    return load_drafter(spec, dtype=dtype)


BUILTIN_DRAFT_MODELS = (DEFAULT_DRAFT_MODEL, EAGLE_DRAFT)  # the distilled drafters shipped with verispec
