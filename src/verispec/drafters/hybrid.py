"""Prompt lookup where the context's tail matches earlier text, a model drafter elsewhere."""

from __future__ import annotations

import torch

from ..models import CausalLM
from .base import Draft, DraftAsk, Drafter, DrafterBase
from .lookup import PromptLookupDrafter
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
    """

    scores_drafts = True  # copied tokens carry the lookup's estimates, model tokens NaN

    def __init__(self, model: Drafter, copy: PromptLookupDrafter | None = None,
                 min_copy: int = 2, model_prior: float = 0.3) -> None:
        if not 0.0 <= model_prior <= 1.0:
            raise ValueError(f"model_prior must be in [0, 1], got {model_prior}")
        self.model = model
        self.copy = copy or PromptLookupDrafter()
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
        """Up to ``ask.k[b]`` model tokens per row, or up to ``ask.k_cap[b]`` copied ones."""
        copied = self.copy.propose(ask)
        use_copy = self._use_copy(copied, ask.k_cap.cpu())  # [B]
        k_model = torch.where(use_copy, 0, ask.k.cpu())
        drafted = None
        if bool((k_model > 0).any()):
            drafted = self.model.propose(DraftAsk(k_model, k_model, ask.params, ask.gumbel, ask.seeds,
                                                  ask.vocab_size, ask.dtype, ask.more))
            self._model_draft = (drafted.tokens.tolist(), torch.minimum(drafted.num_draft.cpu(), k_model))
        return _merge(copied, drafted, use_copy, k_model, ask)

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
                 confidence=conf)
